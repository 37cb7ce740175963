// gdn_prefill_fused.cu: the fused gdn.prefill kernel and its launcher (contract, layouts, the
// byte-identity argument and the state I/O argument: gdn_prefill_fused.h).
//
// Blocks: linear index L = blockIdx.x, tile = L / (B + 1), r = L % (B + 1), B = conv blocks per
// tile (gdn_prefill_conv_blocks_per_tile). Blocks start in linear order, so the blocks of a tile
// run together and read whole rows of x (DRAM locality).
//   r < B, conv block: half-warp hw = threadIdx.x / 16 takes channel group 8r + hw (q head, k head
//     or a 128-channel piece of v); lane m of the half holds channels 8m .. 8m+7 of the group: their
//     K weights (reversed, conv_step's order) and bias in registers, and a window of the K-1
//     previous raw inputs. It walks the tile's work range token by token, sequence by sequence
//     (every half-warp of the block walks the same tokens, so the control flow is uniform over the
//     block), four tokens per step, rows 16 tokens ahead prefetched into L2. Per token: the conv
//     (conv_step: bias, then fmaf per tap, oldest first), SiLU (silu_fast, or dev::silu for a
//     token where silu_fast is not exact: the bytes of dev::silu either way), one rounding to the
//     activation dtype (conv.fwd's store); then for q/k groups the sum of squares with the 16-lane
//     tree of postconv token_tile (the reference tree's additions), inv = 1 / sqrtf(sum + 1e-6)
//     (one lane per token computes it, the half shares it), y * inv rounded to the q/k dtype; for v
//     groups y converted to the v dtype (postconv's copy).
//     The two halves of a warp are both q/k groups or neither (2*Hk groups come first and come in
//     pairs), so the tree's full-warp shuffles always run in full, converged warps.
//   r == B, gate block: g and beta of the tile's nominal tokens [64 tile, 64 tile + 64) ∩ [0, T),
//     token-major (contiguous stores): gate_g / gate_beta of postconv_common.cuh, zeros for tokens
//     of padding sequences.
#include "kernels/conv_fwd_common.cuh"
#include "kernels/gdn_prefill_fused.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/postconv_common.cuh"

