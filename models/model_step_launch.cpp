// model_step_launch.cpp: the launch sequence of a decode or prefill step (one per graph key;
// identical eagerly and under capture): embedding, norms, the attention mixer, the MLP, the head;
// and the capture of every key with NodeRecorder labels. The GDN mixer is in model_step_gdn.cpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "engine/error.h"
#include "engine/gemm.h"
#include "graphs/capture_sizes.h"
#include "graphs/node_timer.h"
#include "kernels/argmax.h"
#include "kernels/attention.h"
#include "kernels/attention_decode_mma.h"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attn_prep.h"
#include "kernels/contracts.h"
#include "kernels/embedding.h"
#include "kernels/gemm_wgmma.h"
#include "kernels/launch_policy.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm.h"
#include "kernels/swiglu.h"
#include "kernels/tp_argmax.h"
#include "models/model_step.h"
#include "models/model_step_meta.h"

namespace sg {
using detail::mat;
using detail::meta_ptrs;
using detail::MetaPtrs;
using detail::offset;
namespace {

// Padding-only metadata for a key (warm-up): no live row, every slot and token_seq -1.
StepMetadata padding_metadata(const StepKey& key) {
  StepMetadata md;
  md.key = key;
  const auto T = static_cast<size_t>(key.tokens), S = static_cast<size_t>(key.seqs);
  md.counts.token_capacity = key.tokens;
  md.counts.seq_capacity = key.seqs;
  md.counts.chunk_capacity = md.key.chunk_capacity();
  md.tokens.assign(T, 0);
  md.positions.assign(T, 0);
  md.token_seq.assign(T, -1);
  md.slots.assign(S, -1);
  md.cu_seqlens.assign(S + 1, 0);
  md.has_history.assign(S, 0);
  md.context_lens.assign(S, 0);
  md.last_rows.assign(S, -1);
  md.chunks.assign(static_cast<size_t>(md.key.chunk_capacity()), ConvChunk{-1, 0, 0});
  return md;
}

// The wgmma GEMM's params for out = x W^T or, with swiglu, out = the activation of it (W's rows
// interleaved by 8; rows at or past *live zero).
GemmWgmmaParams wgmma_params(const TensorView& x, const TensorView& W, const TensorView& out, bool swiglu,
                             const int32_t* live, int sms) {
  GemmWgmmaParams p;
  p.x = x.data;
  p.ldx = x.stride[0];
  p.W = W.data;
  p.y = out.data;
  p.ldy = out.stride[0];
  p.M = static_cast<int>(x.dim(0));
  p.N = static_cast<int>(W.dim(0));
  p.K = static_cast<int>(W.dim(1));
  p.sms = sms;
  if (swiglu) {
    p.swiglu_group = 8;
    p.live_rows = live;
  }
  return p;
}

}  // namespace

bool ModelStep::gemm(const TensorView& x, const TensorView& W, const TensorView& y, int layer, const char* op,
                     NodeRecorder* rec, const GemmSwiglu* swiglu, bool mix) {
  const int64_t M = x.dim(0), N = W.dim(0), K = W.dim(1);
  // The skinny kernel's W rows a block for this shape (0 where it cannot run): the policy asks
  // whether they are wide, and the launch below uses them.
  const int block_rows = M <= kSkinnyGemmMaxRows && N <= INT32_MAX
                             ? skinny_gemm_block_rows(static_cast<int>(M), static_cast<int>(N), sms_)
                             : 0;
  // A projection whose partials the norm after would sum (mix-round partials, which ModelStep refuses
  // over several tensor-parallel ranks; over one the all-reduce after it is of bytes no one reads)
  // runs the skinny kernel under mixed too.
  const bool sums_partials = mix && mix_partials_shape(opts_.mix_round, N, y.dtype);
  const bool skinny = gemm_uses_skinny(opts_.gemm, M, N, K, block_rows, sums_partials) && x.dtype == DType::bf16 &&
                      W.dtype == DType::bf16 && W.is_contiguous() && x.stride[1] == 1 && y.stride[1] == 1 &&
                      y.dim(0) == M && y.dim(1) == N && x.dim(1) == K && M <= kSkinnyGemmMaxRows && N <= INT32_MAX &&
                      skinny_gemm_supports(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K));
  // The SwiGLU epilogue (where gemm_fuses_swiglu measured it faster): W interleaved in groups of 8,
  // bf16 in and out (the swiglu kernel's bytes); for the skinny kernel or the wgmma GEMM.
  const bool swiglu_epilogue = swiglu && gemm_fuses_swiglu(opts_.swiglu, M, N, K) && gu_group() == 8 &&
                               y.dtype == DType::bf16 && swiglu->act.dtype == DType::bf16 && swiglu->act.dim(0) == M &&
                               swiglu->act.dim(1) == N / 2 && swiglu->act.stride[1] == 1;
  const bool fuse = skinny && swiglu_epilogue;
  const double bytes = static_cast<double>(x.bytes() + W.bytes() + (fuse ? swiglu->act.bytes() : y.bytes()));
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (!skinny && gemm_uses_lt(opts_.gemm, M)) {
    // Timed and chosen at the first eager use of the shape (the warm-up before any capture).
    if (rec) {
      lt_->run(x, W, y);
    } else {
      lt_->tune(x, W, y);
    }
    // The library's launches threw on failure; this labels them (and applies check_nodes).
    launched(
        cudaSuccess, rec, stream_.get(),
        [&] {
          return NodeLabel{layer, op, lt_->describe(lt_shape(x, W, y)), bytes, flops};
        },
        NodeRecorder::kAnyKernels);
    return false;
  }
  if (!skinny) {
    // mix-round residual: the product goes onto the residual stream x (beta = 1), which the norm
    // after reads alone (where x, y and the stream share the activations' dtype).
    const TensorView xs = a_.x.rows(0, M);
    const bool into_x =
        mix && mix_adds_in_gemm(opts_.mix_round) && y.dtype == opts_.act && xs.dtype == y.dtype && xs.dim(1) == N;
    if (!into_x && gemm_uses_wgmma(opts_.gemm, M) && x.dtype == DType::bf16 && W.dtype == DType::bf16 &&
        y.dtype == DType::bf16 && W.is_contiguous() && x.stride[1] == 1 && y.stride[1] == 1 && y.dim(0) == M &&
        y.dim(1) == N && x.dim(1) == K && M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX) {
      // Where the kernel takes the operands (strides, alignment); cuBLAS otherwise, never a refusal mid-step.
      const GemmWgmmaParams p = swiglu_epilogue ? wgmma_params(x, W, swiglu->act, true, swiglu->live_rows, sms_)
                                                : wgmma_params(x, W, y, false, nullptr, sms_);
      if (gemm_wgmma_supports(p)) {
        if (mix) mix_left_.in_x = false;
        gemm_wgmma_launch(p, layer, op, rec);
        return p.swiglu_group != 0;
      }
    }
    gemm_xwt(*cublas_, x, W, into_x ? xs : y, into_x ? 1.0f : 0.0f);
    if (mix) mix_left_.in_x = into_x;
    launched(
        cudaSuccess, rec, stream_.get(),
        [&] {
          return NodeLabel{layer, op, into_x ? "cublas +residual" : "cublas",
                           bytes + (into_x ? static_cast<double>(xs.bytes()) : 0.0), flops};
        },
        NodeRecorder::kAnyKernels);
    return false;
  }
  SkinnyGemmParams p;
  p.x = x.data;
  p.ldx = x.stride[0];
  p.W = W.data;
  p.y = y.data;
  p.ldy = y.stride[0];
  p.y_dtype = y.dtype;
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.block_rows = block_rows;
  p.splits = skinny_gemm_pick_splits(p.M, p.N, p.K, sms_);
  p.workspace = a_.gemm_ws.ptr<float>();
  p.counters = a_.gemm_counters.ptr<int32_t>();
  // mix-round partials: the norm after sums the partials (planes of [M, N] in the workspace).
  p.defer_sum = sums_partials && !fuse && p.splits > 1;
  if (p.defer_sum) mix_left_.planes = p.splits;
  if (fuse) {
    p.y = swiglu->act.data;
    p.ldy = swiglu->act.stride[0];
    p.swiglu_group = gu_group();
    p.act_dtype = DType::bf16;
    p.live_rows = swiglu->live_rows;
  }
  launched(skinny_gemm(p, stream_.get()), rec, stream_.get(), [&] {
    return NodeLabel{layer, op,
                     fmt::format("skinny bn={} splits={}{}", p.block_rows, p.splits,
                                 fuse          ? " +swiglu"
                                 : p.defer_sum ? " partials"
                                               : ""),
                     bytes, flops};
  });
  return fuse;
}

