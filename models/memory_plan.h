// memory_plan.h: how many device bytes a model needs before the first capture (ARCHITECTURE.md,
// "Memory"): every weight tensor, the per-slot caches (conv state, SSM state, KV cache), the
// activations of the largest step, the static step-metadata blocks and the cuBLAS workspace, as
// a table of named entries. check_fits() turns "it does not fit" into one clear error up front
// instead of an out-of-memory failure in the middle of capture. Pure host code, no CUDA.
//
// Every entry's bytes are count x round_up(one tensor's bytes, 256) (the arena's alignment), so
// the plan is what the arenas will carve, not just the raw element bytes.
//
// Dtypes: weights in PlanOptions::weight_dtype, except the GDN conv1d weight, A_log and dt_bias,
// which are f32 (what the conv and post-conv kernels read). The "model dtype" of the conv state
// and the KV cache is weight_dtype; the SSM state is f32; activations use act_dtype except g,
// beta and the logits (f32). A tied lm_head is the embedding matrix, counted once.
//
// Activations (one set, shared by every layer; T = max(max_decode_batch, max_prefill_tokens),
// R = logits rows = max(max_decode_batch, max_prefill_seqs): decode keeps every row's logits,
// prefill only the last token of each sequence):
//   residual, normed, mixer/MLP output  3 x [T, H]
//   gdn.proj   [T, C + Hv*Dv + 2*Hv]    (qkv | z | b | a)
//   gdn.conv_out [T, C];  gdn.qkv (post-conv q | k | v) [T, C];  gdn.g, gdn.beta [T, Hv] f32
//   gdn.core_out [T, Hv*Dv] (delta rule);  gdn.norm_out [T, Hv*Dv] (gated RMSNorm)
//   attn.proj  [T, 2*Hq*D + 2*Hkv*D]    (q+gate | k | v);  attn.out [T, Hq*D]
//   mlp.gate_up [T, 2*I];  mlp.act [T, I]
//   lm_head.in [R, H];  logits [R, V] f32
// The GDN and attention scratch are not aliased (a conservative plan); kernel-private scratch
// (for example a chunked delta rule's WY matrices) is not modelled beyond the cuBLAS workspace.
//
// Step metadata: one static device block per step kind, sized for its largest key (decode rows =
// max_decode_batch; prefill bucket = max_prefill_tokens with max_prefill_seqs sequences); every
// smaller key's image fits in it. The pinned host staging copies are host memory, not counted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/numeric.h"
#include "models/qwen35_config.h"

namespace sg {

enum class MemoryCategory : uint8_t { weights, conv_state, ssm_state, kv_cache, activations, step_metadata, workspace };
inline constexpr int kMemoryCategories = 7;
std::string_view category_name(MemoryCategory c);  // "weights", "conv state", ...

struct MemoryEntry {
  std::string name;   // e.g. "layers.*.linear_attn.in_proj_qkv.weight"
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

struct PlanOptions {
  int num_slots = 32;
  int max_context = 4096;          // tokens per slot (KV cache length)
  int max_decode_batch = 32;       // largest decode key (rows)
  int max_prefill_tokens = 32768;  // largest prefill token bucket
  int max_prefill_seqs = 32;       // sequences in a prefill key
  DType weight_dtype = DType::bf16;
  DType act_dtype = DType::bf16;
  size_t cublas_workspace_bytes = size_t{32} << 20;
};

// Throws sg::Error when the config is invalid or an option is < 1.
MemoryPlan plan_memory(const Qwen35Config& c, const PlanOptions& o);

// Throws sg::Error "plan needs X but the device has Y free" followed by the table when
// plan.total > device_free_bytes.
void check_fits(const MemoryPlan& plan, size_t device_free_bytes);

}  // namespace sg
