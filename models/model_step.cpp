// model_step.cpp: construction, arena layout, weights (host upload and GPU synthetic), caches, the
// public step API. The launch sequence and capture are in model_step_launch.cpp.
#include "models/model_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "engine/error.h"
#include "graphs/capture_sizes.h"
#include "kernels/argmax.h"
#include "kernels/attention.h"
#include "kernels/attention_decode_mma.h"
#include "kernels/attn_prep.h"
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/fault.h"
#include "kernels/fill.h"
#include "kernels/skinny_gemm.h"
#include "models/memory_plan.h"
#include "models/weight_parts.h"

namespace sg {
namespace {

// Downloads `bytes` bytes from `src` (stream-ordered, then synchronised); the first error.
cudaError_t download_into(uint8_t* dst, const void* src, size_t bytes, cudaStream_t s) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
  return e != cudaSuccess ? e : cudaStreamSynchronize(s);
}

// n f32 values as dtype t (bf16 rounded to nearest even, or f32 as they are).
std::vector<uint8_t> as_dtype(DType t, const float* v, size_t n) {
  std::vector<uint8_t> host(n * dtype_size(t));
  if (t == DType::bf16) {
    auto* p = reinterpret_cast<bf16_t*>(host.data());
    for (size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(v[i]);
  } else {
    require(t == DType::f32, "weights must be bf16 or f32, got {}", dtype_name(t));
    std::memcpy(host.data(), v, n * sizeof(float));
  }
  return host;
}

// Uploads a checkpoint tensor's values into its part of a step weight (weight_parts.h), converted
// to the weight's dtype: contiguous rows, or groups of rows every 2 groups (one 2-D copy).
void upload_part(const WeightPart& part, const HostTensor& h, cudaStream_t s) {
  const int64_t cols = weight_part_cols(part), rows = part.dst.rank >= 1 ? part.dst.dim(0) : 0;
  const bool fits = h.numel() == part.rows * cols && part.rows >= 1 && part.row0 >= 0 &&
                    (part.group == 0 || part.rows % part.group == 0) && weight_part_row(part, part.rows - 1) < rows;
  require(fits, "load_host_weights: {} ({} values) does not fit {} {} at row {}", part.name, h.numel(), part.tensor,
          part.dst.describe(), part.row0);
  const size_t es = dtype_size(part.dst.dtype), row_bytes = static_cast<size_t>(cols) * es;
  const std::vector<uint8_t> host = as_dtype(part.dst.dtype, h.data.data(), h.data.size());
  char* base = static_cast<char*>(part.dst.data) + static_cast<size_t>(part.row0) * row_bytes;
  if (part.group == 0) {
    check(cudaMemcpyAsync(base, host.data(), host.size(), cudaMemcpyHostToDevice, s));
  } else {
    const size_t group_bytes = static_cast<size_t>(part.group) * row_bytes;
    check(cudaMemcpy2DAsync(base, 2 * group_bytes, host.data(), group_bytes, group_bytes,
                            static_cast<size_t>(part.rows / part.group), cudaMemcpyHostToDevice, s));
  }
  check(cudaStreamSynchronize(s));  // `host` is freed on return
}

// The smallest bucket that holds the batch's tokens (an error when none does).
int prefill_bucket(const std::vector<int>& buckets, const std::vector<PrefillRequest>& batch, int max_tokens) {
  require(!buckets.empty(), "this model step has no prefill buffers (max_prefill_tokens is 0)");
  size_t n = 0;
  for (const auto& r : batch) n += r.tokens.size();
  const auto bucket =
      n <= static_cast<size_t>(max_tokens) ? pad_tokens_to_bucket(buckets, static_cast<int>(n)) : std::nullopt;
  require(bucket.has_value(), "prefill of {} tokens: more than max_prefill_tokens ({}); split the batch", n,
          max_tokens);
  return *bucket;
}

}  // namespace

ModelStep::ModelStep(const Qwen35Config& config, const ModelStepOptions& opts)
    : cfg_(config),
      opts_(opts),
      graphs_(stream_.get(), [this](const GraphKey& key, NodeRecorder* rec) { launch_sequence(step_key(key), rec); }) {
  cfg_.validate("ModelStep");
  if (opts_.graph_max == 0) opts_.graph_max = opts_.max_decode_batch;
  require(opts_.max_decode_batch >= 1 && opts_.graph_max >= 1 && opts_.graph_max <= opts_.max_decode_batch,
          "need 1 <= graph_max ({}) <= max_decode_batch ({})", opts_.graph_max, opts_.max_decode_batch);
  require(opts_.num_slots >= 1 && opts_.max_context >= 1, "need num_slots ({}) >= 1 and max_context ({}) >= 1",
          opts_.num_slots, opts_.max_context);
  require(opts_.act == DType::bf16 || opts_.act == DType::f32, "activations must be bf16 or f32, got {}",
          dtype_name(opts_.act));
  require(opts_.ssm_state == DType::bf16 || opts_.ssm_state == DType::f32, "the ssm state must be f32 or bf16, got {}",
          dtype_name(opts_.ssm_state));
  if (opts_.max_prefill_seqs == 0) opts_.max_prefill_seqs = opts_.max_decode_batch;
  require(opts_.max_prefill_tokens >= 0 && opts_.max_prefill_seqs >= 1 && opts_.max_prefill_seqs <= 65535,
          "need max_prefill_tokens ({}) >= 0 and 1 <= max_prefill_seqs ({}) <= 65535", opts_.max_prefill_tokens,
          opts_.max_prefill_seqs);
  require(opts_.fault_op.empty() || (opts_.fault_layer >= -1 && opts_.fault_layer < cfg_.layers),
          "fault drill: layer {} outside [-1, {})", opts_.fault_layer, cfg_.layers);
  checks_.sync_each = opts_.check_nodes;
  drill_runs_.arm(checks_, opts_.fault_layer, opts_.fault_op, opts_.fault_run, &fault_inject);
  faults_ = StepFaults(opts_.check_nodes ? std::string()
                                         : std::string(". To name the kernel node, run the step again eagerly, "
                                                       "checked node by node (ModelStepOptions::check_nodes, "
                                                       "`generate --check-nodes`)"));
  const GdnDims& g = cfg_.gdn;
  const DeviceLimits device = DeviceLimits::current();
  sms_ = device.sms;
  if (opts_.tp_comm) {
    tp_ranks_ = nccl_ranks(opts_.tp_comm);
    int current = -1;
    check(cudaGetDevice(&current));
    const int comm_device = nccl_device(opts_.tp_comm);
    require(comm_device == current,
            "tensor parallel: the NCCL communicator is device {}'s, the step is built on device {}", comm_device,
            current);
    // Tuning times arms rank by rank, and ranks that kept different arms would run different steps
    // between their collectives, which then wait for each other forever.
    require(!opts_.tune_arms || tp_ranks_ == 1,
            "tensor parallel over {} ranks cannot tune its arms (--arms tune): each rank would choose its own",
            tp_ranks_);
    // Over several ranks the f32 partials would be summed before the rounding, where each rank
    // rounds its own partial in `gemm`: not the same arithmetic, and twice the all-reduce's bytes.
    require((opts_.mix_round != MixRound::norm && opts_.mix_round != MixRound::partials &&
             opts_.mix_round != MixRound::residual) ||
                tp_ranks_ == 1,
            "tensor parallel over {} ranks rounds each rank's projection output before the sum: mix-round {} "
            "does not apply",
            tp_ranks_, mix_round_name(opts_.mix_round));
  }
  if (opts_.head_rows == cfg_.vocab && opts_.head_row0 == 0) opts_.head_rows = 0;  // the whole vocabulary
  require(opts_.head_rows == 0 || opts_.tp_comm,
          "an LM head of part of the vocabulary (head_rows {}) needs tp_comm: its tokens are picked over the ranks' "
          "(logit, id) pairs",
          opts_.head_rows);
  require(opts_.head_rows >= 0 && opts_.head_row0 >= 0 && opts_.head_row0 + head_width() <= cfg_.vocab,
          "the LM head's rows [{}, {}) are not within the vocabulary of {}", opts_.head_row0,
          opts_.head_row0 + head_width(), cfg_.vocab);
  if (cfg_.num_linear_attention() > 0) {
    require(delta_rule_decode_supports(g.Dk, g.Dv), "delta-rule decode does not support Dk={} Dv={}", g.Dk, g.Dv);
    require(opts_.max_prefill_tokens == 0 || delta_rule_prefill_supports(g.Dk, g.Dv),
            "delta-rule prefill does not support Dk={} Dv={}", g.Dk, g.Dv);
    opts_.delta_prefill = resolve_delta_prefill(opts_.delta_prefill, g, opts_.max_prefill_tokens > 0, opts_.act, device,
                                                prefill_fuses_gated_norm(opts_.gated_norm));
  }
  if (opts_.delta_prefill == DeltaPrefill::automatic) opts_.delta_prefill = DeltaPrefill::scan;  // no GDN layer
  if (cfg_.num_full_attention() > 0) {
    require(attention_supports(cfg_.Hq, cfg_.Hkv, cfg_.D, kv_cache_dtype()),
            "attention does not support Hq={} Hkv={} D={}", cfg_.Hq, cfg_.Hkv, cfg_.D);
    opts_.attn_prefill = resolve_attn_prefill(opts_.attn_prefill, cfg_.D, opts_.act, kv_cache_dtype(),
                                              opts_.max_prefill_tokens > 0, device);
    opts_.attn_decode =
        resolve_attn_decode(opts_.attn_decode, cfg_.Hq, cfg_.Hkv, cfg_.D, opts_.act, kv_cache_dtype(), device);
  }
  if (opts_.attn_prefill == AttnPrefill::automatic) opts_.attn_prefill = AttnPrefill::simt;  // no attention layer
  if (opts_.attn_decode == AttnDecode::automatic) opts_.attn_decode = AttnDecode::simt;
  opts_.gemm = resolve_gemm(opts_.gemm, opts_.act, device);
  opts_.pdl = resolve_pdl(opts_.pdl, device);
  // auto: residual (partials where the skinny kernel runs), but not over several ranks (each rounds
  // before the sum).
  if (opts_.mix_round == MixRound::automatic) opts_.mix_round = tp_ranks_ > 1 ? MixRound::gemm : MixRound::residual;
  keys_ = decode_capture_sizes(opts_.graph_max);
  if (opts_.max_prefill_tokens > 0) prefill_keys_ = prefill_buckets(opts_.max_prefill_tokens);

  Arena m = Arena::measure();
  layout(m);
  // The plan of that very layout before anything is allocated: a step that cannot fit is an error
  // stating the sizes (models/memory_plan.h; the arena's own allocation error remains the last word).
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b));
  check_fits(plan_of(m), free_b);
  arena_.emplace(m.used(), "model-step");
  cublas_.emplace(stream_.get());
  lt_.emplace(stream_.get(), cublas_->workspace(), cublas_->workspace_bytes());
  layout(*arena_);
  arena_->freeze();
  arena_->zero(stream_.get());
  if (a_.rope.data) {
    check(rope_table_fill(a_.rope.ptr<float>(), opts_.max_context, cfg_.rotary_dim(), cfg_.rope_theta, stream_.get()));
  }
  staging_ = StagedUpload(meta_bytes());
  if (opts_.synthetic) init_synthetic(opts_.seed);
  stream_.sync();
}

