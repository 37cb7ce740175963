// model_step_gdn.cpp: the GDN mixer of the model step, decode and prefill:
//   in_proj GEMM -> [decode] conv.update -> postconv -> delta_rule.decode  (or gdn.decode=fused, or
//                             =prep: conv + post-conv in one kernel; the GDN decode path of models/gdn_mixer.h)
//                   [prefill] conv.fwd (varlen) -> postconv (or both as gdn.prefill=fused)
//                             -> delta_rule.prefill (ModelStepOptions::delta_prefill: scan, chunked, mma, wgmma, or
//                                wgmma-t, whose two kernels are one labelled launch)
//                -> gated_rmsnorm with z -> out_proj GEMM.
// The projection output [rows, P] is qkv | z | b | a (P = C + Hv*Dv + 2*Hv); conv, postconv and
// the gated norm read it through row strides.
#include "engine/error.h"
#include "kernels/contracts.h"
#include "kernels/conv_fwd.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/gdn_prefill_fused.h"
#include "kernels/op_bytes.h"
#include "kernels/postconv.h"
#include "kernels/rmsnorm.h"
#include "models/gdn_mixer.h"
#include "models/model_step.h"
#include "models/model_step_meta.h"

namespace sg {
using detail::mat;
using detail::meta_ptrs;
using detail::MetaPtrs;
using detail::offset;

void ModelStep::gdn_mixer(int layer, const StepKey& key, NodeRecorder* rec) {
  const int rows = key.tokens;
  const GdnLayer& W = layers_[static_cast<size_t>(layer)].gdn;
  const GdnDims& g = cfg_.gdn;
  const DType act = opts_.act;
  const size_t esz = dtype_size(act);
  const int C = g.C(), Hv = g.Hv, HvDv = g.Hv * g.Dv;
  const int P = C + HvDv + 2 * Hv;
  const bool prefill = key.kind == StepKind::prefill;
  const MetaPtrs m = meta_ptrs(a_.meta.data, key);
  cudaStream_t s = stream_.get();

  const TensorView proj = mat(a_.proj.data, act, rows, P);  // [rows, P]: qkv | z | b | a
  gemm(a_.h.rows(0, rows), W.in_proj, proj, layer, "gdn.in_proj", rec);
  const void* z = offset(proj.data, C, act);         // [rows, Hv, Dv] at row stride P
  const void* b = offset(proj.data, C + HvDv, act);  // [rows, Hv] at row stride P
  const void* a = offset(proj.data, C + HvDv + Hv, act);

  GdnIo io;          // what the layer's conv, post-conv and delta-rule kernels read and write
  io.x = proj.data;  // q | k | v, the first C columns
  io.x_stride = P;
  io.a = a;
  io.b = b;
  io.ab_stride = P;
  io.slots = m.slots;
  io.conv_w = W.conv_w.ptr<float>();
  io.A_log = W.A_log.ptr<float>();
  io.dt_bias = W.dt_bias.ptr<float>();
  io.conv_state = W.conv_state.data;
  io.conv_state_dtype = W.conv_state.dtype;
  io.ssm_state = W.ssm_state.data;
  io.ssm_state_dtype = W.ssm_state.dtype;
  io.conv_out = a_.conv_out.data;
  io.q = a_.q.data;
  io.k = a_.k.data;
  io.v = a_.v.data;
  io.g = a_.g.ptr<float>();
  io.beta = a_.beta.ptr<float>();
  io.out = a_.core.data;  // [rows, Hv, Dv]

  // Gated RMSNorm of the delta-rule output with z, in place; then the output projection. In a
  // decode step the delta rule computes it where it gives the norm kernel's bytes (the setting).
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
  bool norm_done = false;
  auto fuse_norm = [&] {  // the delta rule writes the normed output (same bytes, the setting)
    io.norm_z = z;
    io.norm_z_stride = P;
    io.norm_w = W.norm_w.data;
    io.norm_w_dtype = W.norm_w.dtype;
    io.norm_eps = cfg_.rms_eps;
  };
  if (prefill) {
    if (prefill_fuses_gated_norm(opts_.gated_norm) && opts_.delta_prefill == DeltaPrefill::mma &&
        delta_rule_prefill_mma_norm_built(g.Dv, act, act) && gated_rmsnorm_vector_path(gp)) {
      fuse_norm();
    }
    norm_done = gdn_prefill(layer, key, io, rec);
  } else {  // conv.update -> postconv -> delta_rule.decode, or gdn.decode=fused / prep
    if (delta_fuses_gated_norm(opts_.gated_norm, rows, HvDv) && gated_rmsnorm_vector_path(gp)) fuse_norm();
    const GdnDecodePath path = gdn_decode_path(g, act, arms(), rows, io);
    path.launch(s, rec, layer);
    norm_done = path.norm_fused();
  }
  if (!norm_done)
    launched(gated_rmsnorm(gp, s), rec, s, [&] {
      return NodeLabel{layer, "gated_rmsnorm", "-",
                       op_bytes::gated_rmsnorm(rows, g.Hv, g.Dv, esz, dtype_size(W.norm_w.dtype))};
    });

  gemm(mat(a_.core.data, act, rows, HvDv), W.out_proj, mix_out(rows), layer, "gdn.out_proj", rec, nullptr, true);
  tp_sum(layer, rows, "gdn.out_proj", rec);
}

// The prefill path: conv.fwd (varlen) -> postconv (or both as gdn.prefill=fused) ->
// delta_rule.prefill (scan, chunked or mma), from io.x (in_proj's qkv columns) into io.out; with
// io.norm_w set, the mma form writes the gated-normed output.
bool ModelStep::gdn_prefill(int layer, const StepKey& key, const GdnIo& io, NodeRecorder* rec) {
  const int rows = key.tokens;
  const GdnDims& g = cfg_.gdn;
  const DType act = opts_.act;
  const size_t esz = dtype_size(act), ses = dtype_size(io.conv_state_dtype);  // bytes per activation / conv-state value
  const int C = g.C();
  const MetaPtrs m = meta_ptrs(a_.meta.data, key);
  cudaStream_t s = stream_.get();
  const auto pfc =
      gdn_prefill_contract(arms().gdn_prefill, GdnPrefillShape{rows, key.seqs, g.Hk, g.Hv, g.Dk, g.Dv, g.K});
  const bool fused_prefill = pfc.arm == GdnPrefillArm::fused;
  auto set_varlen = [&](auto& p) {  // the prefill's per-sequence metadata
    p.cu_seqlens = m.cu_seqlens;
    p.slots = m.slots;
    p.has_history = m.has_history;
    p.n_seqs = m.n_seqs;
  };
  if (fused_prefill) {
    GdnPrefillFusedParams fp;
    fp.x = io.x;
    fp.x_stride = io.x_stride;
    fp.act = act;
    fp.state = io.conv_state;
    fp.state_dtype = io.conv_state_dtype;
    fp.w = io.conv_w;
    fp.silu = true;
    set_gdn_gate_inputs(fp, io);
    fp.ab_dtype = act;
    set_gdn_qkv_gates(fp, io, act);
    set_varlen(fp);
    set_gdn_heads(fp, g);
    fp.K = g.K;
    fp.max_tokens = rows;
    fp.max_seqs = key.seqs;
    // A prefill graph serves batches with history: the initial states count as read.
    launched(gdn_prefill_fused(fp, pfc, s), rec, s, [&] {
      return NodeLabel{layer, "gdn.prefill", "fused",
                       op_bytes::gdn_prefill_fused(rows, key.seqs, g.Hk, g.Hv, g.Dk, g.Dv, g.K, esz, ses, true)};
    });
  } else {
    ConvFwdParams cp;
    set_gdn_conv_io(cp, io, act);
    cp.silu = true;
    set_varlen(cp);
    cp.chunks = m.chunks;
    cp.n_chunks = m.n_chunks;
    cp.C = C;
    cp.K = g.K;
    cp.max_tokens = rows;
    cp.max_seqs = key.seqs;
    const auto cc = conv_fwd_contract(arms(), ConvFwdShape{rows, key.seqs, C, g.K});
    launched(conv_fwd(cp, cc, arms().conv_chunks, s), rec, s, [&] {
      return NodeLabel{layer, "conv.fwd", fmt::format("{}+{}", arm_name(cc.arm), arm_name(arms().conv_chunks)),
                       op_bytes::conv_fwd(rows, key.seqs, C, g.K, esz, ses, true)};
    });
    // Post-conv prep: q, k [rows, Hk, Dk], v [rows, Hv, Dv], g, beta [rows, Hv] f32.
    const PostconvParams pp = gdn_postconv_params(g, act, rows, io);
    const auto pc = postconv_contract(arms().postconv, PostconvShape{rows, g.Hk, g.Hv, g.Dk, g.Dv});
    launched(postconv(pp, pc, s), rec, s, [&] {
      return NodeLabel{layer, "postconv", std::string(arm_name(pc.arm)),
                       op_bytes::postconv(rows, g.Hk, g.Hv, g.Dk, g.Dv, esz)};
    });
  }

  // Gated delta rule: out [rows, Hv, Dv], state [slots, Hv, Dk, Dv] (f32 or bf16) in place (after conv +
  // postconv, whichever gdn.prefill arm produced q, k, v, g, beta).
  DeltaRulePrefillParams dp;
  set_gdn_qkv_gates(dp, io, act);
  set_varlen(dp);
  dp.state = io.ssm_state;
  dp.state_dtype = io.ssm_state_dtype;
  dp.out = io.out;
  dp.out_dtype = act;
  dp.max_seqs = key.seqs;
  set_gdn_heads(dp, g);
  const DeltaPrefill form = opts_.delta_prefill;
  const bool norm = io.norm_w != nullptr;  // set by gdn_mixer for the mma form only (the others refuse it)
  if (norm) {
    set_gdn_norm(dp, io);
    dp.norm_live = m.n_tokens;
    dp.norm_rows = rows;
  }
  launched(
      form == DeltaPrefill::mma       ? delta_rule_prefill_mma(dp, s)
      : form == DeltaPrefill::wgmma   ? delta_rule_prefill_wgmma(dp, s)
      : form == DeltaPrefill::wgmma_t ? delta_rule_prefill_wgmma_t(dp, a_.delta_ws.data, a_.delta_ws.bytes(), rows, s)
      : form == DeltaPrefill::chunked ? delta_rule_prefill_chunked(dp, s)
                                      : delta_rule_prefill(dp, s),
      rec, s,
      [&] {
        const double bytes =
            op_bytes::delta_rule(rows, key.seqs, g.Hk, g.Hv, g.Dk, g.Dv, esz, dtype_size(io.ssm_state_dtype)) +
            (norm ? op_bytes::fused_gated_norm(rows, g.Hv, g.Dv, esz, dtype_size(io.norm_w_dtype)) : 0.0);
        return NodeLabel{layer, "delta_rule.prefill",
                         fmt::format("{}{}", delta_prefill_name(form), norm ? "+gated_rmsnorm" : ""), bytes};
      },
      form == DeltaPrefill::wgmma_t ? 2 : 1);  // wgmma-t: the chunks' T, then the recurrence
  return norm;
}

}  // namespace sg