namespace sg {
namespace {

using conv_fwd_detail::conv_step;
using conv_fwd_detail::pick;
using postconv_detail::load8;
using postconv_detail::pack8;
using postconv_detail::Raw8;
using postconv_detail::store8;
using postconv_detail::store_raw8;
using postconv_detail::tree_sum_128_by8;

constexpr int kTT = kGdnPrefillTileTokens;       // tokens per tile
constexpr int kGW = kGdnPrefillGroupChannels;    // channels per group (= Dk)
constexpr int kGPB = kGdnPrefillGroupsPerBlock;  // groups (half-warps) per block
constexpr int kThreads = static_cast<int>(kGdnPrefillBlock);
// Tuning knobs (tools/sweep_fused.sh builds variants with -DSG_FUSED_STEP=... etc. and times
// them; docs/BENCHMARKS.md has the sweep: prefetch 8 beat 16 and 32, step 4 beat 8). None changes a byte.
#ifndef SG_FUSED_STEP
#define SG_FUSED_STEP 4
#endif
#ifndef SG_FUSED_PREFETCH
#define SG_FUSED_PREFETCH 8
#endif
#ifndef SG_FUSED_MIN_BLOCKS
#define SG_FUSED_MIN_BLOCKS 4
#endif
constexpr int kStep = SG_FUSED_STEP;          // tokens per step of the walk
constexpr int kPrefetch = SG_FUSED_PREFETCH;  // tokens requested into L2 ahead of the step
static_assert(kThreads == 16 * kGPB && kGW == 8 * 16, "a half-warp per group, 8 channels per lane");
static_assert(kTT <= kThreads, "the gate block classifies one token per thread");
static_assert(kStep <= 16 && (kStep & (kStep - 1)) == 0, "lane j mod kStep of a half computes token j's root");
static_assert(kConvMaxK - 1 < kTT, "a sequence's head (its first K-1 tokens) crosses at most one tile boundary");
// Minimum resident blocks per SM for __launch_bounds__ (caps registers at 65536 / (128 * 4) = 128).
// ptxas (CUDA 13.0, sm_90, K = 4): 128 registers with 44 (bf16) / 104 (f32) bytes of spill stores;
// unconstrained it takes ~160-170 (3 blocks per SM, no spills). Measured on the H200 (BENCHMARKS.md,
// tools/sweep_fused.sh): 4 and 3 within 3% of each other, no cap (1) 15% slower.
constexpr int kMinBlocks = SG_FUSED_MIN_BLOCKS;  // 1: no cap below the 255 of the ISA

// The live batch, read once per program.
struct Live {
  int N = 0;  // sequences
  int T = 0;  // tokens
};

// The sequence n < N that holds token t (0 <= t < T): the largest n with cu[n] <= t (it is
// non-empty: cu[n+1] > t). Every thread of a block searches the same t: the loads are broadcasts.
__device__ __forceinline__ int seq_of(const int32_t* cu, int N, int t) {
  int lo = 0, hi = N - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (__ldg(cu + mid) <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// lo_j of the header: where tile j's work range starts. Token s = 64 j, pushed past the head
// (first K-1 tokens) of the sequence holding s when that sequence started before s; T past the end.
__device__ __forceinline__ int range_start(const GdnPrefillFusedParams& p, const Live& live, int j) {
  const int64_t s64 = static_cast<int64_t>(j) * kTT;
  if (s64 >= live.T) return live.T;
  const int s = static_cast<int>(s64);
  const int n = seq_of(p.cu_seqlens, live.N, s);
  const int b = __ldg(p.cu_seqlens + n), e = __ldg(p.cu_seqlens + n + 1);
  return b == s ? s : max(s, min(b + (p.K - 1), e));
}

// Asks L2 for the line holding element i of `base` (elements of es bytes); no register waits on it.
__device__ __forceinline__ void prefetch_l2(const void* base, int64_t i, int es) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(base) + i * es));
}

template <bool kVec>
__device__ __forceinline__ void store_out(void* out, DType t, int64_t i, const float (&y)[8]) {
  if (t == DType::bf16) {
    store8<DType::bf16, kVec>(out, i, y);
  } else {
    store8<DType::f32, kVec>(out, i, y);
  }
}

// The conv block's half-warp: see the file header. kAct: x's dtype (and the conv output's); KC = K.
template <DType kAct, int KC, bool kVec>
__device__ __forceinline__ void conv_group(const GdnPrefillFusedParams& p, const Live& live, int tile, int r) {
  constexpr int H = KC - 1;  // window slots = state entries per channel
  const int lane = static_cast<int>(threadIdx.x) & 31, m = lane & 15;
  const int group = r * kGPB + static_cast<int>(threadIdx.x >> 4);
  const int nqk = 2 * p.Hk;
  const int64_t vch = static_cast<int64_t>(p.Hv) * p.Dv;  // v channels
  const int ngroups = nqk + static_cast<int>((vch + kGW - 1) / kGW);
  // An idle half (past the last group) or lane (past a narrow last v piece) never shuffles: its
  // partner half is a v group too (the last group is a v group and q/k groups come in pairs).
  if (group >= ngroups) return;
  const bool qk = group < nqk;
  const int64_t rest = vch - static_cast<int64_t>(group - nqk) * kGW;  // v channels from this piece on
  const int width = qk || rest >= kGW ? kGW : static_cast<int>(rest);
  if (8 * m >= width) return;
  const int64_t C = 2 * static_cast<int64_t>(p.Hk) * kGW + vch;
  const int64_t c0 = static_cast<int64_t>(group) * kGW + 8 * m;  // this lane's channels c0 .. c0+7
  void* out;
  int64_t orow, ocol;  // element (t, channel c0 + e) of the output: t * orow + ocol + e
  if (group < p.Hk) {
    out = p.q;  // [T, Hk, Dk]
    orow = static_cast<int64_t>(p.Hk) * kGW;
    ocol = static_cast<int64_t>(group) * kGW + 8 * m;
  } else if (qk) {
    out = p.k;  // [T, Hk, Dk]
    orow = static_cast<int64_t>(p.Hk) * kGW;
    ocol = static_cast<int64_t>(group - p.Hk) * kGW + 8 * m;
  } else {
    out = p.v;  // [T, Hv, Dv] = [T, Hv * Dv]
    orow = vch;
    ocol = static_cast<int64_t>(group - nqk) * kGW + 8 * m;
  }

  // Weights [8 channels][KC] reversed (wr[e][d] = w[c0 + e, K-1-d]) and biases.
  float wr[8][KC], bias[8];
  {
    float f[8 * KC];  // w[c0 .. c0+7, 0 .. K-1]: 8 KC consecutive floats, 32-byte aligned offset
    const float* wp = p.w + c0 * KC;
    if (dev::aligned16(p.w)) {
#pragma unroll
      for (int i = 0; i < 2 * KC; ++i) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(wp) + i);
        f[4 * i] = v.x, f[4 * i + 1] = v.y, f[4 * i + 2] = v.z, f[4 * i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8 * KC; ++i) f[i] = __ldg(wp + i);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
#pragma unroll
      for (int d = 0; d < KC; ++d) wr[e][d] = f[e * KC + (KC - 1 - d)];
      bias[e] = p.bias ? __ldg(p.bias + c0 + e) : 0.0f;
    }
  }

