// reference_model.h: the CPU reference forward of the whole Qwen3.5 text model (docs/MODEL.md),
// composed from the reference ops in kernels/ref/ (nothing is re-implemented here), with per-slot
// state (conv state, SSM state and KV cache per layer) so that prefill with history, decode and
// greedy generation work the way the GPU model step will.
//
// Weights: HostWeights keyed by Hugging Face names (text-only layout, `model.layers.{i}...`):
//   model.embed_tokens.weight [V, H]
//   model.layers.{i}.input_layernorm.weight [H], .post_attention_layernorm.weight [H]
//   model.layers.{i}.mlp.{gate_proj,up_proj}.weight [I, H], .mlp.down_proj.weight [H, I]
//   GDN layers:       model.layers.{i}.linear_attn.in_proj_qkv.weight [C, H], in_proj_z [Hv*Dv, H],
//                     in_proj_b [Hv, H], in_proj_a [Hv, H], conv1d.weight [C, 1, K], dt_bias [Hv],
//                     A_log [Hv], norm.weight [Dv], out_proj.weight [H, Hv*Dv]
//   attention layers: model.layers.{i}.self_attn.q_proj.weight [2*Hq*D, H], k_proj / v_proj
//                     [Hkv*D, H], o_proj [H, Hq*D], q_norm.weight / k_norm.weight [D]
//   model.norm.weight [H];  lm_head.weight [V, H] (optional when tie_word_embeddings)
// (dt_bias and A_log have no ".weight" suffix, as in HF.)
//
// One forward, per layer (x is the residual stream, [T, H]):
//   h = rmsnorm(x, input_layernorm);  x = x + mixer(h);  h = rmsnorm(x, post_attention_layernorm);
//   x = x + swiglu_mlp(h);  logits = lm_head(rmsnorm(x, model.norm)).
// GDN mixer: linear projections -> conv_fwd / conv_update (SiLU, no bias) -> postconv (split q|k|v,
//   L2 norm, g, beta) -> delta rule (prefill: recurrent by default, chunked on request; decode:
//   delta_rule_decode) -> gated_rmsnorm with z -> out_proj.
// Attention mixer: q_proj -> split_q_gate; k_proj, v_proj; q_norm / k_norm (zero-centred RMSNorm over
//   D); partial RoPE (rotary dim = int(D * partial_rotary_factor), absolute positions); causal GQA
//   softmax attention over the slot's KV cache + the new tokens; * sigmoid(gate); o_proj.
//
// Precision (ReferenceOptions::act):
//   Store::f32 (default): every activation stays f32, for parity with Hugging Face in f32.
//   Store::bf16: the model emulates a bf16 GPU step: the weights are rounded to bf16 when the model
//     is built, and every activation a bf16 step would store is rounded to bf16: the embedding rows,
//     the residual stream after every add, every norm output, every projection output, the conv
//     output and conv state, q/k/v after post-conv, the delta-rule output, q/k after norm and again
//     after RoPE (so the KV cache holds bf16 values), the attention output, the MLP intermediates.
//     g and beta are f32 in both modes, the SSM state f32 (bf16 values with ssm_state = bf16,
//     independently of act), and the logits are always f32 (lm_head
//     accumulates in double and rounds once to f32, as a GEMM writing f32 logits would).
//
// Errors: every public call validates its whole batch before touching any state and throws
// std::invalid_argument with a message naming the problem (token id outside [0, V), slot outside
// [0, num_slots), a slot used twice in one batch, an empty sequence, context overflow: more than
// max_context tokens in a slot). A failed call leaves every slot as it was.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ref/attention_ref.h"
#include "kernels/ref/ref_common.h"
#include "models/qwen35_config.h"

namespace sg {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, numel() values
  int64_t numel() const;
};
using HostWeights = std::map<std::string, HostTensor>;

