// gdn_mixer.h: the GDN decode path of one layer, from the conv input (the q|k|v part of in_proj's
// output) to the delta rule's output, written once for the model step, the one-layer GDN step and
// the kernel bench: gdn.decode=fused (one kernel, where its contract runs it) or conv.update ->
// postconv -> delta_rule.decode. Each launch is checked (a failure names the node) and, under
// capture, labelled with its layer, op, the arm that ran and the op's bytes (kernels/op_bytes.h),
// so the three users count the same bytes.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/conv_update.h"
#include "kernels/delta_rule.h"
#include "kernels/gdn_decode_fused.h"
#include "kernels/numeric.h"
#include "kernels/postconv.h"
#include "models/qwen35_config.h"

namespace sg {

class NodeRecorder;

// Where the path reads and writes. act is the dtype of x, a, b, the scratch q, k, v and out.
struct GdnDecodeIo {
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
  float* ssm_state = nullptr;  // [slots, Hv, Dk, Dv]
  // Scratch of the unfused path: conv_out [rows, C]; q, k [rows, Hk, Dk]; v [rows, Hv, Dv];
  // g, beta [rows, Hv] f32. Unused by the fused arm.
  void* conv_out = nullptr;
  void *q = nullptr, *k = nullptr, *v = nullptr;
  float *g = nullptr, *beta = nullptr;
  void* out = nullptr;  // [rows, Hv, Dv]
};

// The path's kernels and their parameters for `rows` rows under `arms` (gdn.decode, conv.update,
// postconv); callers may adjust a field (the kernel bench sets delta.split) before launching.
struct GdnDecodePath {
  LaunchContract<GdnDecodeArm> fused_contract;
  LaunchContract<ConvUpdateArm> conv_contract;
  LaunchContract<PostconvArm> post_contract;
  GdnDecodeFusedParams fused;
  ConvUpdateParams conv;
  PostconvParams post;
  DeltaRuleDecodeParams delta;
  GdnDims dims;
  size_t act_bytes = 2, state_bytes = 2;  // element sizes of act and of the conv state

  bool is_fused() const { return fused_contract.arm == GdnDecodeArm::fused; }
  // Launches the path on `stream`; with `rec`, labels each node with `layer`.
  void launch(cudaStream_t stream, NodeRecorder* rec, int layer) const;
  // The bytes the path must move (the sum of its nodes' labels).
  double bytes() const;
};

GdnDecodePath gdn_decode_path(const GdnDims& d, DType act, const ArmSelection& arms, int rows, const GdnDecodeIo& io);

}  // namespace sg
