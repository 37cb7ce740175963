// memory_plan.h: how many device bytes a model step needs before anything is allocated, as a
// table of named entries per category (weights, conv state, ssm state, kv cache, activations, step
// metadata, workspace). It is the step's own layout (step_layout.h) run on a measuring arena: the
// plan is what ModelStep's arena carves, tensor for tensor, with the arena's 256-byte alignment.
// Per-layer tensors of one shape are one entry ("layers.*.mlp.gate_up", count = layers).
// check_fits() turns "it does not fit" into one clear error up front instead of an out-of-memory
// failure in the middle of capture. Outside the plan: the cuBLAS workspace (allocated with the
// step's handle before the check, so the free memory the check sees is net of it) and what CUDA
// graphs take when they are instantiated (stepgraph capture measures that). Pure host code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/arena.h"
#include "engine/error.h"
#include "models/qwen35_config.h"
#include "models/step_layout.h"

namespace sg {

enum class MemoryCategory : uint8_t { weights, conv_state, ssm_state, kv_cache, activations, step_metadata, workspace };
inline constexpr int kMemoryCategories = 7;
std::string_view category_name(MemoryCategory c);  // "weights", "conv state", ...

struct MemoryEntry {
  std::string name;   // e.g. "layers.*.linear_attn.in_proj"
  std::string shape;  // one tensor's shape and dtype, e.g. "[8192, 2560] bf16"
  int64_t count = 1;  // tensors of this shape (one per layer for per-layer tensors)
  size_t bytes = 0;   // count x round_up(one tensor, 256)
  MemoryCategory category = MemoryCategory::weights;
};

struct MemoryPlan {
  std::vector<MemoryEntry> entries;
  size_t total = 0;  // sum of every entry's bytes
  size_t bytes_of(MemoryCategory c) const;
  // One line per entry (category, name, shape, count, bytes), then one subtotal per category and
  // the total; byte figures as format_bytes prints them.
  std::string table() const;
};

// The plan of a step for `c` under `p` (the layout's parameters; the workspace sizes are the
// caller's). Throws sg::Error when the config is invalid, a count is < 1 (max_prefill_tokens may
// be 0: no prefill step) or head_rows is outside [0, vocab]. A tensor-parallel rank's plan is
// plan_memory(rank config, params with head_rows = its vocabulary share) (tp_plan.h).
MemoryPlan plan_memory(const Qwen35Config& c, const StepLayoutParams& p);
// The plan of a measuring arena that a layout ran on (entries grouped as above; a section name
// outside the categories is an sg::Error).
MemoryPlan plan_of(const Arena& measured);

// The error of check_fits: a step that the device's free memory cannot hold (callers that know
// why the step is that large catch it to say so).
class PlanDoesNotFit : public Error {
 public:
  using Error::Error;
};

// Throws PlanDoesNotFit "plan needs X but the device has Y free" followed by the table when
// plan.total > device_free_bytes.
void check_fits(const MemoryPlan& plan, size_t device_free_bytes);

}  // namespace sg