// Deterministic synthetic weights for `c` (the same bytes on every machine: a counter-based
// splitmix64 stream per tensor, keyed by (seed, tensor name), no std:: distributions). Every value
// is bf16-representable, so a bf16 model holds exactly the same weights. Scales keep activations
// finite and O(1) through any number of layers (pre-norm residual blocks):
//   embed_tokens                         U(-1, 1)
//   every linear weight [out, in]        U(-a, a), a = sqrt(3 / in)  (std 1/sqrt(in), so a unit-RMS
//                                        input gives O(1) outputs); lm_head likewise (when untied)
//   conv1d.weight [C, 1, K]              U(-a, a), a = sqrt(3 / K)
//   zero-centred norm weights            U(-0.1, 0.1)  (input/post-attention/final norms,
//                                        q_norm, k_norm: the scale is 1 + w, so near 1)
//   GDN norm.weight (used as is)         1 + U(-0.1, 0.1)
//   A_log                                log(U(1, 16))  (decay rate A in [1, 16])
//   dt_bias                              U(-0.5, 0.5)
// lm_head.weight is omitted when the config ties the embeddings. Throws sg::Error, before
// allocating, when the f32 weights do not fit the host memory that is available (host_memory.h).
HostWeights synthetic_weights(const Qwen35Config& c, uint64_t seed);

class Checkpoint;  // models/safetensors.h

// Reads every tensor the config needs from a Hugging Face checkpoint (text-model names, see
// Checkpoint; BF16 / F16 / F32 converted exactly to f32). lm_head.weight is read only when the
// embeddings are not tied (a tied checkpoint that still stores it is fine: it is ignored). A
// conv1d.weight stored as [C, K] is accepted as [C, 1, K]. Throws std::invalid_argument listing
// every missing, misshapen or non-float tensor, every tensor holding a NaN or an infinity (with
// the count, the first such value and its index, and the file) and every text-model tensor the
// config does not use (a bias, a layer past num_hidden_layers: another architecture), except those
// unused_text_tensor names; throws sg::Error, before reading, when the f32 weights do not fit the
// host memory that is available (host_memory.h).
HostWeights load_weights(const Checkpoint& ckpt, const Qwen35Config& c);

// The text-model tensors a checkpoint may hold that the model does not read, as Hugging Face drops
// them too: lm_head.weight when the embeddings are tied, and any '...rotary_emb.inv_freq' buffer
// (recomputed from the config).
bool unused_text_tensor(const std::string& name, const Qwen35Config& c);

// A shape as "[a, b, c]", for messages about tensors.
std::string shape_str(const std::vector<int64_t>& s);

// Checks that `w` holds every tensor the config needs with the expected shape (lm_head optional
// when tied); throws std::invalid_argument listing every missing or misshapen tensor. head_rows > 0:
// lm_head.weight is [head_rows, H], tied or not (a tensor-parallel rank's share, tp_plan.h).
void check_weights(const Qwen35Config& c, const HostWeights& w, int64_t head_rows = 0);

// The HF name of every tensor the model reads, with its shape (lm_head included only when untied,
// or as [head_rows, H] when head_rows > 0).
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_weights(const Qwen35Config& c,
                                                                           int64_t head_rows = 0);

struct ReferenceOptions {
  ref::Store act = ref::Store::f32;  // activation storage, see the header comment
  bool chunked_prefill = false;      // delta rule in prefill: false = recurrent (bit-exact with
                                     // decode), true = chunked WY form (double inside)
  int chunk = 64;                    // chunk size of the chunked form
  // How the GDN recurrent state is kept between calls (the ssm-state setting): bf16 rounds it as
  // the GPU step does (delta_rule_ref.h: after each decode row, once at the end of a prefill).
  ref::Store ssm_state = ref::Store::f32;
  // A tensor-parallel rank (tp_plan.h, tp_reference.h): its mixers' and MLPs' outputs [T, H] go
  // through all_reduce (the same calls in the same order on every rank; it must keep the size)
  // before the residual add, and its LM head has head_rows rows (0: the vocabulary), so its logits
  // are [N, head_rows]. An all_reduce that throws ends the call with the earlier layers' states
  // already advanced: the slots it touched must be reset.
  std::function<void(std::vector<float>&)> all_reduce;
  int64_t head_rows = 0;
  // Called after each layer of a forward with the layers done (1..layers) and the model's layers:
  // progress for long prefills. Returning false ends the call with ReferenceInterrupted, the
  // earlier layers' states of the slots it touched already advanced (reset them to use them again).
  std::function<bool(int done, int layers)> on_layer;
};