void ModelStep::gemm_wgmma_launch(const GemmWgmmaParams& p, int layer, const char* op, NodeRecorder* rec) {
  const double out_cols = p.swiglu_group ? p.N / 2 : p.N;
  const double bytes = 2.0 * (static_cast<double>(p.M) * p.K + static_cast<double>(p.N) * p.K + p.M * out_cols);
  launched(gemm_wgmma(p, stream_.get()), rec, stream_.get(), [&] {
    return NodeLabel{layer, op, p.swiglu_group ? "wgmma +swiglu" : "wgmma", bytes,
                     2.0 * p.M * static_cast<double>(p.N) * p.K};
  });
}

void ModelStep::attn_mixer(int layer, const StepKey& key, NodeRecorder* rec) {
  const int rows = key.tokens;
  const bool prefill = key.kind == StepKind::prefill;
  const AttnLayer& W = layers_[static_cast<size_t>(layer)].attn;
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int Hq = cfg_.Hq, Hkv = cfg_.Hkv, D = cfg_.D;
  const int P = 2 * Hq * D + 2 * Hkv * D;  // q (query|gate per head) | k | v
  const MetaPtrs m = meta_ptrs(a_.meta.data, key);
  cudaStream_t s = stream_.get();
  const AttnTokenMeta tm{m.positions, m.token_seq, m.slots, m.n_tokens};

  const TensorView proj = mat(a_.proj.data, act, rows, P);
  gemm(a_.h.rows(0, rows), W.qkv_proj, proj, layer, "attn.qkv_proj", rec);

  AttnPrepParams ap;
  ap.qg = proj.data;
  ap.qg_stride = P;
  ap.k = offset(proj.data, 2 * Hq * D, act);
  ap.k_stride = P;
  ap.v = offset(proj.data, 2 * Hq * D + Hkv * D, act);
  ap.v_stride = P;
  ap.in_dtype = act;
  ap.q_norm = W.q_norm.data;
  ap.k_norm = W.k_norm.data;
  ap.norm_dtype = W.q_norm.dtype;
  ap.q = a_.aq.data;
  ap.gate = a_.agate.data;
  ap.q_dtype = act;
  ap.k_cache = W.k_cache.data;
  ap.v_cache = W.v_cache.data;
  ap.cache_dtype = W.k_cache.dtype;
  ap.meta = tm;
  ap.T = rows;
  ap.Hq = Hq;
  ap.Hkv = Hkv;
  ap.D = D;
  ap.rotary_dim = cfg_.rotary_dim();
  ap.max_context = opts_.max_context;
  ap.eps = cfg_.rms_eps;
  ap.rope_theta = cfg_.rope_theta;
  ap.rope_table = a_.rope.data ? a_.rope.ptr<float>() : nullptr;
  const double ces = static_cast<double>(dtype_size(W.k_cache.dtype));
  launched(attn_prep(ap, s), rec, s, [&] {
    return NodeLabel{layer, "attn_prep", "-",
                     rows * double(P) * es + rows * 2.0 * Hq * D * es + rows * 2.0 * Hkv * D * ces + 2.0 * D * es};
  });

  AttentionParams at;
  at.q = a_.aq.data;
  at.gate = a_.agate.data;
  at.q_dtype = act;
  at.k_cache = W.k_cache.data;
  at.v_cache = W.v_cache.data;
  at.cache_dtype = W.k_cache.dtype;
  at.meta = tm;
  at.out = a_.aout.data;
  at.out_dtype = act;
  at.T = rows;
  at.Hq = Hq;
  at.Hkv = Hkv;
  at.D = D;
  at.max_context = opts_.max_context;
  cudaError_t e = cudaSuccess;
  if (prefill) {
    switch (opts_.attn_prefill) {
      case AttnPrefill::mma: e = attention_prefill_mma(at, s); break;
      case AttnPrefill::wgmma: e = attention_prefill_wgmma(at, s); break;
      case AttnPrefill::simt:
      case AttnPrefill::automatic:  // resolved by the constructor; never reaches a step
        e = attention_prefill(at, s);
        break;
    }
  } else {
    at.splits = attention_splits(rows);
    at.workspace = at.splits > 1 ? a_.attn_ws.ptr<float>() : nullptr;
    e = opts_.attn_decode == AttnDecode::mma ? attention_decode_mma(at, s) : attention_decode(at, s);
  }
  // Live context lengths are not known at capture: count the query/gate/output rows only (the KV
  // bytes read depend on the batch's positions). Split-K adds two kernels: the partials and the merge.
  launched(
      e, rec, s,
      [&] {
        return NodeLabel{layer, prefill ? "attention.prefill" : "attention.decode",
                         prefill ? std::string(attn_prefill_name(opts_.attn_prefill))
                                 : fmt::format("{} splits={}", attn_decode_name(opts_.attn_decode), at.splits),
                         rows * 3.0 * Hq * D * es};
      },
      at.splits > 1 ? 2 : 1);

  gemm(mat(a_.aout.data, act, rows, int64_t{Hq} * D), W.o_proj, mix_out(rows), layer, "attn.o_proj", rec, nullptr,
       true);
  tp_sum(layer, rows, "attn.o_proj", rec);
}

