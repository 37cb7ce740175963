// gdn_mixer.h: what a GDN layer's kernels read and write (GdnIo), the params they share filled in
// one place (used by the decode path below and the model step's prefill path), and the GDN decode
// path of one layer, from the conv input (the q|k|v part of in_proj's output) to the delta rule's
// output, written once for the model step, the one-layer GDN step and the kernel bench: gdn.decode=fused (one kernel,
// where its contract runs it), gdn.decode=prep (conv + post-conv in one kernel, then the delta rule) or
// conv.update -> postconv -> delta_rule.decode. Each launch is checked (a failure names
// the node) and, under capture, labelled with its layer, op, the arm that ran and the op's bytes (kernels/op_bytes.h),
// so the three users count the same bytes.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/conv_update.h"
#include "kernels/delta_rule.h"
#include "kernels/gdn_decode_fused.h"
#include "kernels/gdn_decode_prep.h"
#include "kernels/numeric.h"
#include "kernels/postconv.h"
#include "models/qwen35_config.h"

namespace sg {

class NodeRecorder;

// Where a GDN layer's kernels read and write. act (the callers') is the dtype of x, a, b, the
// scratch q, k, v and out. The prefill path takes its slots from the varlen metadata.
struct GdnIo {
  const void* x = nullptr;  // [rows, C] conv input at row stride x_stride
  int64_t x_stride = 0;
  const void* a = nullptr;  // [rows, Hv] at row stride ab_stride (the decay input)
  const void* b = nullptr;  // [rows, Hv] at row stride ab_stride (the beta input)
  int64_t ab_stride = 0;
  const int32_t* slots = nullptr;  // [rows] state slot of each row (-1: padding)
  const float* conv_w = nullptr;   // [C, K]
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  void* conv_state = nullptr;      // [slots, C, K - 1] in conv_state_dtype
  DType conv_state_dtype = DType::bf16;
  void* ssm_state = nullptr;  // [slots, Hv, Dk, Dv] in ssm_state_dtype
  DType ssm_state_dtype = DType::f32;
  // Scratch of the unfused paths: conv_out [rows, C]; q, k [rows, Hk, Dk]; v [rows, Hv, Dv];
  // g, beta [rows, Hv] f32. Unused by the fused decode arm.
  void* conv_out = nullptr;
  void *q = nullptr, *k = nullptr, *v = nullptr;
  float *g = nullptr, *beta = nullptr;
  void* out = nullptr;  // [rows, Hv, Dv]
  // Optional: the layer's gated RMSNorm in the delta rule's epilogue (decode: delta_rule.h, taken
  // by the unfused path only, GdnDecodePath::norm_fused; prefill: the mma form,
  // delta_rule_prefill_mma.h), so that out holds the normed output.
  const void* norm_z = nullptr;  // [rows, Hv, Dv] bf16 at token stride norm_z_stride
  int64_t norm_z_stride = 0;
  const void* norm_w = nullptr;  // [Dv]
  DType norm_w_dtype = DType::f32;
  float norm_eps = 1e-6f;
};

// The GDN kernels' params structs name the fields they share alike; these fill them from `io`.
template <class P>
void set_gdn_heads(P& p, const GdnDims& d) {
  p.Hk = d.Hk;
  p.Hv = d.Hv;
  p.Dk = d.Dk;
  p.Dv = d.Dv;
}
template <class P>
void set_gdn_norm(P& p, const GdnIo& io) {  // the delta rule's fused gated norm (decode and prefill)
  p.norm_z = io.norm_z;
  p.norm_z_stride = io.norm_z_stride;
  p.norm_w = io.norm_w;
  p.norm_w_dtype = io.norm_w_dtype;
  p.norm_eps = io.norm_eps;
}
template <class P>
void set_gdn_conv_io(P& p, const GdnIo& io, DType act) {  // conv.update and conv.fwd: x -> conv_out, state, weights
  p.x = io.x;
  p.x_stride = io.x_stride;
  p.x_dtype = act;
  p.out = io.conv_out;
  p.out_dtype = act;
  p.state = io.conv_state;
  p.state_dtype = io.conv_state_dtype;
  p.w = io.conv_w;
}
template <class P>
void set_gdn_gate_inputs(P& p, const GdnIo& io) {  // a, b [rows, Hv] at ab_stride; A_log, dt_bias
  p.a = io.a;
  p.a_stride = io.ab_stride;
  p.b = io.b;
  p.b_stride = io.ab_stride;
  p.A_log = io.A_log;
  p.dt_bias = io.dt_bias;
}
// The inputs the fused and prep decode kernels share: conv input, gates, conv state, shape.
template <class P>
void set_gdn_decode_inputs(P& p, const GdnIo& io, const GdnDims& d, DType act, int rows) {
  p.x = io.x;
  p.x_stride = io.x_stride;
  set_gdn_gate_inputs(p, io);
  p.act = act;
  p.conv_state = io.conv_state;
  p.conv_state_dtype = io.conv_state_dtype;
  p.w = io.conv_w;
  p.slots = io.slots;
  p.rows = rows;
  set_gdn_heads(p, d);
  p.K = d.K;
}
template <class P>
void set_gdn_qkv_gates(P& p, const GdnIo& io, DType act) {  // post-conv outputs, the delta rule's inputs
  p.q = io.q;
  p.k = io.k;
  p.v = io.v;
  p.qkv_dtype = act;
  p.g = io.g;
  p.beta = io.beta;
}
// Post-conv of `rows` rows from io.conv_out into q, k, v, g, beta (decode and prefill alike).
PostconvParams gdn_postconv_params(const GdnDims& d, DType act, int rows, const GdnIo& io);

// The path's kernels and their parameters for `rows` rows under `arms` (gdn.decode, conv.update,
// postconv); callers may adjust a field (the kernel bench sets delta.split) before launching.
struct GdnDecodePath {
  LaunchContract<GdnDecodeArm> fused_contract;  // the arm that runs (fused, staged fall back where not built)
  LaunchContract<ConvUpdateArm> conv_contract;  // set when the unfused path runs
  LaunchContract<PostconvArm> post_contract;
  GdnDecodeFusedParams fused;
  GdnDecodePrepParams prep;  // the prep arm's conv + post-conv kernel
  ConvUpdateParams conv;
  PostconvParams post;
  DeltaRuleDecodeParams delta;
  GdnDims dims;
  size_t act_bytes = 2, state_bytes = 2, ssm_bytes = 4;  // element sizes of act, the conv state and the SSM state

  bool is_fused() const { return fused_contract.arm == GdnDecodeArm::fused; }
  bool is_prep() const { return fused_contract.arm == GdnDecodeArm::prep; }
  // Whether the delta rule writes the gated-normed output (io.norm_w was set and the path is unfused).
  bool norm_fused() const { return !is_fused() && delta.norm_w != nullptr; }
  // Launches the path on `stream`; with `rec`, labels each node with `layer`.
  void launch(cudaStream_t stream, NodeRecorder* rec, int layer) const;
  // The bytes the path must move (the sum of its nodes' labels).
  double bytes() const;

 private:
  // The bytes of each node (kernels/op_bytes.h), for launch()'s labels and bytes().
  double fused_bytes() const;
  double prep_bytes() const;
  double conv_bytes() const;
  double post_bytes() const;
  double delta_bytes() const;
};

GdnDecodePath gdn_decode_path(const GdnDims& d, DType act, const ArmSelection& arms, int rows, const GdnIo& io);

}  // namespace sg