int ModelStep::logit_rows() const {
  return step_logit_rows(opts_.max_decode_batch, opts_.max_prefill_tokens, opts_.max_prefill_seqs);
}

size_t ModelStep::meta_bytes() const {
  return step_meta_bytes(opts_.max_decode_batch, opts_.max_prefill_tokens, opts_.max_prefill_seqs);
}

int ModelStep::attention_splits(int rows) const {
  if (cfg_.num_full_attention() == 0) return 1;
  if (opts_.attn_decode == AttnDecode::mma) {
    return attention_decode_mma_pick_splits(rows, cfg_.Hkv, opts_.max_context, sms_,
                                            attention_decode_mma_blocks_per_sm(cfg_.D));
  }
  return std::max(1, attention_decode_pick_splits(rows, cfg_.Hq, cfg_.Hkv, opts_.max_context, sms_));
}

StepLayoutParams ModelStep::layout_params() const {
  StepLayoutParams p;
  p.act = opts_.act;
  p.ssm_state = opts_.ssm_state;
  p.num_slots = opts_.num_slots;
  p.max_context = opts_.max_context;
  p.max_decode_batch = opts_.max_decode_batch;
  p.max_prefill_tokens = opts_.max_prefill_tokens;
  p.max_prefill_seqs = opts_.max_prefill_seqs;
  // The two-kernel delta-rule prefill's chunk records, for the largest prefill bucket.
  if (opts_.delta_prefill == DeltaPrefill::wgmma_t && opts_.max_prefill_tokens > 0) {
    p.delta_workspace_bytes =
        delta_rule_prefill_wgmma_t_workspace(opts_.max_prefill_tokens, opts_.max_prefill_seqs, cfg_.gdn.Hv);
  }
  // Attention split-K partials: the most any decode row count needs (eager fallbacks use any count).
  if (cfg_.num_full_attention() > 0) {
    for (int rows = 1; rows <= opts_.max_decode_batch; ++rows) {
      const int sp = attention_splits(rows);
      if (sp > 1) {
        p.attn_workspace_bytes =
            std::max(p.attn_workspace_bytes, attention_decode_workspace_bytes(rows, cfg_.Hq, cfg_.D, sp));
      }
    }
  }
  // The split argmax's partials: the most any output row count needs.
  for (int rows = 1; rows <= logit_rows(); ++rows) {
    p.argmax_workspace_bytes =
        std::max(p.argmax_workspace_bytes, argmax_workspace_bytes(rows, argmax_pick_chunks(rows, head_width(), sms_)));
  }
  // The skinny GEMM's split-K partials for an [n, k] weight at the most rows it runs it on (32, or
  // kGemmMixedSkinnyRows for mixed; the split count depends on the row count).
  // (A weight of hidden rows may be a residual projection whose partials the norm sums: sized so.)
  p.gemm_workspace_bytes = [gemm = opts_.gemm, sms = sms_, mix = opts_.mix_round, act = opts_.act](int n, int k) {
    const int block_rows = skinny_gemm_block_rows(32, n, sms);
    const bool partials = mix_partials_shape(mix, n, act);
    const int rows = gemm_uses_skinny(gemm, 32, n, k, block_rows, partials)           ? 32
                     : gemm_uses_skinny(gemm, kGemmMixedSkinnyRows, n, k, block_rows) ? kGemmMixedSkinnyRows
                                                                                      : 0;
    size_t b = 0;
    for (int m = 1; m <= rows && skinny_gemm_supports(m, n, k); ++m) {
      b = std::max(b, skinny_gemm_workspace_bytes(m, n, skinny_gemm_pick_splits(m, n, k, sms)));
    }
    return b;
  };
  p.meta_bytes = meta_bytes();
  p.tp_ranks = tp_ranks_;
  p.head_rows = opts_.head_rows;
  if (opts_.mix_round == MixRound::norm) {
    p.mix_f32_rows = static_cast<int>(
        std::min<int64_t>(step_act_rows(opts_.max_decode_batch, opts_.max_prefill_tokens), kGemmLtMaxRows));
  }
  return p;
}

