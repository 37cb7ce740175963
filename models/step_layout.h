// step_layout.h: the model step's device memory, tensor by tensor, stated once: the weights (the
// fused projections as the kernels read them), the per-slot caches, the activations of the largest
// step, the workspaces and the static step-metadata block, carved from an arena in one order.
// ModelStep carves its arena with it (first a measuring arena for the size, then the real one), and
// the memory plan (memory_plan.h) runs it on a measuring arena, so the plan is what the step
// allocates. Pure host code: the workspace sizes, which come from the kernels' size functions, are
// parameters. Each tensor is taken under a memory category (Arena::section).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/arena.h"
#include "engine/tensor.h"
#include "models/qwen35_config.h"

namespace sg {

struct StepGdnLayer {
  TensorView in_proj;         // [C + Hv*Dv + 2*Hv, H]  qkv | z | b | a
  TensorView conv_w;          // [C, K] f32
  TensorView A_log, dt_bias;  // [Hv] f32
  TensorView norm_w;          // [Dv]
  TensorView out_proj;        // [H, Hv*Dv]
  TensorView conv_state;      // [slots, C, K-1] act dtype
  TensorView ssm_state;       // [slots, Hv, Dk, Dv] StepLayoutParams::ssm_state (f32 or bf16)
};
struct StepAttnLayer {
  TensorView qkv_proj;          // [2*Hq*D + 2*Hkv*D, H]  q_proj (query|gate per head) | k | v
  TensorView q_norm, k_norm;    // [D]
  TensorView o_proj;            // [H, Hq*D]
  TensorView k_cache, v_cache;  // [slots, max_context, Hkv, D] act dtype
};
struct StepLayer {
  bool attention = false;
  TensorView in_norm, post_norm;  // [H]
  TensorView gate_up;             // [2I, H]: gate_proj and up_proj rows, in groups of 8 (or halves)
  TensorView down;                // [H, I]
  StepGdnLayer gdn;               // empty views in an attention layer
  StepAttnLayer attn;             // empty views in a GDN layer
};
struct StepActs {
  // R = max(max_decode_batch, max_prefill_tokens) rows.
  TensorView x, h, mix;  // [R, H]
  // [StepLayoutParams::mix_f32_rows, H] f32: the residual projections' unrounded output (empty unless set)
  TensorView mix32;
  TensorView proj;             // [R * Pmax] flat: GDN / attention / MLP projection output
  TensorView conv_out;         // [R, C]
  TensorView q, k, v;          // [R, Hk, Dk], [R, Hk, Dk], [R, Hv, Dv]
  TensorView g, beta;          // [R, Hv] f32
  TensorView core;             // [R, Hv, Dv] delta-rule output, gated-normed in place
  TensorView delta_ws;         // the two-kernel delta-rule prefill's chunk records, i8 (empty unless it runs)
  TensorView aq, agate, aout;  // [R, Hq, D]
  TensorView attn_ws;          // attention split-K workspace (f32)
  TensorView rope;             // [max_context, rotary_dim] f32 rotary table (rope_table_fill)
  TensorView mlp;              // [R, I]
  TensorView logits;           // [L, V] f32 (V: head_rows when set), L = max(max_decode_batch, max_prefill_seqs)
  TensorView tokens;           // [L] i32
  TensorView argmax_ws;        // split argmax partials, i8
  TensorView argmax_counters;  // [L] i32, zero between launches
  TensorView tp_pairs;  // [L * sizeof(ArgmaxPair)] i8: the rank's (best logit, token id) a row; tensor parallel only
  TensorView
      tp_gathered;  // [tp_ranks * L * sizeof(ArgmaxPair)] i8: every rank's pairs, rank after rank; tensor parallel only
  TensorView gemm_ws;        // skinny GEMM split-K partials (f32)
  TensorView gemm_counters;  // [max N / 64] i32, zero between launches
  TensorView meta;           // [meta_bytes] i8: the static step-metadata block
};
struct StepTensors {
  TensorView embed, lm_head, final_norm;  // lm_head is embed when the preset ties them
  std::vector<StepLayer> layers;
  StepActs a;
};

struct StepLayoutParams {
  DType act = DType::bf16;       // weights (but conv1d, A_log, dt_bias: f32), conv state, KV cache, activations
  DType ssm_state = DType::f32;  // the GDN recurrent state (f32 or bf16)
  int num_slots = 0, max_context = 0;
  int max_decode_batch = 0;
  int max_prefill_tokens = 0;  // 0: no prefill step
  int max_prefill_seqs = 0;
  // The workspaces, from the kernels' size functions (the caller's): the attention split-K
  // partials, the split argmax partials, and the skinny GEMM's partials for an [n, k] projection
  // weight (0 when it never runs split). Empty or 0: none beyond the minimum view.
  size_t attn_workspace_bytes = 0, argmax_workspace_bytes = 0;
  size_t delta_workspace_bytes = 0;  // the two-kernel delta-rule prefill's (0: it does not run)
  std::function<size_t(int n, int k)> gemm_workspace_bytes;
  size_t meta_bytes = 0;  // the static step-metadata block (step_meta_bytes)
  // Rows of the LM head and width of the logits: 0 = the vocabulary; a tensor-parallel rank's
  // share of it otherwise (tp_plan.h; the head is then its own tensor even when the model ties it).
  int64_t head_rows = 0;
  // Ranks of a tensor-parallel step (0: none): the greedy token's pairs and their all-gather.
  int tp_ranks = 0;
  // Rows of the f32 output of the projections before each RMSNorm (the mix-round norm setting,
  // step_settings.h; 0: none).
  int mix_f32_rows = 0;
};

// Rows of the activations (R), of the logits (L) and the width of the shared projection output.
int step_act_rows(int max_decode_batch, int max_prefill_tokens);
int step_logit_rows(int max_decode_batch, int max_prefill_tokens, int max_prefill_seqs);
int step_proj_width(const Qwen35Config& c);
// The static metadata block: the image of the largest decode key or prefill key (step_metadata.h).
size_t step_meta_bytes(int max_decode_batch, int max_prefill_tokens, int max_prefill_seqs);

// Carves every tensor of a step for `c` from `a`, in one fixed order, each under its memory
// category (Arena::section: weights, conv state, ssm state, kv cache, activations, workspace, step
// metadata). On a measuring arena the views have null data and a.used() is the step's size.
StepTensors lay_out_step(Arena& a, const Qwen35Config& c, const StepLayoutParams& p);

}  // namespace sg