// What a forward throws when ReferenceOptions::on_layer asked it to stop.
struct ReferenceInterrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One sequence of a prefill batch: new tokens for `slot`, continuing from the slot's current
// state (the tokens it has already consumed are its history; an empty slot starts fresh).
struct Sequence {
  int slot = 0;
  std::vector<int64_t> tokens;
};

class ReferenceModel {
 public:
  // Takes the weights (checked with check_weights; rounded to bf16 when options.act is bf16).
  // num_slots >= 1 independent sequences, each up to max_context >= 1 tokens (prompt + generated).
  // The states and KV caches are checked against the available host memory before they are
  // allocated (reference_memory.h): sg::Error with the sizes when they do not fit.
  ReferenceModel(const Qwen35Config& config, HostWeights weights, int num_slots, int64_t max_context,
                 ReferenceOptions options = {});

  // Prefill: every sequence's tokens (one varlen batch, each sequence continuing from its slot's
  // state); returns the logits of each sequence's last token, [N, V] row-major.
  std::vector<float> prefill(const std::vector<Sequence>& batch);
  // Same forward, but returns the logits of every new token, packed in batch order, [T, V] with
  // T = the total number of new tokens.
  std::vector<float> prefill_all_logits(const std::vector<Sequence>& batch);

  // Decode: one new token per row for slots[b] (distinct); returns logits [B, V].
  std::vector<float> decode(const std::vector<int>& slots, const std::vector<int64_t>& tokens);

  // Forgets the slot's sequence: zero conv and SSM states, empty KV caches.
  void reset(int slot);

  // Greedy generation on `slot` (reset first): prefill `prompt`, then take argmax tokens (ties ->
  // lowest id) and feed them back; returns the max_new generated tokens (not the prompt).
  // Needs prompt.size() + max_new - 1 <= max_context and the whole LM head (no head_rows).
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int max_new, int slot = 0);

  int64_t length(int slot) const;  // tokens consumed by the slot so far
  const Qwen35Config& config() const { return cfg_; }
  const ReferenceOptions& options() const { return opt_; }
  int num_slots() const { return num_slots_; }
  int64_t max_context() const { return max_context_; }
  int rotary_dim() const { return rotary_; }

 private:
  struct GdnState {
    std::vector<float> conv;  // [num_slots, C, K-1]
    std::vector<float> ssm;   // [num_slots, Hv, Dk, Dv] f32
  };
  // A packed batch: tokens of all rows, per-row slot, cu_seqlens, absolute positions.
  struct Packed;

  Packed pack_prefill(const std::vector<Sequence>& batch) const;  // validates, then packs
  void check_slot(int slot, const char* what) const;
  void check_token(int64_t token, const char* what) const;
  std::vector<float> forward(const Packed& p, bool decode_step, bool all_logits);
  void gdn_layer(int layer, const Packed& p, bool decode_step, const float* h, float* out);
  void attention_layer(int layer, const Packed& p, bool decode_step, const float* h, float* out);
  const float* w(const std::string& name) const;
  const float* wl(int layer, const std::string& suffix) const;

  Qwen35Config cfg_;
  HostWeights weights_;
  ReferenceOptions opt_;
  int num_slots_;
  int64_t max_context_;
  int rotary_;
  std::vector<bool> is_attention_;             // per layer
  std::vector<int> state_index_;               // per layer: index into gdn_ or kv_
  std::vector<GdnState> gdn_;                  // per GDN layer
  std::vector<std::vector<ref::KvCache>> kv_;  // per attention layer, per slot
  std::vector<int64_t> len_;                   // per slot: tokens consumed
};

}  // namespace sg