void ModelStep::layout(Arena& a) {
  StepTensors t = lay_out_step(a, cfg_, layout_params());
  embed_ = t.embed;
  lm_head_ = t.lm_head;
  final_norm_ = t.final_norm;
  layers_ = std::move(t.layers);
  a_ = t.a;
}

void ModelStep::init_synthetic(uint64_t seed) {
  cudaStream_t s = stream_.get();
  uint64_t idx = 0;
  auto fill = [&](const TensorView& t, float lo, float hi) {
    const uint64_t ts = seed * 0x9E3779B97F4A7C15ull + (++idx) * 0xBF58476D1CE4E5B9ull;
    check(fill_uniform(t.data, t.dtype, t.numel(), ts, lo, hi, s));
  };
  auto linear = [&](const TensorView& t) {
    const float a = std::sqrt(3.0f / static_cast<float>(t.dim(1)));
    fill(t, -a, a);
  };
  fill(embed_, -1.f, 1.f);
  if (!cfg_.tie_word_embeddings) {
    linear(lm_head_);
  } else if (lm_head_.data != embed_.data) {  // a rank's share of a tied head: the embedding's rows
    const size_t row = static_cast<size_t>(embed_.dim(1)) * dtype_size(embed_.dtype);
    check(cudaMemcpyAsync(lm_head_.data, static_cast<const char*>(embed_.data) + opts_.head_row0 * row,
                          static_cast<size_t>(opts_.head_rows) * row, cudaMemcpyDeviceToDevice, s));
  }
  fill(final_norm_, -0.1f, 0.1f);
  for (const Layer& L : layers_) {
    fill(L.in_norm, -0.1f, 0.1f);
    fill(L.post_norm, -0.1f, 0.1f);
    linear(L.gate_up);
    linear(L.down);
    if (L.attention) {
      linear(L.attn.qkv_proj);
      fill(L.attn.q_norm, -0.1f, 0.1f);
      fill(L.attn.k_norm, -0.1f, 0.1f);
      linear(L.attn.o_proj);
    } else {
      linear(L.gdn.in_proj);
      const float ac = std::sqrt(3.0f / static_cast<float>(cfg_.gdn.K));
      fill(L.gdn.conv_w, -ac, ac);
      fill(L.gdn.A_log, 0.0f, std::log(16.0f));  // log A, A in [1, 16] (not uniform in A)
      fill(L.gdn.dt_bias, -0.5f, 0.5f);
      fill(L.gdn.norm_w, 0.9f, 1.1f);
      linear(L.gdn.out_proj);
    }
  }
  stream_.sync();
}