  const int64_t xs = p.x_stride;
  constexpr int kEs = kAct == DType::bf16 ? 2 : 4;            // bytes per x element
  const void* xl = static_cast<const char*>(p.x) + c0 * kEs;  // x[0, c0]: element (t, c0 + e) at t * xs + e
  out = static_cast<char*>(out) + ocol * (p.qkv_dtype == DType::bf16 ? 2 : 4);  // now (t, e) at t * orow + e
  const auto load_x = [&](int t, float(&xv)[8]) {                               // x[t, c0 .. c0+7] as f32 (exact)
    postconv_detail::to_f32(load8<kAct, kVec>(xl, t * xs), xv);
  };
  float win[8][H];  // win[e][q]: channel c0+e's input H-q tokens before the current one

  // One step: tokens s .. s+3 (those >= end are computed from zeros and never stored).
  const auto load_step = [&](Raw8<kAct>(&raw)[kStep], int s, int end) {
#pragma unroll
    for (int j = 0; j < kStep; ++j) raw[j] = s + j < end ? load8<kAct, kVec>(xl, (s + j) * xs) : Raw8<kAct>{};
  };
  const auto run_step = [&](const Raw8<kAct>(&raw)[kStep], int s, int end) {
    float y[kStep][8];
#pragma unroll
    for (int j = 0; j < kStep; ++j) {
      float xv[8], acc[8];
      postconv_detail::to_f32(raw[j], xv);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = conv_step<KC>(win[e], wr[e], bias[e], xv[e], KC);
      if (p.silu) {
        dev::silu_batch(acc, y[j]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) y[j][e] = acc[e];
      }
    }
    if (!qk && p.qkv_dtype == kAct) {  // v in the activation dtype: the one rounding, stored as is
#pragma unroll
      for (int j = 0; j < kStep; ++j) {
        if (s + j < end) store_raw8<kAct, kVec>(out, (s + j) * orow, pack8<kAct>(y[j]));
      }
      return;
    }
    if constexpr (kAct == DType::bf16) {  // the conv output as conv.fwd stores it, read back exactly
#pragma unroll
      for (int j = 0; j < kStep; ++j) postconv_detail::to_f32(pack8<DType::bf16>(y[j]), y[j]);
    }
    if (!qk) {
#pragma unroll
      for (int j = 0; j < kStep; ++j) {
        if (s + j < end) store_out<kVec>(out, p.qkv_dtype, (s + j) * orow, y[j]);
      }
      return;
    }
    // q/k: the four tokens' trees are independent chains (their shuffles and roots overlap).
    float inv[kStep];
#pragma unroll
    for (int j = 0; j < kStep; ++j) {
      float sq[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) sq[e] = y[j][e] * y[j][e];
      inv[j] = tree_sum_128_by8(sq, lane);
    }
    // Every lane of the half now holds the four sums; lane j (mod 4) of the half computes token j's
    // 1 / sqrtf(sum + 1e-6) (the reference's operations on the same value: the same bits) and the
    // half shares them: one root and one division per lane instead of four.
    {
      const int mine = lane & (kStep - 1);
      float sum = inv[0];
#pragma unroll
      for (int j = 1; j < kStep; ++j) sum = mine == j ? inv[j] : sum;
      const float r = 1.0f / sqrtf(sum + 1e-6f);
#pragma unroll
      for (int j = 0; j < kStep; ++j) inv[j] = __shfl_sync(postconv_detail::kFullMask, r, (lane & 16) | j);
    }
#pragma unroll
    for (int j = 0; j < kStep; ++j) {
      if (s + j >= end) break;  // uniform over the warp
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = y[j][e] * inv[j];
      store_out<kVec>(out, p.qkv_dtype, (s + j) * orow, o);
    }
  };

