// gdn_mixer.cpp: the GDN decode path (gdn_mixer.h).
#include "models/gdn_mixer.h"

#include <string>

#include "graphs/manifest.h"
#include "kernels/op_bytes.h"

namespace sg {

PostconvParams gdn_postconv_params(const GdnDims& d, DType act, int rows, const GdnIo& io) {
  PostconvParams pc;
  pc.conv = io.conv_out;
  pc.conv_stride = d.C();
  pc.conv_dtype = act;
  set_gdn_gate_inputs(pc, io);
  pc.ab_dtype = act;
  set_gdn_qkv_gates(pc, io, act);
  pc.T = rows;
  set_gdn_heads(pc, d);
  return pc;
}

GdnDecodePath gdn_decode_path(const GdnDims& d, DType act, const ArmSelection& arms, int rows, const GdnIo& io) {
  GdnDecodePath p;
  p.dims = d;
  p.act_bytes = dtype_size(act);
  p.state_bytes = dtype_size(io.conv_state_dtype);
  p.ssm_bytes = dtype_size(io.ssm_state_dtype);
  const int C = d.C();
  p.fused_contract = gdn_decode_contract(
      arms.gdn_decode,
      GdnDecodeShape{rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K, static_cast<int>(p.ssm_bytes), io.norm_w != nullptr});
  if (!p.is_fused() && !p.is_prep()) {  // (the unfused kernels' contracts only where they run)
    p.conv_contract = conv_update_contract(arms.conv_update, ConvUpdateShape{rows, C, d.K});
    p.post_contract = postconv_contract(arms.postconv, PostconvShape{rows, d.Hk, d.Hv, d.Dk, d.Dv});
  }

  GdnDecodeFusedParams& f = p.fused;
  set_gdn_decode_inputs(f, io, d, act, rows);
  f.ssm_state = io.ssm_state;
  f.ssm_state_dtype = io.ssm_state_dtype;
  f.out = io.out;

  GdnDecodePrepParams& pr = p.prep;  // x -> q, k, v, g, beta (the prep arm: conv_out never stored)
  set_gdn_decode_inputs(pr, io, d, act, rows);
  pr.q = io.q;
  pr.k = io.k;
  pr.v = io.v;
  pr.g = io.g;
  pr.beta = io.beta;

  ConvUpdateParams& c = p.conv;  // x -> conv_out [rows, C]
  set_gdn_conv_io(c, io, act);
  c.slots = io.slots;
  c.rows = rows;
  c.C = C;
  c.K = d.K;

  p.post = gdn_postconv_params(d, act, rows, io);  // conv_out -> q, k, v, g, beta

  DeltaRuleDecodeParams& dr = p.delta;  // q, k, v, g, beta, state -> out
  set_gdn_qkv_gates(dr, io, act);
  dr.slots = io.slots;
  dr.state = io.ssm_state;
  dr.state_dtype = io.ssm_state_dtype;
  dr.out = io.out;
  dr.out_dtype = act;
  dr.rows = rows;
  dr.staged = p.fused_contract.arm == GdnDecodeArm::staged;  // (the contract fell back where it cannot run)
  set_gdn_heads(dr, d);
  if (io.norm_w && !p.is_fused()) {
    set_gdn_norm(dr, io);
    dr.col_blocks = 1;  // one block a head: the cluster form measured slower (docs/BENCHMARKS.md)
  }
  return p;
}

double GdnDecodePath::fused_bytes() const {
  const GdnDims& d = dims;
  return op_bytes::gdn_decode_fused(fused.rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K, act_bytes, state_bytes, ssm_bytes);
}
double GdnDecodePath::prep_bytes() const {
  const GdnDims& d = dims;
  return op_bytes::gdn_decode_prep(prep.rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K, act_bytes, state_bytes);
}
double GdnDecodePath::conv_bytes() const {
  return op_bytes::conv_update(conv.rows, dims.C(), dims.K, act_bytes, state_bytes);
}
double GdnDecodePath::post_bytes() const {
  return op_bytes::postconv(post.T, dims.Hk, dims.Hv, dims.Dk, dims.Dv, act_bytes);
}
double GdnDecodePath::delta_bytes() const {
  const double norm =
      norm_fused() ? op_bytes::fused_gated_norm(delta.rows, dims.Hv, dims.Dv, act_bytes, dtype_size(delta.norm_w_dtype))
                   : 0.0;
  return op_bytes::delta_rule(delta.rows, delta.rows, dims.Hk, dims.Hv, dims.Dk, dims.Dv, act_bytes, ssm_bytes) + norm;
}

void GdnDecodePath::launch(cudaStream_t s, NodeRecorder* rec, int layer) const {
  if (is_fused()) {
    launched(gdn_decode_fused(fused, fused_contract, s), rec, s, [&] {
      return NodeLabel{layer, "gdn.decode", "fused", fused_bytes()};
    });
    return;
  }
  if (is_prep()) {  // conv.update and postconv in one kernel, then the delta rule as unfused
    launched(gdn_decode_prep(prep, s), rec, s, [&] {
      return NodeLabel{layer, "conv.update+postconv", "prep", prep_bytes()};
    });
  } else {
    launched(conv_update(conv, conv_contract, s), rec, s, [&] {
      return NodeLabel{layer, "conv.update", std::string(arm_name(conv_contract.arm)), conv_bytes()};
    });
    launched(postconv(post, post_contract, s), rec, s, [&] {
      return NodeLabel{layer, "postconv", std::string(arm_name(post_contract.arm)), post_bytes()};
    });
  }
  launched(delta_rule_decode(delta, s), rec, s, [&] {
    return NodeLabel{layer, "delta_rule.decode",
                     delta.staged   ? "staged"
                     : norm_fused() ? "+gated_rmsnorm"
                                    : "-",
                     delta_bytes()};
  });
}

double GdnDecodePath::bytes() const {
  return is_fused() ? fused_bytes() : (is_prep() ? prep_bytes() : conv_bytes() + post_bytes()) + delta_bytes();
}

}  // namespace sg
