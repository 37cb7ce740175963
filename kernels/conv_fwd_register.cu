// conv_fwd_register.cu: the register arms of conv.fwd: `register` (one channel per thread, K at run
// time), `k4` (K = 4 at compile time) and `k4x2` (K = 4, two channels per thread: stripes c and
// c + 128 of a 256-channel tile). Each thread keeps its K weights (reversed) and a K-tap window of
// inputs in registers and walks its channel token by token; the inputs reach it through shared
// memory, which the block fills with 16-byte cp.async copies coalesced along the channels
// (`exact`: the chunk's K-1 left taps and 8 tokens; `whole`: a ring of 8-token batches, several in
// flight). Every input element is loaded once per program (the left taps of a later `exact` chunk
// are the only re-reads, from x). Templated on the activation type (x and out, f32 or bf16); the
// state dtype is switched at run time (only owner programs touch state).
//
// Accumulation order: taps d = K-1 down to 0 back, i.e. j = K-1-d = 0..K-1, the contract's order.
// State I/O (conv_fwd.h): only the sequence's owner program (first chunk / `whole`) reads
// state[slot] (into registers, thread per channel) and later, from the same thread, writes the
// new state; a later chunk takes its left taps from x.
//
// Why the hot loop looks the way it does: the kernel is bound by instruction issue, not memory.
// SiLU's expf and correctly rounded division are most of the ~30 instructions per output, so the
// token loop is branch-free (silu is a template parameter; the division's rare slow path is taken
// once per batch, see dev::silu_batch) and carries no per-token address arithmetic.
#include <cstdint>

#include "kernels/conv_fwd_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

using namespace conv_fwd_detail;

constexpr int kThreads = 128;
constexpr int W = kConvChunkTokens;  // tokens per register batch (= the `exact` chunk)

__device__ __forceinline__ float ldx(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldx(const __nv_bfloat16* p) { return __bfloat162float(__ldg(p)); }

// Tokens 0..nt-1 of a batch (all W when kFull: no per-token predicates) of one channel: inputs at
// src[t * SS] (shared memory), outputs at dst + t * C. The hot loop: kept free of branches
// (silu is a template parameter, chosen once per program) and of per-token address arithmetic.
template <bool kSilu, bool kFull, int KMAX, int SS, class T>
__device__ __forceinline__ void conv_tokens(float (&win)[KMAX - 1], const float (&wr)[KMAX], float bias, int K,
                                            const T* src, T* __restrict__ dst, int64_t C, int nt) {
  float acc[W], y[W];
#pragma unroll
  for (int t = 0; t < W; ++t) {
    // (1: an in-range stand-in for the tokens past nt, which are never stored)
    acc[t] = (kFull || t < nt) ? conv_step<KMAX>(win, wr, bias, to_f32(src[t * SS]), K) : 1.0f;
  }
  if constexpr (kSilu) {
    dev::silu_batch(acc, y);
  } else {
#pragma unroll
    for (int t = 0; t < W; ++t) y[t] = acc[t];
  }
#pragma unroll
  for (int t = 0; t < W; ++t) {
    if (kFull || t < nt) {
      *dst = from_f32<T>(y[t]);
      dst += C;
    }
  }
}

// Weights (reversed: wr[d] = w[c, K-1-d]) and bias of one channel; zeros for a channel >= C.
template <int KC, int KMAX>
__device__ __forceinline__ void load_weights(const ConvFwdParams& p, int c, bool cin, int K, float (&wr)[KMAX],
                                             float& bias) {
  const int64_t w0 = static_cast<int64_t>(c) * K;
  if constexpr (KC == 4) {
    if (cin && (reinterpret_cast<uintptr_t>(p.w) & 15) == 0) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p.w) + c);
      wr[0] = v.w;
      wr[1] = v.z;
      wr[2] = v.y;
      wr[3] = v.x;
    } else {
#pragma unroll
      for (int d = 0; d < KMAX; ++d) wr[d] = cin ? __ldg(p.w + w0 + (K - 1 - d)) : 0.0f;
    }
  } else {
#pragma unroll
    for (int d = 0; d < KMAX; ++d) wr[d] = (cin && d < K) ? __ldg(p.w + w0 + (K - 1 - d)) : 0.0f;
  }
  bias = (cin && p.bias) ? __ldg(p.bias + c) : 0.0f;
}