  const int lo = range_start(p, live, tile), hi = range_start(p, live, tile + 1);
  int t = lo;
  int n = lo < hi ? seq_of(p.cu_seqlens, live.N, lo) : 0;
  while (t < hi) {
    const int b = __ldg(p.cu_seqlens + n), e = __ldg(p.cu_seqlens + n + 1);  // b <= t < e
    const int end = min(e, hi);
    const int slot = __ldg(p.slots + n);
    if (slot < 0) {  // padding sequence: zero rows, no state access
      const float zero[8] = {};
      for (int u = t; u < end; ++u) store_out<kVec>(out, p.qkv_dtype, u * orow, zero);
    } else {
      if (t == b) {
        // This program owns the sequence's state rows of channels c0 .. c0+7 (header). The only
        // reads of them in the launch, then the new state, before anything else.
        const bool hist = __ldg(p.has_history + n) != 0;
        const int64_t srow = (static_cast<int64_t>(slot) * C + c0) * H;  // channel c0 + j at srow + j H
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int q = 0; q < H; ++q) win[j][q] = hist ? dev::load(p.state, p.state_dtype, srow + j * H + q) : 0.0f;
        }
        const int len = e - b;
#pragma unroll
        for (int q = 0; q < H; ++q) {
          const int i = len - H + q;  // sequence token that becomes state entry q
          if (i >= 0) {
            float xv[8];
            load_x(b + i, xv);
#pragma unroll
            for (int j = 0; j < 8; ++j) dev::store(p.state, p.state_dtype, srow + j * H + q, xv[j]);
          } else {  // a sequence shorter than K-1: the old entry H + i
#pragma unroll
            for (int j = 0; j < 8; ++j) dev::store(p.state, p.state_dtype, srow + j * H + q, pick(win[j], H + i));
          }
        }
      } else {
        // t >= b + K-1 (header): the left taps are x rows of this sequence.
#pragma unroll
        for (int q = 0; q < H; ++q) {
          float xv[8];
          load_x(t - H + q, xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) win[j][q] = xv[j];
        }
      }
      // The rows kPrefetch tokens ahead are requested into L2 (no registers held), so the step's own
      // loads are short; the block's other warps cover their latency.
      for (int u = t; u < min(t + kPrefetch, end); ++u) prefetch_l2(xl, u * xs, kEs);
      for (int s = t; s < end; s += kStep) {
        for (int u = s + kPrefetch; u < min(s + kPrefetch + kStep, end); ++u) prefetch_l2(xl, u * xs, kEs);
        Raw8<kAct> raw[kStep];
        load_step(raw, s, end);
        run_step(raw, s, end);
      }
    }
    t = end;
    while (n < live.N - 1 && __ldg(p.cu_seqlens + n + 1) <= t) ++n;  // the next non-empty sequence
  }
}