void ModelStep::load_host_weights(const HostWeights& w) {
  check_weights(cfg_, w, opts_.head_rows);
  StepTensors t;
  t.embed = embed_;
  t.lm_head = lm_head_;
  t.final_norm = final_norm_;
  t.layers = layers_;
  for (const WeightPart& part : weight_parts(cfg_, t, gu_group())) {
    const auto it = w.find(part.name);
    require(it != w.end(), "load_host_weights: missing {}", part.name);
    upload_part(part, it->second, stream_.get());
  }
}

double ModelStep::weight_bytes() const {
  double b = static_cast<double>(embed_.bytes() + final_norm_.bytes());
  if (lm_head_.data != embed_.data) b += static_cast<double>(lm_head_.bytes());  // untied, or a rank's share
  for (const Layer& L : layers_) {
    for (const TensorView* t : {&L.in_norm, &L.post_norm, &L.gate_up, &L.down}) b += static_cast<double>(t->bytes());
    if (L.attention) {
      for (const TensorView* t : {&L.attn.qkv_proj, &L.attn.q_norm, &L.attn.k_norm, &L.attn.o_proj}) {
        b += static_cast<double>(t->bytes());
      }
    } else {
      for (const TensorView* t :
           {&L.gdn.in_proj, &L.gdn.conv_w, &L.gdn.A_log, &L.gdn.dt_bias, &L.gdn.norm_w, &L.gdn.out_proj}) {
        b += static_cast<double>(t->bytes());
      }
    }
  }
  return b;
}

