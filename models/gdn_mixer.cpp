// gdn_mixer.cpp: the GDN decode path (gdn_mixer.h).
#include "models/gdn_mixer.h"

#include <string>

#include "graphs/manifest.h"
#include "kernels/op_bytes.h"

namespace sg {

GdnDecodePath gdn_decode_path(const GdnDims& d, DType act, const ArmSelection& arms, int rows, const GdnDecodeIo& io) {
  GdnDecodePath p;
  p.dims = d;
  p.act_bytes = dtype_size(act);
  p.state_bytes = dtype_size(io.conv_state_dtype);
  const int C = d.C();
  p.fused_contract = gdn_decode_contract(arms.gdn_decode, GdnDecodeShape{rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K});
  p.conv_contract = conv_update_contract(arms.conv_update, ConvUpdateShape{rows, C, d.K});
  p.post_contract = postconv_contract(arms.postconv, PostconvShape{rows, d.Hk, d.Hv, d.Dk, d.Dv});

  GdnDecodeFusedParams& f = p.fused;
  f.x = io.x;
  f.x_stride = io.x_stride;
  f.a = io.a;
  f.a_stride = io.ab_stride;
  f.b = io.b;
  f.b_stride = io.ab_stride;
  f.act = act;
  f.conv_state = io.conv_state;
  f.conv_state_dtype = io.conv_state_dtype;
  f.w = io.conv_w;
  f.A_log = io.A_log;
  f.dt_bias = io.dt_bias;
  f.slots = io.slots;
  f.ssm_state = io.ssm_state;
  f.out = io.out;
  f.rows = rows;
  f.Hk = d.Hk;
  f.Hv = d.Hv;
  f.Dk = d.Dk;
  f.Dv = d.Dv;
  f.K = d.K;

  ConvUpdateParams& c = p.conv;  // x -> conv_out [rows, C]
  c.x = io.x;
  c.x_stride = io.x_stride;
  c.x_dtype = act;
  c.out = io.conv_out;
  c.out_dtype = act;
  c.state = io.conv_state;
  c.state_dtype = io.conv_state_dtype;
  c.slots = io.slots;
  c.w = io.conv_w;
  c.rows = rows;
  c.C = C;
  c.K = d.K;

  PostconvParams& pc = p.post;  // conv_out -> q, k, v, g, beta
  pc.conv = io.conv_out;
  pc.conv_stride = C;
  pc.conv_dtype = act;
  pc.a = io.a;
  pc.a_stride = io.ab_stride;
  pc.b = io.b;
  pc.b_stride = io.ab_stride;
  pc.ab_dtype = act;
  pc.A_log = io.A_log;
  pc.dt_bias = io.dt_bias;
  pc.q = io.q;
  pc.k = io.k;
  pc.v = io.v;
  pc.qkv_dtype = act;
  pc.g = io.g;
  pc.beta = io.beta;
  pc.T = rows;
  pc.Hk = d.Hk;
  pc.Hv = d.Hv;
  pc.Dk = d.Dk;
  pc.Dv = d.Dv;

  DeltaRuleDecodeParams& dr = p.delta;  // q, k, v, g, beta, state -> out
  dr.q = io.q;
  dr.k = io.k;
  dr.v = io.v;
  dr.qkv_dtype = act;
  dr.g = io.g;
  dr.beta = io.beta;
  dr.slots = io.slots;
  dr.state = io.ssm_state;
  dr.out = io.out;
  dr.out_dtype = act;
  dr.rows = rows;
  dr.Hk = d.Hk;
  dr.Hv = d.Hv;
  dr.Dk = d.Dk;
  dr.Dv = d.Dv;
  return p;
}

void GdnDecodePath::launch(cudaStream_t s, NodeRecorder* rec, int layer) const {
  const GdnDims& d = dims;
  const int rows = conv.rows, C = d.C();
  if (is_fused()) {
    launched(gdn_decode_fused(fused, fused_contract, s), rec, s, [&] {
      return NodeLabel{layer, "gdn.decode", "fused",
                       op_bytes::gdn_decode_fused(rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K, act_bytes, state_bytes)};
    });
    return;
  }
  launched(conv_update(conv, conv_contract, s), rec, s, [&] {
    return NodeLabel{layer, "conv.update", std::string(arm_name(conv_contract.arm)),
                     op_bytes::conv_update(rows, C, d.K, act_bytes, state_bytes)};
  });
  launched(postconv(post, post_contract, s), rec, s, [&] {
    return NodeLabel{layer, "postconv", std::string(arm_name(post_contract.arm)),
                     op_bytes::postconv(rows, d.Hk, d.Hv, d.Dk, d.Dv, act_bytes)};
  });
  launched(delta_rule_decode(delta, s), rec, s, [&] {
    return NodeLabel{layer, "delta_rule.decode", "-",
                     op_bytes::delta_rule(rows, rows, d.Hk, d.Hv, d.Dk, d.Dv, act_bytes)};
  });
}

double GdnDecodePath::bytes() const {
  const GdnDims& d = dims;
  const int rows = conv.rows;
  if (is_fused()) return op_bytes::gdn_decode_fused(rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K, act_bytes, state_bytes);
  return op_bytes::conv_update(rows, d.C(), d.K, act_bytes, state_bytes) +
         op_bytes::postconv(rows, d.Hk, d.Hv, d.Dk, d.Dv, act_bytes) +
         op_bytes::delta_rule(rows, rows, d.Hk, d.Hv, d.Dk, d.Dv, act_bytes);
}

}  // namespace sg
