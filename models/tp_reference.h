// tp_reference.h: the CPU reference model split over R ranks the way the GPUs run it
// (tp_plan.h), to check the plan end to end on the CPU: one ReferenceModel a rank, on the rank's
// config and tensors (shard_weights), each on its own thread; where the GPUs all-reduce, the
// ranks' [T, hidden] outputs are summed in rank order (rank 0 + rank 1 + ..., so every rank holds
// the same bytes); the greedy token is chosen from the ranks' (largest logit, first index) pairs
// (tp_greedy). Pure host code.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "models/qwen35_config.h"
#include "models/reference_model.h"

namespace sg {

struct TpGeneration {
  std::vector<int64_t> tokens;      // the max_new greedy tokens
  std::vector<float> first_logits;  // the prompt's last-token logits [V], the ranks' rows in order
};

// A fault drill for the tests: rank `rank` throws at its `collective`-th collective (0-based,
// all-reduces and greedy gathers in the order it reaches them); -1: none.
struct TpFault {
  int rank = -1, collective = -1;
};

// Greedy generation of max_new tokens after `prompt` on `ranks` CPU ranks (slot 0 of models with
// one slot of prompt.size() + max_new positions). Options apply to every rank (all_reduce and
// head_rows are the driver's). The sums are f32, also with bf16 activations (where a GPU's bf16
// all-reduce would round them). Throws sg::Error for a bad prompt, max_new < 1 or a plan the model
// does not allow (tp_plan); when a rank fails, every rank stops at its next collective and the
// first failure is thrown (ReferenceModel's own errors as it throws them).
// keep_going (optional) is called on rank 0's thread after each token with the count so far; once
// it returns false the ranks stop together after that token (what was generated is returned).
TpGeneration tp_generate(const Qwen35Config& c, const HostWeights& w, int ranks, const std::vector<int64_t>& prompt,
                         int max_new, ReferenceOptions options = {}, TpFault fault = {},
                         const std::function<bool(int)>& keep_going = {});

}  // namespace sg