// The gate block of a tile: see the file header.
__device__ __forceinline__ void gate_tile(const GdnPrefillFusedParams& p, const Live& live, int tile) {
  __shared__ uint8_t pad[kTT];  // token of the tile in a padding sequence
  const int s0 = tile * kTT, nt = min(kTT, live.T - s0);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < nt) pad[tid] = __ldg(p.slots + seq_of(p.cu_seqlens, live.N, s0 + tid)) < 0;
  __syncthreads();
  const int count = nt * p.Hv;
  for (int i = tid; i < count; i += kThreads) {
    const int j = i / p.Hv, hv = i - j * p.Hv;
    const int64_t t = s0 + j;
    float g = 0.0f, beta = 0.0f;
    if (!pad[j]) {
      const float av = dev::load(p.a, p.ab_dtype, t * p.a_stride + hv);
      const float bv = dev::load(p.b, p.ab_dtype, t * p.b_stride + hv);
      g = postconv_detail::gate_g(av, __ldg(p.A_log + hv), __ldg(p.dt_bias + hv));
      beta = postconv_detail::gate_beta(bv);
    }
    p.g[t * p.Hv + hv] = g;
    p.beta[t * p.Hv + hv] = beta;
  }
}

template <DType kAct, int KC, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinBlocks) gdn_prefill_fused_kernel(const GdnPrefillFusedParams p) {
  pdl_start();  // kernels/launch.cuh
  Live live;
  live.N = __ldg(p.n_seqs);
  if (live.N < 0 || live.N > p.max_seqs) __trap();  // (before reading cu_seqlens[N])
  live.T = __ldg(p.cu_seqlens + live.N);
  if (live.T > p.max_tokens) __trap();  // tokens past the bucket would be left unprocessed
  // Blocks per tile (conv blocks + the gate block), from the grid the launcher checked against the
  // contract: gridDim.x = tiles * per_tile.
  const int per_tile = static_cast<int>(gridDim.x) / ((p.max_tokens + kTT - 1) / kTT);
  const int L = static_cast<int>(blockIdx.x);
  const int tile = L / per_tile, r = L - tile * per_tile;
  if (static_cast<int64_t>(tile) * kTT >= live.T) return;  // whole block, before any barrier
  if (r == per_tile - 1) {
    gate_tile(p, live, tile);
  } else {
    conv_group<kAct, KC, kVec>(p, live, tile, r);
  }
}

