// conv_fwd_common.cuh: private to the conv kernels (conv_fwd.cu, conv_fwd_register.cu, and
// gdn_prefill_fused.cu, which reuses the conv arithmetic): the per-program work lookup shared by
// every conv.fwd arm (which tokens, which sequence, whether this program owns the sequence's
// state), typed element conversions, the one-channel conv step and the branch-free SiLU of the
// register arms, and the per-arm launch functions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/conv_fwd.h"
#include "kernels/device_util.cuh"

namespace sg {

// The state I/O argument (conv_fwd.h, point 3) needs a later chunk's K-1 left taps to lie inside
// its sequence: K-1 <= chunk tokens.
static_assert(kConvMaxK - 1 <= kConvChunkTokens, "a later chunk's left taps must stay inside its sequence");

namespace conv_fwd_detail {

// One program's work: tokens [t0, t0 + n) (absolute rows) of the sequence that starts at row
// seq_start and has seq_len tokens. `owner`: this program reads and writes state[slot] (it handles
// the sequence's first token); t0 - seq_start is then 0.
struct Work {
  int64_t t0 = 0;
  int n = 0;
  int64_t seq_start = 0;
  int seq_len = 0;
  int slot = -1;
  bool hist = false;
  bool owner = false;
};

// A load of read-only metadata that the compiler may not sink below a later branch (volatile asm
// keeps program order), so independent metadata loads are in flight together.
__device__ __forceinline__ int32_t ld_meta(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Chunk descriptor of program y for `exact`, or false when y is beyond the live descriptors. Reads
// only the descriptor and the live count, together (both in bounds for every y < grid y: the
// table is padded to the contract's maximum), so the caller can issue its token loads before the
// sequence metadata arrives.
__device__ __forceinline__ bool exact_chunk(const ConvFwdParams& p, int y, ConvChunk& ch) {
  const int32_t* d = reinterpret_cast<const int32_t*>(p.chunks + y);
  static_assert(sizeof(ConvChunk) == 3 * sizeof(int32_t), "ConvChunk is {seq, start, len}");
  const int32_t live = ld_meta(p.n_chunks);
  ch.seq = ld_meta(d + 0);
  ch.start = ld_meta(d + 1);
  ch.len = ld_meta(d + 2);
  return y < live;
}

// The rest of an `exact` program's work, from its descriptor. Traps on a descriptor that breaks the
// chunking the state I/O relies on (len 1..kConvChunkTokens; a later chunk at least
// kConvChunkTokens tokens into its sequence).
__device__ __forceinline__ Work exact_work(const ConvFwdParams& p, const ConvChunk& ch) {
  Work w;
  w.t0 = ch.start;
  w.n = ch.len;
  w.seq_start = p.cu_seqlens[ch.seq];
  w.seq_len = p.cu_seqlens[ch.seq + 1] - p.cu_seqlens[ch.seq];
  w.slot = p.slots[ch.seq];
  w.hist = p.has_history[ch.seq] != 0;
  w.owner = w.t0 == w.seq_start;
  const int64_t off = w.t0 - w.seq_start;
  if (ch.len < 1 || ch.len > kConvChunkTokens || off < 0 || off + ch.len > w.seq_len ||
      (!w.owner && off < kConvChunkTokens)) {
    __trap();
  }
  return w;
}

// `whole`: program y handles sequence y; false when y is beyond the live sequences or the sequence
// is empty (no output, state untouched).
__device__ __forceinline__ bool whole_work(const ConvFwdParams& p, int y, Work& w) {
  const int live = *p.n_seqs;
  if (y >= live) return false;  // before reading cu_seqlens: it may hold only live + 1 entries
  const int32_t b = p.cu_seqlens[y], e = p.cu_seqlens[y + 1];
  if (e <= b) return false;
  w.t0 = b;
  w.n = e - b;
  w.seq_start = b;
  w.seq_len = e - b;
  w.slot = p.slots[y];
  w.hist = p.has_history[y] != 0;
  w.owner = true;
  return true;
}

// Typed element access for the templated (fast) arms: f32 math, one rounding on store.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// a[i] for a runtime i in [0, N) without dynamic register indexing (which would go to local
// memory): N selects. Only state-owning programs use it.
template <int N>
__device__ __forceinline__ float pick(const float (&a)[N], int i) {
  float v = 0.0f;
#pragma unroll
  for (int q = 0; q < N; ++q) v = (q == i) ? a[q] : v;
  return v;
}

// One output: win[0..HB) holds the inputs of the HB tokens before this one, oldest first (win[HB-1]
// the previous token), v this token's input. acc = bias; taps d = K-1 .. 1 back, then d = 0, i.e.
// j = K-1-d = 0 .. K-1, the contract's order. Then the window slides by one. wr is reversed:
// wr[d] = w[c, K-1-d]. (Shared by the register arms and gdn_prefill_fused.)
template <int KMAX>
__device__ __forceinline__ float conv_step(float (&win)[KMAX - 1], const float (&wr)[KMAX], float bias, float v,
                                           int K) {
  constexpr int HB = KMAX - 1;
  float acc = bias;
#pragma unroll
  for (int d = KMAX - 1; d >= 1; --d) {
    if (d < K) acc = fmaf(wr[d], win[HB - d], acc);
  }
  acc = fmaf(wr[0], v, acc);
#pragma unroll
  for (int q = 0; q + 1 < HB; ++q) win[q] = win[q + 1];
  win[HB - 1] = v;
  return acc;
}

}  // namespace conv_fwd_detail

// Per-arm launchers (conv_fwd.cu: tiled; conv_fwd_register.cu: register, k4, k4x2). Called by
// conv_fwd() after it has validated the params against the contract.
cudaError_t conv_fwd_launch_tiled(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                                  cudaStream_t stream);
cudaError_t conv_fwd_launch_register(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                                     cudaStream_t stream);

}  // namespace sg