double ModelStep::state_bytes_per_slot() const {
  double b = 0;
  for (const Layer& L : layers_) {
    if (!L.attention) b += static_cast<double>(L.gdn.conv_state.bytes() + L.gdn.ssm_state.bytes());
  }
  return b / opts_.num_slots;
}

double ModelStep::kv_bytes_per_token() const {
  double b = 0;
  for (const Layer& L : layers_) {
    if (L.attention) b += static_cast<double>(L.attn.k_cache.bytes() + L.attn.v_cache.bytes());
  }
  return b / (static_cast<double>(opts_.num_slots) * opts_.max_context);
}

// --- caches ---------------------------------------------------------------------------------------

std::vector<const TensorView*> ModelStep::caches() const {
  std::vector<const TensorView*> out;
  for (const Layer& L : layers_) {
    if (L.attention) {
      out.push_back(&L.attn.k_cache);
      out.push_back(&L.attn.v_cache);
    } else {
      out.push_back(&L.gdn.conv_state);
      out.push_back(&L.gdn.ssm_state);
    }
  }
  return out;
}

std::vector<uint8_t> ModelStep::cache_bytes() const {
  size_t total = 0;
  for (const TensorView* t : caches()) total += t->bytes();
  std::vector<uint8_t> out(total);
  size_t off = 0;
  for (const TensorView* t : caches()) {
    check(cudaMemcpyAsync(out.data() + off, t->data, t->bytes(), cudaMemcpyDeviceToHost, stream_.get()));
    off += t->bytes();
  }
  stream_.sync();
  return out;
}

void ModelStep::set_cache_bytes(const std::vector<uint8_t>& bytes) {
  size_t total = 0;
  for (const TensorView* t : caches()) total += t->bytes();
  require(bytes.size() == total, "set_cache_bytes: expected {} bytes, got {}", total, bytes.size());
  size_t off = 0;
  for (const TensorView* t : caches()) {
    check(cudaMemcpyAsync(t->data, bytes.data() + off, t->bytes(), cudaMemcpyHostToDevice, stream_.get()));
    off += t->bytes();
  }
  stream_.sync();
}