void ModelStep::mlp_block(int layer, const StepKey& key, NodeRecorder* rec) {
  const int rows = key.tokens;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int I = cfg_.intermediate;
  const MetaPtrs m = meta_ptrs(a_.meta.data, key);
  cudaStream_t s = stream_.get();

  const TensorView gu = mat(a_.proj.data, act, rows, 2 * int64_t{I});
  const GemmSwiglu fused{a_.mlp.rows(0, rows), m.n_tokens};  // act [rows, I]
  if (!gemm(a_.h.rows(0, rows), L.gate_up, gu, layer, "mlp.gate_up", rec, &fused)) {
    SwigluParams sp;  // gate and up as gate_up's rows lie: halves or groups of gu_group()
    sp.gu = gu.data;
    sp.gu_dtype = act;
    sp.gu_stride = 2 * int64_t{I};
    sp.y = a_.mlp.data;
    sp.y_dtype = act;
    sp.act_dtype = act;
    sp.T = rows;
    sp.I = I;
    sp.interleave = gu_group();
    sp.live_rows = m.n_tokens;
    launched(swiglu(sp, s), rec, s, [&] { return NodeLabel{layer, "swiglu", "-", rows * 3.0 * I * es}; });
  }
  gemm(a_.mlp.rows(0, rows), L.down, mix_out(rows), layer, "mlp.down", rec, nullptr, true);
  tp_sum(layer, rows, "mlp.down", rec);
}

