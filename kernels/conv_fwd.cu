// conv_fwd.cu: the conv.fwd launcher (validation against the contract, the switch over its arm) and the `tiled`
// reference arm. The register arms are in conv_fwd_register.cu. The state I/O design (one owner
// program per sequence reads and writes its state) is explained in conv_fwd.h.
#include <array>
#include <functional>

#include "kernels/conv_fwd_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

using conv_fwd_detail::exact_chunk;
using conv_fwd_detail::exact_work;
using conv_fwd_detail::whole_work;
using conv_fwd_detail::Work;

// The reference arm. Block (32 channels, 8 token lanes); the program's tokens are walked in tiles
// of 16: shared rows r = 0 .. nt+K-2 hold the inputs of sequence-relative tokens rel0-(K-1)+r for
// the block's 32 channels (old state or 0 before the sequence start: only possible in the owner's
// first tile), then token lane ty computes tokens ty and ty+8 of the tile, re-reading the weights
// from global memory. Plain dtype-switched loads and stores (dev::load / dev::store).
template <bool kWhole>
__device__ __forceinline__ void tiled_body(const ConvFwdParams& p) {
  extern __shared__ float tile[];  // [kConvTiledTokens + K - 1][kConvTiledChannels]
  constexpr int TC = kConvTiledChannels;
  const int tx = threadIdx.x, ty = threadIdx.y, lanes = blockDim.y;
  const int C = p.C, K = p.K, H = K - 1;
  const int c = blockIdx.x * TC + tx;
  const bool cin = c < C;

  Work w;
  if constexpr (kWhole) {
    if (!whole_work(p, blockIdx.y, w)) return;
  } else {
    ConvChunk ch;
    if (!exact_chunk(p, blockIdx.y, ch)) return;
    w = exact_work(p, ch);
  }
  if (w.slot < 0) {  // padding sequence: zero outputs, no state access
    for (int t = ty; t < w.n; t += lanes) {
      if (cin) dev::store(p.out, p.out_dtype, (w.t0 + t) * C + c, 0.0f);
    }
    return;
  }
  const int64_t srow = (static_cast<int64_t>(w.slot) * C + c) * H;  // channel c's state row (owner only)
  const float bias = (cin && p.bias) ? p.bias[c] : 0.0f;
  const int64_t off = w.t0 - w.seq_start;  // sequence-relative index of the program's first token

  for (int b = 0; b < w.n; b += kConvTiledTokens) {
    const int nt = min(kConvTiledTokens, w.n - b);
    const int64_t rel0 = off + b;
    for (int r = ty; r < nt + H; r += lanes) {
      const int64_t i = rel0 - H + r;  // sequence-relative token of row r
      float v = 0.0f;
      if (cin) {
        if (i >= 0) {
          v = dev::load(p.x, p.x_dtype, (w.seq_start + i) * p.x_stride + c);
        } else if (w.owner && w.hist) {  // i < 0 only in the owner's first tile (rel0 == 0)
          v = dev::load(p.state, p.state_dtype, srow + (H + i));
        }
      }
      tile[r * TC + tx] = v;
    }
    __syncthreads();  // every read of state[slot] by this block happened before this point
    if (w.owner && b == 0 && ty < H && cin) {
      // New state entry ty: sequence-relative token len-(K-1)+ty, from x (any chunk) or, before
      // the sequence start, the old history now in shared row H+i.
      const int64_t i = static_cast<int64_t>(w.seq_len) - H + ty;
      const float v = i >= 0 ? dev::load(p.x, p.x_dtype, (w.seq_start + i) * p.x_stride + c) : tile[(H + i) * TC + tx];
      dev::store(p.state, p.state_dtype, srow + ty, v);
    }
    for (int t = ty; t < nt; t += lanes) {
      if (!cin) continue;
      float acc = bias;
      for (int j = 0; j < K; ++j) acc = fmaf(p.w[static_cast<int64_t>(c) * K + j], tile[(t + j) * TC + tx], acc);
      if (p.silu) acc = dev::silu(acc);
      dev::store(p.out, p.out_dtype, (w.t0 + b + t) * C + c, acc);
    }
    __syncthreads();  // the tile is refilled
  }
}

__global__ void __launch_bounds__(kConvTiledChannels* kConvTiledTokenLanes)
    conv_fwd_tiled_exact_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  tiled_body<false>(p);
}
__global__ void __launch_bounds__(kConvTiledChannels* kConvTiledTokenLanes)
    conv_fwd_tiled_whole_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  tiled_body<true>(p);
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

bool act_dtype(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t conv_fwd_launch_tiled(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                                  cudaStream_t stream) {
  if (chunks == ConvChunksArm::exact) {
    launch_kernel(conv_fwd_tiled_exact_kernel, to_dim3(c.grid), to_dim3(c.block), c.smem_bytes, stream, p);
  } else {
    launch_kernel(conv_fwd_tiled_whole_kernel, to_dim3(c.grid), to_dim3(c.block), c.smem_bytes, stream, p);
  }
  return cudaGetLastError();
}

cudaError_t conv_fwd(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                     cudaStream_t stream) {
  LaunchCheck chk("conv.fwd");
  chk.in_range(p.C, 1, INT32_MAX, "C").in_range(p.K, kConvMinK, kConvMaxK, "K");
  chk.require(p.x_stride >= p.C, "x_stride must be >= C");
  chk.not_null(p.x, "x").not_null(p.out, "out").not_null(p.state, "state").not_null(p.w, "w");
  chk.not_null(p.cu_seqlens, "cu_seqlens").not_null(p.slots, "slots").not_null(p.has_history, "has_history");
  chk.not_null(p.n_seqs, "n_seqs");
  chk.require(chunks != ConvChunksArm::exact || (p.chunks && p.n_chunks),
              "conv.chunks=exact needs chunks and n_chunks");
  chk.require(act_dtype(p.x_dtype) && act_dtype(p.out_dtype) && act_dtype(p.state_dtype),
              "x_dtype, out_dtype and state_dtype must be bf16 or f32");
  chk.require(c.arm == ConvFwdArm::tiled || p.x_dtype == p.out_dtype, "this arm needs x_dtype == out_dtype");
  if (!chk.ok()) return cudaErrorInvalidValue;
  // The contract must be the one for these params (grid, block, shared memory, kernel).
  LaunchContract<ConvFwdArm> want;
  try {
    want = conv_fwd_contract(c.arm, chunks, ConvFwdShape{p.max_tokens, p.max_seqs, p.C, p.K});
  } catch (const std::exception& e) {
    chk.require(false, std::string("its shape: ") + e.what());
    return cudaErrorInvalidValue;
  }
  chk.require(want.arm == c.arm && want.grid == c.grid && want.block == c.block && want.smem_bytes == c.smem_bytes &&
                  want.kernel == c.kernel,
              "the contract: it is not the one conv_fwd_contract gives for these params");
  if (!chk.ok()) return cudaErrorInvalidValue;

  switch (c.arm) {  // closed: an arm without a case does not compile (-Werror=switch)
    case ConvFwdArm::tiled: return conv_fwd_launch_tiled(p, c, chunks, stream);
    case ConvFwdArm::reg:
    case ConvFwdArm::k4:
    case ConvFwdArm::k4x2: return conv_fwd_launch_register(p, c, chunks, stream);
  }
  chk.require(false, "the contract: its arm is not one of the op's arms");
  return cudaErrorInvalidValue;
}

}  // namespace sg
