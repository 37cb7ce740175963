// ab_compare.h: the comparison `stepgraph ab` reports: per repetition samples of each side (the
// whole step's replay time from CUDA events, and each op family's summed node time from CUPTI),
// their median and spread, a verdict per row, the token and logits hashes of both sides, and the
// report as text and JSON. Pure host code.
//
// The verdict (B against A; smaller times are better):
//   noise = max(A.max - A.min, B.max - B.min)   (the wider of the two spreads over the repetitions)
//   d     = B.median - A.median
//   |d| > noise: "faster" when d < 0, "slower" when d > 0; otherwise "neutral".
// A family only one side has (gdn.prefill=fused replaces conv.fwd and postconv) is "only A" or
// "only B".
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gpu_clocks.h"
#include "tools/cli/spread.h"

namespace sg::cli {

enum class Verdict { faster, slower, neutral, only_a, only_b };
std::string_view verdict_name(Verdict v);  // "faster", "slower", "neutral", "only A", "only B"

// B's verdict against A (the rule above).
Verdict verdict(const Spread& a, const Spread& b);

// One row: a name and each side's samples (one per repetition; empty when the side has none).
struct ComparedRow {
  std::string name;
  std::vector<double> a, b;
  std::optional<Spread> sa, sb;  // of a and b, when not empty
  Verdict v = Verdict::neutral;
  double diff() const;   // B median - A median (0 unless both sides have samples)
  double noise() const;  // max of the two spreads (0 unless both sides have samples)
};
ComparedRow compare_row(std::string name, std::vector<double> a, std::vector<double> b);

// Per op family, one value per repetition (us): family -> samples.
using FamilySamples = std::map<std::string, std::vector<double>>;
// One row per family of either side, the larger family (by the larger of the two medians) first.
std::vector<ComparedRow> compare_families(const FamilySamples& a, const FamilySamples& b);

struct AbSide {
  std::string selection;  // Selection::describe()
  std::string arms;       // ArmSelection::describe() of the step
  std::string settings;   // the resolved settings ("delta-prefill=chunked,...")
  uint64_t token_hash = 0, logits_hash = 0;
  std::optional<ClockSummary> clocks;  // over the side's event-timed replays; none where NVML could not sample
};

struct AbReport {
  std::string device, preset, graph;  // graph: "decode b=32 (context 1024)", "prefill 32 x 1024 tokens (bucket 32768)"
  int reps = 0, replays = 0, node_replays = 0, hash_steps = 0;
  int planned_reps = 0;  // reps asked for; more than reps when a Ctrl-C ended the run early
  AbSide a, b;
  ComparedRow step;                   // ms per step (CUDA events), named "whole step (ms)"
  std::string clocks_unavailable;     // why the clocks were not sampled (empty when they were)
  std::vector<ComparedRow> families;  // us per step (CUPTI node medians summed per family)
  // Equal hashes are required when both sides resolve to the same settings (arms are
  // byte-identical), merely expected otherwise (settings change the arithmetic within tolerance).
  bool hashes_must_match = true;
  bool tokens_equal() const { return a.token_hash == b.token_hash; }
  bool logits_equal() const { return a.logits_hash == b.logits_hash; }
  // Hashes differ although they must match: a bug in an arm (the command then exits with 1).
  bool hash_failure() const { return hashes_must_match && !(tokens_equal() && logits_equal()); }
};

// The comparison table, the clocks of each side's timed replays (and a caution where they differed:
// compare_clocks), the hash lines and a one-line summary.
std::string format_ab_report(const AbReport& r);
// The caution about the sides' clocks (compare_clocks, with what it means for the verdict); empty
// when they ran alike or either side has no clocks.
std::string clocks_caution(const AbReport& r);
nlohmann::json ab_json(const AbReport& r);

}  // namespace sg::cli
