// arm_tuning.h: choosing an op's arm by measurement (`--arms tune`). Every arm of an op gives the
// reference arm's bytes (docs/ARMS.md), so choosing among them by speed cannot change a step's
// outputs, only its time. The search is coordinate descent over the ops in the order given: for
// each op, every candidate arm is timed with the others as chosen so far, and the fastest is kept.
// Pure logic: the caller times a selection (a step captured and replayed with it) and says which
// arms of an op run as themselves for the shape at hand (the contracts' fallbacks are no choice).
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/arms.h"

namespace sg {

// One timed candidate: op and arm names, the step time with it (ms), whether it was kept.
struct ArmTiming {
  std::string op, arm;
  double ms = 0;
  bool chosen = false;
};

struct ArmTuning {
  ArmSelection arms;               // the selection kept
  std::vector<ArmTiming> timings;  // every op's candidates, in search order
  int timed = 0;                   // selections timed (each distinct selection once)
};

// `candidates(op, current)`: the arm indices worth timing for `op` with the other ops as in
// `current` (those that run as themselves; fewer than two: the op is skipped). `time(selection)`:
// the step's time with `selection` (ms, smaller is faster). A selection is timed once and
// remembered. Ties keep the arm that was chosen before the op was searched (then the earlier
// candidate), so the starting selection stays unless another arm is strictly faster.
ArmTuning tune_arms(const ArmSelection& start, std::span<const Op> ops,
                    const std::function<std::vector<size_t>(Op op, const ArmSelection& current)>& candidates,
                    const std::function<double(const ArmSelection&)>& time);

// "postconv: fast 4.61 ms, token_tile 4.60 ms (kept); ..." for logs and reports.
std::string describe_tuning(const std::vector<ArmTiming>& timings);

}  // namespace sg
