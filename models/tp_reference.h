// tp_reference.h: the CPU reference model split over R ranks the way the GPUs run it
// (tp_plan.h), to check the plan end to end on the CPU: one ReferenceModel a rank, on the rank's
// config and tensors (shard_weights), each on its own thread; where the GPUs all-reduce, the
// ranks' [T, hidden] outputs are summed in rank order (rank 0 + rank 1 + ..., so every rank holds
// the same bytes); the greedy token is chosen from the ranks' (largest logit, first index) pairs
// (tp_greedy). Pure host code.
#pragma once
#include <cstdint>
#include <vector>

#include "models/qwen35_config.h"
#include "models/reference_model.h"

namespace sg {

struct TpGeneration {
  std::vector<int64_t> tokens;      // the max_new greedy tokens
  std::vector<float> first_logits;  // the prompt's last-token logits [V], the ranks' rows in order
};

// Greedy generation of max_new tokens after `prompt` on `ranks` CPU ranks (slot 0 of models with
// one slot of prompt.size() + max_new positions). Options apply to every rank (all_reduce and
// head_rows are the driver's). Throws sg::Error for a plan the model does not allow (tp_plan) and
// what ReferenceModel throws for bad tokens or lengths (every rank checks the same input first).
TpGeneration tp_generate(const Qwen35Config& c, const HostWeights& w, int ranks, const std::vector<int64_t>& prompt,
                         int max_new, ReferenceOptions options = {});

}  // namespace sg