template <DType kAct, bool kVec>
cudaError_t launch_k(const GdnPrefillFusedParams& p, dim3 grid, cudaStream_t stream) {
  switch (p.K) {
    case 2: launch_kernel(gdn_prefill_fused_kernel<kAct, 2, kVec>, grid, kThreads, 0, stream, p); break;
    case 3: launch_kernel(gdn_prefill_fused_kernel<kAct, 3, kVec>, grid, kThreads, 0, stream, p); break;
    case 4: launch_kernel(gdn_prefill_fused_kernel<kAct, 4, kVec>, grid, kThreads, 0, stream, p); break;
    case 5: launch_kernel(gdn_prefill_fused_kernel<kAct, 5, kVec>, grid, kThreads, 0, stream, p); break;
    case 6: launch_kernel(gdn_prefill_fused_kernel<kAct, 6, kVec>, grid, kThreads, 0, stream, p); break;
    case 7: launch_kernel(gdn_prefill_fused_kernel<kAct, 7, kVec>, grid, kThreads, 0, stream, p); break;
    case 8: launch_kernel(gdn_prefill_fused_kernel<kAct, 8, kVec>, grid, kThreads, 0, stream, p); break;
    default: refuse_launch("gdn.prefill (fused)", "K must be 2..8"); return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t gdn_prefill_fused(const GdnPrefillFusedParams& p, const LaunchContract<GdnPrefillArm>& c,
                              cudaStream_t stream) {
  LaunchCheck chk("gdn.prefill (fused)");
  chk.require(c.arm == GdnPrefillArm::fused, "the contract: its arm is not fused (the contract fell back)");
  chk.in_range(p.Hk, 1, INT32_MAX, "Hk").in_range(p.Hv, 1, INT32_MAX, "Hv");
  chk.require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.require(gdn_prefill_fused_supports(p.Dk, p.Dv, p.K), "not built for this Dk, Dv, K");
  chk.require(float_type(p.act) && float_type(p.state_dtype) && float_type(p.ab_dtype) && float_type(p.qkv_dtype),
              "act, state_dtype, ab_dtype and qkv_dtype must be bf16 or f32");
  const int64_t C = 2 * static_cast<int64_t>(p.Hk) * p.Dk + static_cast<int64_t>(p.Hv) * p.Dv;
  chk.require(p.x_stride >= C, "x_stride must be >= C = 2 Hk Dk + Hv Dv");
  chk.require(p.a_stride >= p.Hv && p.b_stride >= p.Hv, "a_stride and b_stride must be >= Hv");
  chk.not_null(p.x, "x").not_null(p.state, "state").not_null(p.w, "w").not_null(p.a, "a").not_null(p.b, "b");
  chk.not_null(p.A_log, "A_log").not_null(p.dt_bias, "dt_bias").not_null(p.q, "q").not_null(p.k, "k");
  chk.not_null(p.v, "v").not_null(p.g, "g").not_null(p.beta, "beta").not_null(p.cu_seqlens, "cu_seqlens");
  chk.not_null(p.slots, "slots").not_null(p.has_history, "has_history").not_null(p.n_seqs, "n_seqs");
  if (!chk.ok()) return cudaErrorInvalidValue;
  // The contract must be the one for these params (grid, block, shared memory, kernel).
  try {
    const auto want = gdn_prefill_contract(GdnPrefillArm::fused,
                                           GdnPrefillShape{p.max_tokens, p.max_seqs, p.Hk, p.Hv, p.Dk, p.Dv, p.K});
    chk.require(want.arm == GdnPrefillArm::fused && want.grid == c.grid && want.block == c.block &&
                    want.smem_bytes == c.smem_bytes && want.kernel == c.kernel,
                "the contract: it is not the one gdn_prefill_contract gives for these params");
    if (!chk.ok()) return cudaErrorInvalidValue;
  } catch (const std::exception& e) {
    chk.require(false, std::string("its shape: ") + e.what());
    return cudaErrorInvalidValue;
  }
  // 16-byte vectors need 16-byte aligned rows: x's base and row pitch, and q, k, v (their rows and
  // every lane's offset are multiples of 8 elements since Dk = 128 and Dv % 8 == 0).
  const bool vec = dev::aligned16(p.x) && (p.x_stride * static_cast<int64_t>(dtype_size(p.act))) % 16 == 0 &&
                   dev::aligned16(p.q) && dev::aligned16(p.k) && dev::aligned16(p.v);
  const dim3 grid(c.grid.x, c.grid.y, c.grid.z);
  if (p.act == DType::bf16) {
    return vec ? launch_k<DType::bf16, true>(p, grid, stream) : launch_k<DType::bf16, false>(p, grid, stream);
  }
  return vec ? launch_k<DType::f32, true>(p, grid, stream) : launch_k<DType::f32, false>(p, grid, stream);
}

}  // namespace sg