// The owner's read of its channel's old history into the window: slot q holds the input HB-q
// tokens before the sequence start (old state entry H-(HB-q), or 0 without history).
template <int HB>
__device__ __forceinline__ void load_history(const ConvFwdParams& p, bool hist, int64_t srow, bool cin, int H,
                                             float (&win)[HB]) {
#pragma unroll
  for (int q = 0; q < HB; ++q) {
    const int e = HB - q;
    win[q] = (cin && e <= H && hist) ? dev::load(p.state, p.state_dtype, srow + (H - e)) : 0.0f;
  }
}

// Writes the new state of a channel from the final window (win[HB-1] = the sequence's last input):
// entry e = the input H-1-e tokens before the last = win[HB-H+e] (old history when the sequence is
// shorter than K-1).
template <int HB>
__device__ __forceinline__ void store_state_from_window(const ConvFwdParams& p, int64_t srow, int H,
                                                        const float (&win)[HB]) {
#pragma unroll
  for (int e = 0; e < HB; ++e) {
    if (e < H) dev::store(p.state, p.state_dtype, srow + e, pick(win, HB - H + e));
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Copies row segment [c0, c0 + TILE) ∩ [0, C) of x row `row` into dst[TILE], vector v of the row
// (VE elements): a 16-byte cp.async when it lies inside the channels and the rows are aligned,
// else plain element loads (an unaligned stride, the tail vector at C). Columns >= C are never read.
template <class T, int VE>
__device__ __forceinline__ void stage_vector(T* dst, const T* __restrict__ x, int64_t xs, int64_t row, int c0, int col,
                                             int C, bool vec_ok) {
  const T* src = x + row * xs + c0 + col;
  if (vec_ok && c0 + col + VE <= C) {
    cp_async16(dst + col, src);
  } else {
    for (int k = 0; k < VE && c0 + col + k < C; ++k) dst[col + k] = __ldg(src + k);
  }
}

template <class T>
__device__ __forceinline__ bool rows_vector_aligned(const ConvFwdParams& p) {
  return (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && ((p.x_stride * static_cast<int64_t>(sizeof(T))) & 15) == 0;
}

// Compile-time geometry of one register arm: K slots, window, tile, 16-byte vectors, the exact
// tile [HB + W][TILE] and the whole ring [S][W][TILE] (S batches, about 8 KB).
template <class T, int KC, int CPT>
struct Geo {
  static constexpr int KMAX = KC > 0 ? KC : kConvMaxK;
  static constexpr int HB = KMAX - 1;  // history rows / window slots
  static constexpr int TILE = kThreads * CPT;
  static constexpr int VE = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte vector
  static constexpr int VPR = TILE / VE;                        // vectors per token row
  static constexpr int STAGE_BYTES = W * TILE * static_cast<int>(sizeof(T));
  static constexpr int S = 8192 / STAGE_BYTES > 2 ? 8192 / STAGE_BYTES : 2;
  static constexpr int kExactElems = (HB + W) * TILE;
  static constexpr int kWholeElems = S * W * TILE;
};

// exact: one 8-token chunk per program. Weights first, then the descriptor; from the descriptor
// alone the block stages the chunk's tokens and its left taps (x rows before the chunk) into
// shared memory with 16-byte cp.async, while the sequence metadata loads. Each thread then walks
// its channel through a K-tap register window.
template <class T, int KC, int CPT, bool kSilu>
__device__ __forceinline__ void exact_body(const ConvFwdParams& p,
                                           T* tile) {  // tile [HB + W][TILE]: row r = token (chunk start) - HB + r
  using G = Geo<T, KC, CPT>;
  constexpr int KMAX = G::KMAX, HB = G::HB, TILE = G::TILE, VE = G::VE, VPR = G::VPR;

  const int K = KC > 0 ? KC : p.K;
  const int H = K - 1;
  const int C = p.C;  // (int64 where it scales a row index)
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  const int64_t xs = p.x_stride;
  const int c0 = blockIdx.x * TILE;

  int cc[CPT];
  bool cin[CPT];
  float wr[CPT][KMAX], bias[CPT];
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    cc[s] = c0 + s * kThreads + threadIdx.x;
    cin[s] = cc[s] < C;
    load_weights<KC>(p, cc[s], cin[s], K, wr[s], bias[s]);
  }

  ConvChunk ch;
  if (!exact_chunk(p, blockIdx.y, ch)) return;
  const bool vec_ok = rows_vector_aligned<T>(p);
  // Rows HB-H .. HB+len-1 (the K-1 left taps, then the tokens); left taps before row 0 of x do not
  // exist (then this program is the owner and takes them from state).
  for (int v = threadIdx.x; v < (HB + W) * VPR; v += kThreads) {
    const int r = v / VPR, col = (v % VPR) * VE;
    const int64_t tok = static_cast<int64_t>(ch.start) - HB + r;
    if (r < HB - H || r >= HB + ch.len || tok < 0 || c0 + col >= C) continue;
    stage_vector<T, VE>(tile + r * TILE, x, xs, tok, c0, col, C, vec_ok);
  }
  cp_async_commit();
  const Work w = exact_work(p, ch);
  cp_async_wait<0>();
  __syncthreads();

  if (w.slot < 0) {  // padding sequence: zero outputs, no state access
#pragma unroll
    for (int s = 0; s < CPT; ++s) {
      if (!cin[s]) continue;
      for (int t = 0; t < w.n; ++t) out[(w.t0 + t) * C + cc[s]] = from_f32<T>(0.0f);
    }
    return;
  }
  int64_t srow[CPT];
  float win[CPT][HB];
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    srow[s] = (static_cast<int64_t>(w.slot) * C + cc[s]) * H;
    if (w.owner) {
      // The only reads of state[slot] in this launch: every stripe's old history, before any
      // output or state is written.
      load_history<HB>(p, w.hist, srow[s], cin[s], H, win[s]);
    } else {
#pragma unroll
      for (int q = 0; q < HB; ++q) {
        win[s][q] = (cin[s] && q >= HB - H) ? to_f32(tile[q * TILE + s * kThreads + threadIdx.x]) : 0.0f;
      }
    }
  }
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    if (!cin[s]) continue;
    const T* src = tile + HB * TILE + s * kThreads + threadIdx.x;
    T* dst = out + w.t0 * C + cc[s];
    if (w.n == W) {
      conv_tokens<kSilu, true, KMAX, TILE>(win[s], wr[s], bias[s], K, src, dst, C, W);
    } else {
      conv_tokens<kSilu, false, KMAX, TILE>(win[s], wr[s], bias[s], K, src, dst, C, w.n);
    }
  }
  if (w.owner) {
#pragma unroll
    for (int s = 0; s < CPT; ++s) {
      if (!cin[s]) continue;
      if (w.seq_len == w.n) {
        store_state_from_window<HB>(p, srow[s], H, win[s]);  // the whole sequence is in this chunk
      } else {
        // Longer sequence (len > 8 >= K-1): entry e is token len-(K-1)+e >= 0, staged here or read from x.
#pragma unroll
        for (int e = 0; e < HB; ++e) {
          if (e >= H) continue;
          const int i = w.seq_len - H + e;
          const float v = i < w.n ? to_f32(tile[(HB + i) * TILE + s * kThreads + threadIdx.x])
                                  : ldx(x + (w.seq_start + i) * xs + cc[s]);
          dev::store(p.state, p.state_dtype, srow[s] + e, v);
        }
      }
    }
  }
}

