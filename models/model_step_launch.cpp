// model_step_launch.cpp: the decode step's launch sequence (one per padded row count; identical
// eagerly and under capture) and the capture of every key with NodeRecorder labels.
#include <cstddef>
#include <cstring>

#include "engine/error.h"
#include "engine/gemm.h"
#include "graphs/capture_sizes.h"
#include "graphs/node_timer.h"
#include "kernels/argmax.h"
#include "kernels/attention.h"
#include "kernels/attn_prep.h"
#include "kernels/contracts.h"
#include "kernels/conv_update.h"
#include "kernels/delta_rule.h"
#include "kernels/embedding.h"
#include "kernels/gdn_decode_fused.h"
#include "kernels/postconv.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "models/model_step.h"

namespace sg {
namespace {

// Device pointers into the static metadata block for a key of `rows` rows.
struct MetaPtrs {
  const int32_t* n_tokens = nullptr;  // [1] live rows (StepCounts::n_tokens)
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* slots = nullptr;  // decode: row i is sequence i, so this is the per-row slot
};

MetaPtrs meta_ptrs(const char* base, int rows) {
  const MetadataLayout l = metadata_layout(StepKey::decode(rows));
  MetaPtrs m;
  m.n_tokens = reinterpret_cast<const int32_t*>(base + l.counts) + 1;
  static_assert(offsetof(StepCounts, n_tokens) == sizeof(int32_t));
  m.tokens = reinterpret_cast<const int32_t*>(base + l.tokens);
  m.positions = reinterpret_cast<const int32_t*>(base + l.positions);
  m.token_seq = reinterpret_cast<const int32_t*>(base + l.token_seq);
  m.slots = reinterpret_cast<const int32_t*>(base + l.slots);
  return m;
}

// A contiguous [rows, cols] view at `data`.
TensorView mat(void* data, DType t, int64_t rows, int64_t cols) { return TensorView::contiguous(data, t, {rows, cols}); }

const void* offset(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * static_cast<int64_t>(dtype_size(t));
}

// Padding-only metadata for a key (warm-up): no live row, every slot and token_seq -1.
StepMetadata padding_metadata(int rows) {
  StepMetadata md;
  md.key = StepKey::decode(rows);
  const auto T = static_cast<size_t>(rows);
  md.counts.token_capacity = rows;
  md.counts.seq_capacity = rows;
  md.counts.chunk_capacity = md.key.chunk_capacity();
  md.tokens.assign(T, 0);
  md.positions.assign(T, 0);
  md.token_seq.assign(T, -1);
  md.slots.assign(T, -1);
  md.cu_seqlens.assign(T + 1, 0);
  md.has_history.assign(T, 0);
  md.context_lens.assign(T, 0);
  md.last_rows.assign(T, -1);
  md.chunks.assign(static_cast<size_t>(md.key.chunk_capacity()), ConvChunk{-1, 0, 0});
  return md;
}

}  // namespace

void ModelStep::gemm(const TensorView& x, const TensorView& W, const TensorView& y, int layer, const char* op,
                     NodeRecorder* rec) {
  gemm_xwt(cublas_, x, W, y);
  if (rec) {
    const double bytes = static_cast<double>(x.bytes() + W.bytes() + y.bytes());
    rec->launched(stream_.get(), {layer, op, "cublas", bytes});
  }
}

void ModelStep::gdn_mixer(int layer, int rows, const char* meta, NodeRecorder* rec) {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const GdnLayer& W = L.gdn;
  const GdnDims& g = cfg_.gdn;
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int C = g.C(), Hv = g.Hv, HvDv = g.Hv * g.Dv;
  const int P = C + HvDv + 2 * Hv;  // qkv | z | b | a
  const MetaPtrs m = meta_ptrs(meta, rows);
  cudaStream_t s = stream_.get();

  const TensorView proj = mat(a_.proj.data, act, rows, P);
  gemm(a_.h.rows(0, rows), W.in_proj, proj, layer, "gdn.in_proj", rec);
  const void* z = offset(proj.data, C, act);
  const void* b = offset(proj.data, C + HvDv, act);
  const void* a = offset(proj.data, C + HvDv + Hv, act);

  const auto fc = gdn_decode_contract(opts_.arms.gdn_decode, GdnDecodeShape{rows, g.Hk, g.Hv, g.Dk, g.Dv, g.K});
  if (fc.arm == GdnDecodeArm::fused) {
    GdnDecodeFusedParams fp;
    fp.x = proj.data;
    fp.x_stride = P;
    fp.a = a;
    fp.a_stride = P;
    fp.b = b;
    fp.b_stride = P;
    fp.act = act;
    fp.conv_state = W.conv_state.data;
    fp.conv_state_dtype = W.conv_state.dtype;
    fp.w = W.conv_w.ptr<float>();
    fp.A_log = W.A_log.ptr<float>();
    fp.dt_bias = W.dt_bias.ptr<float>();
    fp.slots = m.slots;
    fp.ssm_state = W.ssm_state.ptr<float>();
    fp.out = a_.core.data;
    fp.rows = rows;
    fp.Hk = g.Hk;
    fp.Hv = g.Hv;
    fp.Dk = g.Dk;
    fp.Dv = g.Dv;
    fp.K = g.K;
    check(gdn_decode_fused(fp, fc, s));
    if (rec) {
      const double bytes = rows * (C + 2.0 * Hv) * es + rows * C * (g.K - 1) * 2.0 * es + C * g.K * 4.0 + Hv * 8.0 +
                           rows * double(Hv) * g.Dk * g.Dv * 8.0 + rows * double(HvDv) * es;
      rec->launched(s, {layer, "gdn.decode", "fused", bytes});
    }
  } else {
    ConvUpdateParams cp;
    cp.x = proj.data;
    cp.x_stride = P;
    cp.x_dtype = act;
    cp.out = a_.conv_out.data;
    cp.out_dtype = act;
    cp.state = W.conv_state.data;
    cp.state_dtype = W.conv_state.dtype;
    cp.slots = m.slots;
    cp.w = W.conv_w.ptr<float>();
    cp.rows = rows;
    cp.C = C;
    cp.K = g.K;
    const auto cc = conv_update_contract(opts_.arms.conv_update, ConvUpdateShape{rows, C, g.K});
    check(conv_update(cp, cc, s));
    if (rec) {
      rec->launched(s, {layer, "conv.update", std::string(arm_name(cc.arm)),
                        rows * C * es * 2 + rows * C * (g.K - 1) * es * 2 + C * g.K * 4.0});
    }

    PostconvParams pp;
    pp.conv = a_.conv_out.data;
    pp.conv_stride = C;
    pp.conv_dtype = act;
    pp.a = a;
    pp.a_stride = P;
    pp.b = b;
    pp.b_stride = P;
    pp.ab_dtype = act;
    pp.A_log = W.A_log.ptr<float>();
    pp.dt_bias = W.dt_bias.ptr<float>();
    pp.q = a_.q.data;
    pp.k = a_.k.data;
    pp.v = a_.v.data;
    pp.qkv_dtype = act;
    pp.g = a_.g.ptr<float>();
    pp.beta = a_.beta.ptr<float>();
    pp.T = rows;
    pp.Hk = g.Hk;
    pp.Hv = g.Hv;
    pp.Dk = g.Dk;
    pp.Dv = g.Dv;
    const auto pc = postconv_contract(opts_.arms.postconv, PostconvShape{rows, g.Hk, g.Hv, g.Dk, g.Dv});
    check(postconv(pp, pc, s));
    if (rec) {
      rec->launched(s, {layer, "postconv", std::string(arm_name(pc.arm)), rows * C * es * 2 + rows * Hv * (es * 2 + 8.0)});
    }

    DeltaRuleDecodeParams dp;
    dp.q = a_.q.data;
    dp.k = a_.k.data;
    dp.v = a_.v.data;
    dp.qkv_dtype = act;
    dp.g = a_.g.ptr<float>();
    dp.beta = a_.beta.ptr<float>();
    dp.slots = m.slots;
    dp.state = W.ssm_state.ptr<float>();
    dp.out = a_.core.data;
    dp.out_dtype = act;
    dp.rows = rows;
    dp.Hk = g.Hk;
    dp.Hv = g.Hv;
    dp.Dk = g.Dk;
    dp.Dv = g.Dv;
    check(delta_rule_decode(dp, s));
    if (rec) {
      rec->launched(s, {layer, "delta_rule.decode", "-",
                        rows * (2.0 * g.Hk * g.Dk + 2.0 * HvDv) * es + rows * Hv * 8.0 +
                            rows * double(Hv) * g.Dk * g.Dv * 8.0});
    }
  }

  GatedRmsNormParams gp;
  gp.x = a_.core.data;
  gp.x_dtype = act;
  gp.z = z;
  gp.z_dtype = act;
  gp.z_token_stride = P;
  gp.w = W.norm_w.data;
  gp.w_dtype = W.norm_w.dtype;
  gp.y = a_.core.data;  // in place (x is contiguous)
  gp.y_dtype = act;
  gp.T = rows;
  gp.heads = g.Hv;
  gp.n = g.Dv;
  gp.eps = cfg_.rms_eps;
  gp.live_rows = m.n_tokens;
  check(gated_rmsnorm(gp, s));
  if (rec) rec->launched(s, {layer, "gated_rmsnorm", "-", rows * HvDv * es * 3 + g.Dv * es});

  gemm(mat(a_.core.data, act, rows, HvDv), W.out_proj, a_.mix.rows(0, rows), layer, "gdn.out_proj", rec);
}

void ModelStep::attn_mixer(int layer, int rows, const char* meta, NodeRecorder* rec) {
  const AttnLayer& W = layers_[static_cast<size_t>(layer)].attn;
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int Hq = cfg_.Hq, Hkv = cfg_.Hkv, D = cfg_.D;
  const int P = 2 * Hq * D + 2 * Hkv * D;  // q (query|gate per head) | k | v
  const MetaPtrs m = meta_ptrs(meta, rows);
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
  check(attn_prep(ap, s));
  const double ces = static_cast<double>(dtype_size(W.k_cache.dtype));
  if (rec) {
    rec->launched(s, {layer, "attn_prep", "-",
                      rows * double(P) * es + rows * 2.0 * Hq * D * es + rows * 2.0 * Hkv * D * ces + 2.0 * D * es});
  }

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
  at.splits = attention_splits(rows);
  at.workspace = at.splits > 1 ? a_.attn_ws.ptr<float>() : nullptr;
  check(attention_decode(at, s));
  if (rec) {
    // Live context lengths are not known at capture: count the query/gate/output rows only (the
    // KV bytes read depend on the batch's positions).
    rec->launched(s, {layer, "attention.decode", fmt::format("splits={}", at.splits), rows * 3.0 * Hq * D * es});
  }

  gemm(mat(a_.aout.data, act, rows, int64_t{Hq} * D), W.o_proj, a_.mix.rows(0, rows), layer, "attn.o_proj", rec);
}

void ModelStep::mlp_block(int layer, int rows, const char* meta, NodeRecorder* rec) {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const DType act = opts_.act;
  const double es = static_cast<double>(dtype_size(act));
  const int I = cfg_.intermediate;
  const MetaPtrs m = meta_ptrs(meta, rows);
  cudaStream_t s = stream_.get();

  const TensorView gu = mat(a_.proj.data, act, rows, 2 * int64_t{I});
  gemm(a_.h.rows(0, rows), L.gate_up, gu, layer, "mlp.gate_up", rec);
  SwigluParams sp;
  sp.gu = gu.data;
  sp.gu_dtype = act;
  sp.gu_stride = 2 * int64_t{I};
  sp.y = a_.mlp.data;
  sp.y_dtype = act;
  sp.act_dtype = act;
  sp.T = rows;
  sp.I = I;
  sp.live_rows = m.n_tokens;
  check(swiglu(sp, s));
  if (rec) rec->launched(s, {layer, "swiglu", "-", rows * 3.0 * I * es});
  gemm(a_.mlp.rows(0, rows), L.down, a_.mix.rows(0, rows), layer, "mlp.down", rec);
}

void ModelStep::launch_sequence(int rows, NodeRecorder* rec) {
  const char* meta = static_cast<const char*>(a_.meta.data);
  const MetaPtrs m = meta_ptrs(meta, rows);
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
  check(embedding(ep, s));
  if (rec) rec->launched(s, {-1, "embedding", "-", rows * 2.0 * H * es + rows * 4.0});

  // rmsnorm(x = round(x + mix)) -> h; the first call only rounds the embedding into x.
  auto norm = [&](int layer, const TensorView& w, bool first, const char* op) {
    RmsNormParams np;
    np.x = a_.mix.data;
    np.x_dtype = act;
    np.residual = first ? nullptr : a_.x.data;
    np.residual_out = a_.x.data;
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
    check(rmsnorm(np, s));
    if (rec) rec->launched(s, {layer, op, "-", rows * double(H) * es * (first ? 3.0 : 4.0) + H * es});
  };

  for (int i = 0; i < cfg_.layers; ++i) {
    norm(i, layers_[static_cast<size_t>(i)].in_norm, i == 0, "rmsnorm.input");
    if (layers_[static_cast<size_t>(i)].attention) {
      attn_mixer(i, rows, meta, rec);
    } else {
      gdn_mixer(i, rows, meta, rec);
    }
    norm(i, layers_[static_cast<size_t>(i)].post_norm, false, "rmsnorm.post_attention");
    mlp_block(i, rows, meta, rec);
  }
  norm(-1, final_norm_, cfg_.layers == 0, "rmsnorm.final");

  const TensorView logits = a_.logits.rows(0, rows);
  gemm(a_.h.rows(0, rows), lm_head_, logits, -1, "lm_head", rec);

  ArgmaxParams xp;
  xp.logits = a_.logits.ptr<float>();
  xp.ld = cfg_.vocab;
  xp.V = cfg_.vocab;
  xp.rows = rows;
  xp.out = a_.tokens.ptr<int32_t>();
  xp.live_rows = m.n_tokens;
  check(argmax(xp, s));
  if (rec) rec->launched(s, {-1, "argmax", "-", rows * (4.0 * cfg_.vocab + 4.0)});
}

void ModelStep::capture_all(bool for_timing) {
  if (for_timing) NodeTimer::instance().attach();
  // Warm-up: every key once eagerly on padding-only metadata (no cache is read or written), so
  // cuBLAS and the kernels initialise nothing lazily inside a capture.
  for (int key : keys_) {
    upload_metadata(padding_metadata(key));
    launch_sequence(key, nullptr);
  }
  stream_.sync();
  for (auto it = keys_.rbegin(); it != keys_.rend(); ++it) {
    const int key = *it;
    NodeRecorder rec;
    const std::string name = fmt::format("model-decode {} b={}", cfg_.name, key);
    CapturedGraph g = CapturedGraph::capture(name, stream_.get(), [&] { launch_sequence(key, &rec); });
    manifests_[key] = build_manifest(name, opts_.arms.describe(), g.graph(), rec);
    graphs_[key] = std::move(g);
  }
}

}  // namespace sg