TensorView ModelStep::mix_out(int rows) const {
  return mix_rounds_in_norm(opts_.mix_round, rows) ? a_.mix32.rows(0, rows) : a_.mix.rows(0, rows);
}

void ModelStep::tp_sum(int layer, int rows, const char* after, NodeRecorder* rec) {
  if (!opts_.tp_comm) return;
  cudaStream_t s = stream_.get();
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(cfg_.hidden);
  const TensorView mix = mix_out(rows);  // summed in its dtype (f32 where the norm rounds it)
  if (const int e = nccl_all_reduce_sum(opts_.tp_comm, mix.data, count, mix.dtype, s); e != 0) {
    throw Error(fmt::format("layer {} tp.all_reduce (after {}): {}", layer, after, nccl_error_text(e)));
  }
  // NCCL's nodes: a kernel a collective over several ranks; over one rank possibly none.
  launched(
      cudaSuccess, rec, s,
      [&] {
        return NodeLabel{layer, "tp.all_reduce", "nccl", 2.0 * static_cast<double>(count) * dtype_size(mix.dtype)};
      },
      NodeRecorder::kAnyNodes);
}

void ModelStep::launch_sequence(const StepKey& key, NodeRecorder* rec) {
  const PdlScope pdl(opts_.pdl == PdlMode::on);  // this sequence's kernel launches (kernels/launch_policy.h)
  const bool checks_on = checks_.sync_each || !checks_.fault_op.empty();  // check_nodes, the fault drill
  const NodeCheckScope checks(checks_on ? &checks_ : nullptr);
  arms_ = &arms_for(graph_key(key));
  const int rows = key.tokens;
  const MetaPtrs m = meta_ptrs(a_.meta.data, key);
  cudaStream_t s = stream_.get();
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int H = cfg_.hidden;

  EmbeddingParams ep;
  ep.table = embed_.data;
  ep.table_dtype = embed_.dtype;
  ep.ids = m.tokens;
  ep.y = a_.mix.data;  // the first input norm turns it into the residual stream x
  ep.y_dtype = act;
  ep.V = cfg_.vocab;
  ep.H = H;
  ep.T = rows;
  ep.live_rows = m.n_tokens;
  launched(embedding(ep, s), rec, s, [&] { return NodeLabel{-1, "embedding", "-", rows * 2.0 * H * es + rows * 4.0}; });

  // rmsnorm(x = round(x + mix)) -> h; the first call only rounds the embedding into x. Where the
  // norm rounds the projections' output (mix_round), mix is their f32 output, rounded first.
  // With mix-round partials, where the projection left its split-K partials (mix_left_.planes), the norm
  // sums them from the GEMM workspace first.
  // With mix-round residual, where the projection added its product to x (mix_left_.in_x), the norm
  // reads x alone and writes h.
  const bool mix_f32 = mix_rounds_in_norm(opts_.mix_round, rows);
  mix_left_ = {};
  auto norm = [&](int layer, const TensorView& w, bool first, const char* op) {
    const MixLeft left = std::exchange(mix_left_, MixLeft{});
    const int planes = first ? 0 : left.planes;
    const bool in_x = !first && left.in_x;
    const bool f32_in = (mix_f32 && !first && !in_x) || planes > 1;
    RmsNormParams np;
    np.x = in_x ? a_.x.data : planes > 1 ? a_.gemm_ws.data : f32_in ? a_.mix32.data : a_.mix.data;
    np.x_dtype = f32_in ? DType::f32 : act;
    np.round_x = f32_in;
    np.x_splits = planes > 1 ? planes : 1;
    np.x_split_stride = planes > 1 ? int64_t{rows} * H : 0;
    np.residual = first || in_x ? nullptr : a_.x.data;
    np.residual_out = in_x ? nullptr : a_.x.data;
    np.residual_dtype = act;
    np.w = w.data;
    np.w_dtype = w.dtype;
    np.y = a_.h.data;
    np.y_dtype = act;
    np.T = rows;
    np.heads = 1;
    np.n = H;
    np.eps = cfg_.rms_eps;
    np.live_rows = m.n_tokens;
    launched(rmsnorm(np, s), rec, s, [&] {
      const double x_bytes = planes > 1 ? 4.0 * planes : f32_in ? 4.0 : es;
      // x (and the residual read and written back, except where the GEMM added it), h; the weight.
      const double others = in_x ? 1.0 : first ? 2.0 : 3.0;
      return NodeLabel{layer, op,
                       planes > 1 ? fmt::format("sums {} partials", planes)
                       : in_x     ? std::string("x summed in the GEMM")
                                  : std::string("-"),
                       rows * double(H) * (es * others + x_bytes) + H * es};
    });
  };

  for (int i = 0; i < cfg_.layers; ++i) {
    norm(i, layers_[static_cast<size_t>(i)].in_norm, i == 0, "rmsnorm.input");
    if (layers_[static_cast<size_t>(i)].attention) {
      attn_mixer(i, key, rec);
    } else {
      gdn_mixer(i, key, rec);
    }
    norm(i, layers_[static_cast<size_t>(i)].post_norm, false, "rmsnorm.post_attention");
    mlp_block(i, key, rec);
  }
  norm(-1, final_norm_, cfg_.layers == 0, "rmsnorm.final");

  // Decode: every row is a sequence's last token. Prefill: gather each sequence's last token row
  // of h into mix (free after the final norm); -1 (no tokens, padding) gives a zero row.
  TensorView head_in = a_.h.rows(0, rows);  // [out_rows, H]
  int out_rows = rows;
  const int32_t* live_out = m.n_tokens;
  if (key.kind == StepKind::prefill) {
    out_rows = key.seqs;
    live_out = m.n_seqs;
    EmbeddingParams gp;
    gp.table = a_.h.data;  // [rows, H]
    gp.table_dtype = act;
    gp.ids = m.last_rows;  // [seqs]
    gp.y = a_.mix.data;    // [seqs, H]
    gp.y_dtype = act;
    gp.V = rows;
    gp.H = H;
    gp.T = out_rows;
    gp.live_rows = live_out;
    launched(embedding(gp, s), rec, s, [&] {
      return NodeLabel{-1, "gather_last", "-", out_rows * 2.0 * H * es + out_rows * 4.0};
    });
    head_in = a_.mix.rows(0, out_rows);
  }
  const TensorView logits = a_.logits.rows(0, out_rows);  // [out_rows, V] f32
  gemm(head_in, lm_head_, logits, -1, "lm_head", rec);

  ArgmaxParams xp;
  xp.logits = a_.logits.ptr<float>();
  xp.ld = head_width();
  xp.V = head_width();
  xp.index_base = opts_.head_row0;
  xp.rows = out_rows;
  xp.out = a_.tokens.ptr<int32_t>();
  xp.live_rows = live_out;
  xp.chunks = argmax_pick_chunks(out_rows, head_width(), sms_);
  xp.workspace = a_.argmax_ws.data;
  xp.counters = a_.argmax_counters.ptr<int32_t>();
  if (opts_.tp_comm) xp.pairs = static_cast<ArgmaxPair*>(a_.tp_pairs.data);
  launched(argmax(xp, s), rec, s, [&] {
    return NodeLabel{-1, "argmax", fmt::format("chunks={}", xp.chunks), out_rows * (4.0 * head_width() + 4.0)};
  });
  if (!opts_.tp_comm) return;
  // Tensor parallel: every rank's pairs [out_rows] gathered rank after rank, then the pick over them.
  const size_t pair_bytes = static_cast<size_t>(out_rows) * sizeof(ArgmaxPair);
  if (const int e = nccl_all_gather(opts_.tp_comm, a_.tp_pairs.data, a_.tp_gathered.data, pair_bytes, s); e != 0) {
    throw Error(fmt::format("tp.all_gather of the greedy pairs: {}", nccl_error_text(e)));
  }
  launched(
      cudaSuccess, rec, s,
      [&] {
        return NodeLabel{-1, "tp.all_gather", "nccl", static_cast<double>(pair_bytes) * (tp_ranks_ + 1)};
      },
      NodeRecorder::kAnyNodes);
  TpArgmaxParams tp;
  tp.pairs = static_cast<const ArgmaxPair*>(a_.tp_gathered.data);
  tp.ranks = tp_ranks_;
  tp.rank_stride = out_rows;
  tp.rows = out_rows;
  tp.out = a_.tokens.ptr<int32_t>();
  tp.live_rows = live_out;
  launched(tp_argmax(tp, s), rec, s, [&] {
    return NodeLabel{-1, "tp_argmax", "-", static_cast<double>(pair_bytes) * tp_ranks_ + 4.0 * out_rows};
  });
}