// whole: one program per (channel tile, sequence), walking the sequence in 8-token batches. The
// block streams its [8 tokens x tile] input batches into a shared ring S batches deep with 16-byte
// cp.async (S-1 batches in flight per block at no register cost); each thread walks its channel
// through a K-tap register window that carries over from batch to batch.
template <class T, int KC, int CPT, bool kSilu>
__device__ __forceinline__ void whole_body(const ConvFwdParams& p, T* ring) {  // ring [S][W][TILE]
  using G = Geo<T, KC, CPT>;
  constexpr int KMAX = G::KMAX, HB = G::HB, TILE = G::TILE, VE = G::VE, VPR = G::VPR, S = G::S;

  const int K = KC > 0 ? KC : p.K;
  const int H = K - 1;
  const int C = p.C;  // (int64 where it scales a row index)
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  const int64_t xs = p.x_stride;
  const int c0 = blockIdx.x * TILE;

  int cc[CPT];
  bool cin[CPT];
  float wr[CPT][KMAX], bias[CPT];
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    cc[s] = c0 + s * kThreads + threadIdx.x;
    cin[s] = cc[s] < C;
    load_weights<KC>(p, cc[s], cin[s], K, wr[s], bias[s]);
  }

  Work w;
  if (!whole_work(p, blockIdx.y, w)) return;
  if (w.slot < 0) {  // padding sequence: zero outputs, no state access
#pragma unroll
    for (int s = 0; s < CPT; ++s) {
      if (!cin[s]) continue;
      for (int t = 0; t < w.n; ++t) out[(w.t0 + t) * C + cc[s]] = from_f32<T>(0.0f);
    }
    return;
  }

  // Each thread copies the same NV vectors of every batch: vector i is row r[i], columns col[i] ..
  // col[i]+VE-1 of the tile; mode 0: outside the channels, 1: 16-byte cp.async, 2: element loads
  // (an unaligned stride or the tail vector at C). src[i] walks down the rows batch by batch.
  constexpr int NV = W * VPR / kThreads;
  static_assert(W * VPR % kThreads == 0, "whole: every thread copies the same number of vectors");
  const bool vec_ok = rows_vector_aligned<T>(p);
  const int nbatch = (w.n + W - 1) / W;
  const T* src[NV];
  int row[NV], off[NV], mode[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int v = threadIdx.x + i * kThreads;
    row[i] = v / VPR;
    const int col = (v % VPR) * VE;
    off[i] = row[i] * TILE + col;
    mode[i] = c0 + col >= C ? 0 : (vec_ok && c0 + col + VE <= C) ? 1 : 2;
    src[i] = x + (w.t0 + row[i]) * xs + c0 + col;
  }
  const int64_t batch_stride = static_cast<int64_t>(W) * xs;
  const auto issue = [&](int bi) {  // batch bi (called for bi = 0, 1, 2, ...) into ring slot bi % S
    if (bi < nbatch) {
      T* slot = ring + (bi % S) * (W * TILE);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (mode[i] != 0 && bi * W + row[i] < w.n) {
          if (mode[i] == 1) {
            cp_async16(slot + off[i], src[i]);
          } else {
            for (int k = 0; k < VE && c0 + (off[i] - row[i] * TILE) + k < C; ++k) slot[off[i] + k] = __ldg(src[i] + k);
          }
        }
        src[i] += batch_stride;
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) issue(i);

  int64_t srow[CPT];
  float win[CPT][HB];
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    srow[s] = (static_cast<int64_t>(w.slot) * C + cc[s]) * H;
    // The only reads of state[slot] in this launch (this program owns the sequence).
    load_history<HB>(p, w.hist, srow[s], cin[s], H, win[s]);
  }

  for (int bi = 0; bi < nbatch; ++bi) {
    cp_async_wait<S - 2>();
    __syncthreads();  // batch bi has landed for every thread; slot (bi-1) % S is free again
    issue(bi + S - 1);
    const int b = bi * W, nt = min(W, w.n - b);
#pragma unroll
    for (int s = 0; s < CPT; ++s) {
      if (!cin[s]) continue;
      const T* src = ring + (bi % S) * W * TILE + s * kThreads + threadIdx.x;
      T* dst = out + (w.t0 + b) * C + cc[s];
      if (nt == W) {
        conv_tokens<kSilu, true, KMAX, TILE>(win[s], wr[s], bias[s], K, src, dst, C, W);
      } else {
        conv_tokens<kSilu, false, KMAX, TILE>(win[s], wr[s], bias[s], K, src, dst, C, nt);
      }
    }
  }
  cp_async_wait<0>();  // (the trailing groups are empty)