std::vector<std::pair<char*, size_t>> ModelStep::slot_slices(int slot) const {
  require(slot >= 0 && slot < opts_.num_slots, "slot {} outside [0, {})", slot, opts_.num_slots);
  std::vector<std::pair<char*, size_t>> out;
  for (const TensorView* t : caches()) {
    const size_t per = t->bytes() / static_cast<size_t>(opts_.num_slots);
    out.emplace_back(static_cast<char*>(t->data) + per * static_cast<size_t>(slot), per);
  }
  return out;
}

std::vector<uint8_t> ModelStep::slot_cache_bytes(int slot) const {
  std::vector<uint8_t> out;
  for (const auto& [data, per] : slot_slices(slot)) {
    const size_t at = out.size();
    out.resize(at + per);
    check(cudaMemcpyAsync(out.data() + at, data, per, cudaMemcpyDeviceToHost, stream_.get()));
  }
  stream_.sync();
  return out;
}

void ModelStep::set_slot_cache_bytes(int slot, const std::vector<uint8_t>& bytes) {
  const auto slices = slot_slices(slot);
  size_t total = 0;
  for (const auto& sl : slices) total += sl.second;
  require(bytes.size() == total, "set_slot_cache_bytes: expected {} bytes, got {}", total, bytes.size());
  size_t off = 0;
  for (const auto& [data, per] : slices) {
    check(cudaMemcpyAsync(data, bytes.data() + off, per, cudaMemcpyHostToDevice, stream_.get()));
    off += per;
  }
  stream_.sync();
}

void ModelStep::randomize_caches(uint64_t seed) {
  uint64_t idx = 0;
  for (const TensorView* t : caches()) {
    const bool ssm = std::any_of(layers_.begin(), layers_.end(), [&](const Layer& L) { return &L.gdn.ssm_state == t; });
    const float s = ssm ? 0.1f : 1.0f;
    check(fill_uniform(t->data, t->dtype, t->numel(), seed * 0x9E3779B97F4A7C15ull + (++idx), -s, s, stream_.get()));
  }
  stream_.sync();
}

void ModelStep::clear_caches() {
  for (const TensorView* t : caches()) check(cudaMemsetAsync(t->data, 0, t->bytes(), stream_.get()));
  stream_.sync();
}

// --- the step -------------------------------------------------------------------------------------

StepKey ModelStep::step_key(const GraphKey& key) const {
  require(key.kind != GraphKind::mixed, "model step: no mixed prefill + decode steps yet ({})", describe(key));
  return key.kind == GraphKind::prefill ? prefill_key(key.tokens) : StepKey::decode(key.tokens);
}

void ModelStep::upload_metadata(const StepMetadata& md) {
  try {
    staging_.upload(stream_.get(), a_.meta.data, md.layout().total,
                    [&](std::span<std::byte> host) { md.pack_into(host); });
  } catch (const Error&) {
    fault_of_earlier_step();  // the upload met the sticky error of a step that faulted
    throw;
  }
}

void ModelStep::run_step(const StepMetadata& md, RunMode mode) {
  upload_metadata(md);
  run_key(graph_key(md.key), mode);
}

void ModelStep::run_key(const GraphKey& key, RunMode mode) {
  bool replayed = false;
  try {
    replayed = graphs_.run(key, mode);
  } catch (const KernelFault&) {
    throw;  // a node named by check_nodes
  } catch (const Error&) {
    fault_of_earlier_step();
    throw;
  }
  faults_.ran(key, replayed);  // formatted only if the step fails (step_fault)
}

void ModelStep::replay_key(const GraphKey& key) const {
  try {
    graphs_.replay(key);
  } catch (const Error&) {
    fault_of_earlier_step();
    throw;
  }
  faults_.ran(key, true);
}

void ModelStep::fault_of_earlier_step() const { faults_.earlier(); }

void ModelStep::sync() const { check_step(cudaStreamSynchronize(stream_.get())); }

void ModelStep::check_step(cudaError_t e) const { faults_.check(e); }

uint64_t ModelStep::fault_drill_runs() const {
  if (opts_.fault_op.empty()) return 0;
  sync();
  return drill_runs_.runs();
}