void ModelStep::capture_all(bool for_timing, bool prefill) {
  std::vector<GraphKey> keys;
  for (int k : keys_) keys.push_back(GraphKey::decode(k));
  if (prefill) {
    for (int b : prefill_keys_) keys.push_back(GraphKey::prefill(b));
  }
  capture(keys, for_timing);
}

void ModelStep::capture(const std::vector<GraphKey>& keys, bool for_timing) {
  for (const GraphKey& key : keys) {
    const std::vector<int>& have = key.kind == GraphKind::prefill ? prefill_keys_ : keys_;
    if (key.kind == GraphKind::mixed || std::find(have.begin(), have.end(), key.tokens) == have.end()) {
      std::string list;
      for (int k : keys_) list += fmt::format("{}decode {}", list.empty() ? "" : ", ", k);
      for (int b : prefill_keys_) list += fmt::format(", prefill {}", b);
      throw Error(fmt::format("the model step has no graph key {} (its keys: {})", describe(key), list));
    }
  }
  if (for_timing) NodeTimer::instance().attach();
  if (opts_.tune_arms) tune(keys);
  // Warm-up on padding-only metadata: no cache is read or written.
  graphs_.capture_all(
      keys, [&](const GraphKey& key) { upload_metadata(padding_metadata(step_key(key))); },
      [&](const GraphKey& key) {
        return key.kind == GraphKind::prefill ? fmt::format("model-prefill {} t={}", cfg_.name, key.tokens)
                                              : fmt::format("model-decode {} b={}", cfg_.name, key.tokens);
      },
      [&](const GraphKey& key, Manifest& m) {
        m.arms = arms_for(key).describe();
        auto t = tuning_.find(key);
        if (t != tuning_.end()) m.tuning = t->second;
      });
}

}  // namespace sg