#pragma unroll
  for (int s = 0; s < CPT; ++s) {
    if (cin[s]) store_state_from_window<HB>(p, srow[s], H, win[s]);
  }
}

// One __global__ per (arm, split) so that the kernel names carry the contract's names.
// Minimum resident blocks per SM for __launch_bounds__: as many as fit without local-memory spills
// (ptxas, sm_90, f32 | bf16 activations: register exact 64 | 64 registers, register whole 80 | 80,
// k4 exact 48 | 48, k4 whole 56 | 56, k4x2 exact 70 | 70, k4x2 whole 90 | 82; no spills).
constexpr int kMinBlocksRegExact = 8, kMinBlocksRegWhole = 6;
constexpr int kMinBlocksK4Exact = 10, kMinBlocksK4Whole = 9;
constexpr int kMinBlocksK4x2Exact = 7, kMinBlocksK4x2Whole = 5;

template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksRegExact) conv_fwd_register_exact_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 0, 1>::kExactElems];
  if (p.silu) {
    exact_body<T, 0, 1, true>(p, smem);
  } else {
    exact_body<T, 0, 1, false>(p, smem);
  }
}
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksRegWhole) conv_fwd_register_whole_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 0, 1>::kWholeElems];
  if (p.silu) {
    whole_body<T, 0, 1, true>(p, smem);
  } else {
    whole_body<T, 0, 1, false>(p, smem);
  }
}
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksK4Exact) conv_fwd_k4_exact_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 4, 1>::kExactElems];
  if (p.silu) {
    exact_body<T, 4, 1, true>(p, smem);
  } else {
    exact_body<T, 4, 1, false>(p, smem);
  }
}
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksK4Whole) conv_fwd_k4_whole_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 4, 1>::kWholeElems];
  if (p.silu) {
    whole_body<T, 4, 1, true>(p, smem);
  } else {
    whole_body<T, 4, 1, false>(p, smem);
  }
}
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksK4x2Exact) conv_fwd_k4x2_exact_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 4, 2>::kExactElems];
  if (p.silu) {
    exact_body<T, 4, 2, true>(p, smem);
  } else {
    exact_body<T, 4, 2, false>(p, smem);
  }
}
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocksK4x2Whole) conv_fwd_k4x2_whole_kernel(const ConvFwdParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ alignas(16) T smem[Geo<T, 4, 2>::kWholeElems];
  if (p.silu) {
    whole_body<T, 4, 2, true>(p, smem);
  } else {
    whole_body<T, 4, 2, false>(p, smem);
  }
}