void ModelStep::check_replays(const GraphKey& key, cudaError_t e, std::string_view during) const {
  if (e == cudaSuccess) return;
  faults_.ran(key, true);
  faults_.fault(e, during);
}

void ModelStep::step_fault(cudaError_t e) const { faults_.fault(e); }

void ModelStep::read_outputs(size_t n, std::vector<float>& logits, std::vector<int32_t>& tokens) const {
  logits.resize(n * static_cast<size_t>(head_width()));
  tokens.resize(n);
  // A fault of the step (an illegal address inside a replayed graph) surfaces here.
  cudaError_t e = cudaMemcpyAsync(logits.data(), a_.logits.data, logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_.get());
  if (e == cudaSuccess)
    e = download_into(reinterpret_cast<uint8_t*>(tokens.data()), a_.tokens.data, n * sizeof(int32_t), stream_.get());
  if (e != cudaSuccess) step_fault(e);
}

int ModelStep::enqueue(const std::vector<DecodeRequest>& batch, RunMode mode) {
  const int B = static_cast<int>(batch.size());
  require(B >= 1 && B <= opts_.max_decode_batch, "decode batch of {} rows: must be 1..{} (the static buffers' size)", B,
          opts_.max_decode_batch);
  const auto key = pad_to_key(keys_, B);
  const int rows = key ? *key : B;
  const StepLimits limits{opts_.num_slots, cfg_.vocab, opts_.max_context};
  run_step(build_decode_metadata(batch, StepKey::decode(rows), limits), mode);
  return rows;
}

DecodeOutput ModelStep::decode(const std::vector<DecodeRequest>& batch, RunMode mode) {
  DecodeOutput out;
  out.rows = enqueue(batch, mode);
  read_outputs(batch.size(), out.logits, out.tokens);
  return out;
}

void ModelStep::replay(int key) const { replay_key(GraphKey::decode(key)); }

int ModelStep::stage_prefill(const std::vector<PrefillRequest>& batch) {
  const int bucket = prefill_bucket(prefill_keys_, batch, opts_.max_prefill_tokens);
  const StepLimits limits{opts_.num_slots, cfg_.vocab, opts_.max_context};
  upload_metadata(build_prefill_metadata(batch, prefill_key(bucket), limits));
  return bucket;
}

int ModelStep::enqueue_prefill(const std::vector<PrefillRequest>& batch, RunMode mode) {
  const int bucket = stage_prefill(batch);
  run_key(GraphKey::prefill(bucket), mode);
  return bucket;
}

void ModelStep::launch_prefill_eager(int bucket) {
  require(std::count(prefill_keys_.begin(), prefill_keys_.end(), bucket) == 1, "no prefill bucket {}", bucket);
  run_key(GraphKey::prefill(bucket), RunMode::eager);
}

PrefillOutput ModelStep::prefill(const std::vector<PrefillRequest>& batch, RunMode mode) {
  PrefillOutput out;
  out.bucket = enqueue_prefill(batch, mode);
  read_outputs(batch.size(), out.logits, out.tokens);
  return out;
}

void ModelStep::replay_prefill(int bucket) const { replay_key(GraphKey::prefill(bucket)); }

std::vector<uint8_t> ModelStep::logits_bytes(int rows) const {
  require(rows >= 0 && rows <= logit_rows(), "logits_bytes: rows {} outside [0, {}]", rows, logit_rows());
  std::vector<uint8_t> out(static_cast<size_t>(rows) * static_cast<size_t>(head_width()) * sizeof(float));
  // A fault of the step that wrote them surfaces here.
  if (const cudaError_t e = download_into(out.data(), a_.logits.data, out.size(), stream_.get()); e != cudaSuccess)
    step_fault(e);
  return out;
}

std::vector<int32_t> ModelStep::tokens(int rows) const {
  require(rows >= 0 && rows <= logit_rows(), "tokens: rows {} outside [0, {}]", rows, logit_rows());
  std::vector<int32_t> out(static_cast<size_t>(rows));
  const cudaError_t e = download_into(reinterpret_cast<uint8_t*>(out.data()), a_.tokens.data,
                                      out.size() * sizeof(int32_t), stream_.get());
  if (e != cudaSuccess) step_fault(e);  // a fault of the step that wrote them
  return out;
}

}  // namespace sg