// A refusal of the register arms' launcher, named (launch_check.h).
cudaError_t refuse(const char* rule) {
  refuse_launch("conv.fwd", rule);
  return cudaErrorInvalidValue;
}
cudaError_t refuse_k4() { return refuse("arms k4 and k4x2 need K = 4"); }

template <class T>
cudaError_t launch_typed(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                         cudaStream_t stream) {
  const dim3 g(c.grid.x, c.grid.y, c.grid.z), b(c.block.x, c.block.y, c.block.z);
  const bool whole = chunks == ConvChunksArm::whole;
  switch (c.arm) {
    case ConvFwdArm::reg:
      if (whole) {
        launch_kernel(conv_fwd_register_whole_kernel<T>, g, b, c.smem_bytes, stream, p);
      } else {
        launch_kernel(conv_fwd_register_exact_kernel<T>, g, b, c.smem_bytes, stream, p);
      }
      break;
    case ConvFwdArm::k4:
      if (p.K != 4) return refuse_k4();
      if (whole) {
        launch_kernel(conv_fwd_k4_whole_kernel<T>, g, b, c.smem_bytes, stream, p);
      } else {
        launch_kernel(conv_fwd_k4_exact_kernel<T>, g, b, c.smem_bytes, stream, p);
      }
      break;
    case ConvFwdArm::k4x2:
      if (p.K != 4) return refuse_k4();
      if (whole) {
        launch_kernel(conv_fwd_k4x2_whole_kernel<T>, g, b, c.smem_bytes, stream, p);
      } else {
        launch_kernel(conv_fwd_k4x2_exact_kernel<T>, g, b, c.smem_bytes, stream, p);
      }
      break;
    default: return refuse("the register launcher runs the register, k4 and k4x2 arms only");
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t conv_fwd_launch_register(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                                     cudaStream_t stream) {
  if (p.x_dtype != p.out_dtype) return refuse("the register arms need x_dtype == out_dtype");
  if (p.x_dtype == DType::bf16) return launch_typed<__nv_bfloat16>(p, c, chunks, stream);
  if (p.x_dtype == DType::f32) return launch_typed<float>(p, c, chunks, stream);
  return refuse("x_dtype must be bf16 or f32");
}

}  // namespace sg
