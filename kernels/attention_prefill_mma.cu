// attention_prefill_mma.cu: the tensor-core varlen causal prefill (attention_prefill_mma.h) for a
// bf16 cache and bf16 q / gate, D in {32, 64, 128, 256}: mma.sync m16n8k16 bf16 -> f32.
//
// Design (FlashAttention-2 style, register-resident S and O). Block (query tile of BQ = 64 rows,
// q head h), 4 warps; warp w owns tile rows 16w .. 16w + 15. Dynamic shared memory: the q tile
// [64][D + 8], NB K tiles and NB V tiles [BK][D + 8] (BK = 64 keys, 32 for D = 256 so S and O fit
// the registers: ptxas -v (sm_90a) 255 at D = 256 with 104 bytes of spill stores since the
// per-pass store is inlined, which measured faster than its out-of-line call; 218 at 128, no
// spills) (bf16, rows padded by 16 bytes: the 32-bit fragment loads and ldmatrix are
// bank-conflict free) and the tile's slots / positions: attention_prefill_mma_smem(D, NB) bytes
// (NB = 2: 101,888 for D = 256, 87,552 for 128, two blocks an SM on sm_90; NB = 1: 68,096 and
// 52,736; opt-in above 48 KB, set by the launcher before every launch as
// delta_rule_prefill_chunked does). Loads are cp.async (16 bytes, zero-filled past the slot's last
// needed key, so keys past it multiply zeros). NB = 2 (where two such blocks fit an SM's shared
// memory: sm_90): key tile i + 1's K and V are requested before tile i's products, so the copies land
// behind them; NB = 1: each tile's copies are requested and waited for in turn (4B prefill shape
// on the H200: 2.91 ms a layer against 2.88 for NB = 2). Both give the same bytes. As in attention.cu, the tile's
// rows are processed per cache slot (a tile may span sequences): per slot pass, key tiles
// 0 .. max position of the slot's rows; a warp skips a key tile (and each 16-key step of it)
// lying wholly above its rows' positions. Per key tile of BK keys each warp:
//   S [16 x BK] = q K^T        D/16 k-steps x BK/8 mma (A from q_s, B from k_s by 32-bit loads)
//   online softmax per row     exactly the SIMT kernel's f32 steps: s = dot * scale, masked to
//                              -inf; m' = max(m, max s); corr = expf(m - m'); p = expf(s - m');
//                              l = fmaf(l, corr, sum p) (sum of the f32 p); O *= corr
//   O [16 x D] += P V          P (f32 registers, reused as A fragments) split P = P_hi + P_lo,
//                              P_hi = bf16(P), P_lo = bf16(P - P_hi); 2 mma per (k-step, n-tile),
//                              B from v_s by ldmatrix.trans
// then out = (O / l) * sigmoidf_(gate), stored after the row's pass (zeros for padding rows at the
// end; rows >= T untouched).
// Grid (ceil(T / 64), Hq) from the shape only; no allocation, no host synchronisation.
// Sequences are isolated, non-finite cache values included: P V multiplies every row of a warp by
// the whole V tile, so during one slot's pass the rows of other slots get 0 * V (NaN where V is
// not finite). Every pass therefore starts from m = -inf, l = 0, O = 0, and its rows' outputs are
// stored right after it, before another slot's pass can add anything; for finite values this
// gives the bytes of the plain form (up to the sign of an exactly zero result). Within a sequence
// a NaN in the V of a later position still reaches earlier rows of the same tile through 0 * NaN.
// Needs sm_80 or newer (mma.sync bf16, cp.async, ldmatrix); the model checks the device.
//
// Error versus the f32 CUDA-core kernel (both from the same bf16 q, k, v; u = 2^-24 the f32 unit
// roundoff, n keys, A = sum_j p_j |v_j| / l <= max |v|):
// - S: every bf16 x bf16 product is exact in f32; the mma accumulates in f32 (not IEEE round to
//   nearest: aligned significands are truncated, a small constant more error) in another order
//   than the SIMT fmaf chain: |dS| <= ~c D u sum_d |q_d k_d| for both.
// - P V: P_hi + P_lo - P = bf16 rounding of the residual r = P - P_hi (exact in f32), |r| <=
//   2^-8 P, so |P_hi + P_lo - P| <= 2^-8 |r| <= 2^-16 P (typically ~2^-18 P, and 0 for the row
//   maximum p = 1). Output error from the split: <= 2^-16 A (worst case, all terms aligned;
//   independent terms give ~2^-18 sqrt(sum p_j^2 v_j^2) / l); accumulation ~n u A as in SIMT.
// Against the test tolerance (bf16 outputs: 2^-6 |ref| + 1e-5 after both round to bf16): with
// |v| <= 1 and sigmoid(gate) < 0.88 (the tests' ranges) the worst case 2^-16 * 0.88 = 1.3e-5 only
// matters when the output cancels to |o| < ~1e-4, and needs every split residual at its bound
// with aligned signs; the typical error (<= ~4e-6 for n = 2, shrinking as 1/sqrt(n)) fits.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention_internal.cuh"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_tile.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"

namespace sg {
namespace {

using attn_detail::begin_pass;
using attn_detail::kNegInf;
using attn_detail::live_rows;
using attn_detail::load_tile_rows;
using attn_detail::next_pass;
using attn_detail::online_softmax;
using attn_detail::p_fragments;
using attn_detail::store_pass_rows;
using attn_detail::zero_padding_rows;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldmatrix_x4_trans;
using mma::lds32;
using mma::mma_bf16;
using mma::smem_addr;

constexpr int kThreads = 128;                       // 4 warps
constexpr int kBQ = attn_detail::kPrefillTileRows;  // query rows per block (16 per warp)
constexpr int kParts = 2;                           // bf16 parts of P in P V (P_hi, P_lo)

template <int D, int NB>
struct MmaCfg {
  static constexpr int BK = D >= 256 ? 32 : 64;  // keys per K/V tile (32 at D = 256: no spills)
  static constexpr int LD = D + 8;               // padded smem row, bf16 elements (16 bytes of padding)
  static constexpr int KSTEPS = D / 16;          // k-steps of S = q K^T
  static constexpr int NT_S = BK / 8;            // n-tiles of S (8 keys each)
  static constexpr int NT_O = D / 8;             // n-tiles of O (8 features each)
  static constexpr size_t kSmem = static_cast<size_t>(kBQ + 2 * NB * BK) * LD * 2 + 2 * kBQ * sizeof(int);
  static_assert(D % 16 == 0 && D <= 256, "D must be a multiple of 16, at most 256");
  static_assert(NB == 1 || NB == 2, "one or two K/V buffers");
  static_assert((LD * 2) % 16 == 0, "padded rows stay 16-byte aligned (cp.async, ldmatrix)");
};

// Copies ROWS rows (row r at src + r * stride, r < n; zeros for r >= n) into the padded tile at
// dst ([ROWS][LD]). Chunk i = t + kThreads it is row i / CHUNKS, column i % CHUNKS: consecutive
// threads take consecutive 16-byte columns of a row. CHUNKS divides kThreads, so a thread keeps its
// column and steps kThreads / CHUNKS rows each copy: the loop is unrolled with the thread's
// address worked out once (an add, a compare and the cp.async a copy).
template <int D, int ROWS>
__device__ __forceinline__ void copy_rows(__nv_bfloat16* dst, int n, const __nv_bfloat16* src, int64_t stride) {
  constexpr int CHUNKS = D / 8, LD = MmaCfg<D, 1>::LD, kRowStep = kThreads / CHUNKS;  // 16-byte chunks a row
  static_assert(kThreads % CHUNKS == 0 && ROWS % kRowStep == 0, "whole rows a pass of the block");
  const int t = static_cast<int>(threadIdx.x), r_t = t / CHUNKS, c_t = t % CHUNKS;
  const __nv_bfloat16* own = src + r_t * stride + c_t * 8;
  const uint32_t to = smem_addr(dst + r_t * LD + c_t * 8);
#pragma unroll
  for (int it = 0; it < ROWS / kRowStep; ++it) {
    const bool in = r_t + kRowStep * it < n;
    cp_async16(to + 2 * LD * kRowStep * it, in ? own + kRowStep * it * stride : src, in);
  }
}

template <int D, int NB>
__global__ void __launch_bounds__(kThreads, 2)
    attn_prefill_mma_kernel(const AttentionParams p, int group, float scale) {
  pdl_start();  // kernels/launch.cuh
  using Cfg = MmaCfg<D, NB>;
  constexpr int kBK = Cfg::BK, LD = Cfg::LD, KSTEPS = Cfg::KSTEPS, NT_S = Cfg::NT_S, NT_O = Cfg::NT_O;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBQ][LD]
  __nv_bfloat16* k_buf = q_s + kBQ * LD;                            // [NB][kBK][LD]
  __nv_bfloat16* v_buf = k_buf + NB * kBK * LD;                     // [NB][kBK][LD]
  int* q_slot = reinterpret_cast<int*>(v_buf + NB * kBK * LD);      // [kBQ]
  int* q_pos = q_slot + kBQ;                                        // [kBQ]

  const int tile = blockIdx.x, h = blockIdx.y, g = h / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gr = lane >> 2, tq = lane & 3;                        // fragment row (0..7) and column pair (0..3)
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);         // [T, Hq, D]
  const auto* kc = static_cast<const __nv_bfloat16*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const auto* vc = static_cast<const __nv_bfloat16*>(p.v_cache);  // [num_slots, max_context, Hkv, D]

  load_tile_rows(p, tile, kBQ, q_slot, q_pos);
  copy_rows<D, kBQ>(q_s, min(kBQ, p.T - tile * kBQ), q + (static_cast<int64_t>(tile * kBQ) * p.Hq + h) * D,
                    static_cast<int64_t>(p.Hq) * D);
  cp_async_commit();
  __syncthreads();  // q_slot, q_pos

  float o[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // rows gr and gr + 8 of the warp
  const int row0 = warp * 16 + gr;
  uint64_t remaining = live_rows(q_slot);
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;

  while (remaining) {  // block-uniform
    const auto [slot, active, kmax] = next_pass(q_slot, q_pos, remaining);
    // Every pass starts afresh (begin_pass); lim: each row's last key in the pass.
    int lim[2];
    begin_pass(o, m, l, lim, active, q_pos, row0);
    int wlim = max(lim[0], lim[1]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) wlim = max(wlim, __shfl_xor_sync(0xffffffffu, wlim, off));
    const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D;
    // Key tile kt's K (or V) rows into buffer b, rows past kmax zero-filled; one commit group each.
    auto copy_k = [&](int b, int kt) {
      copy_rows<D, kBK>(k_buf + b * kBK * LD, min(kBK, kmax - kt), kc + base + kt * pos_stride, pos_stride);
      cp_async_commit();
    };
    auto copy_v = [&](int b, int kt) {
      copy_rows<D, kBK>(v_buf + b * kBK * LD, min(kBK, kmax - kt), vc + base + kt * pos_stride, pos_stride);
      cp_async_commit();
    };
    // At the top of tile kt the groups in flight are K(kt) and V(kt) (and q before the first
    // tile), committed in that order (NB = 1: requested there).
    __syncthreads();  // every warp is done with the previous pass's buffers
    if constexpr (NB == 2) {
      copy_k(0, 0);
      copy_v(0, 0);
    }

    for (int kt = 0, b = 0; kt < kmax; kt += kBK, b = NB - 1 - b) {
      const bool more = NB == 2 && kt + kBK < kmax;  // block-uniform: the next tile's copies go now
      const __nv_bfloat16* k_s = k_buf + b * kBK * LD;
      const __nv_bfloat16* v_s = v_buf + b * kBK * LD;
      if constexpr (NB == 1) {
        if (kt > 0) __syncthreads();  // every warp is past tile kt - 1 (the first: the barrier above)
        copy_k(0, kt);
        copy_v(0, kt);
      }
      cp_async_wait<1>();  // q and K(kt); V(kt) may be in flight
      __syncthreads();     // K(kt) seen by every warp; every warp is past tile kt - 1
      if (more) {          // buffers 1 - b held tile kt - 1
        copy_k(1 - b, kt + kBK);
        copy_v(1 - b, kt + kBK);
      }

      const bool work = kt <= wlim;  // warp-uniform
      float s[NT_S][4];
#pragma unroll
      for (int j = 0; j < NT_S; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      if (work) {
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
          const __nv_bfloat16* qa = q_s + row0 * LD + kk * 16 + 2 * tq;
          const uint32_t a[4] = {lds32(qa), lds32(qa + 8 * LD), lds32(qa + 8), lds32(qa + 8 * LD + 8)};
#pragma unroll
          for (int j = 0; j < NT_S; ++j) {
            if (kt + 8 * j > wlim) continue;  // keys above every row of the warp
            const __nv_bfloat16* kb = k_s + (8 * j + gr) * LD + kk * 16 + 2 * tq;
            mma_bf16(s[j], a, lds32(kb), lds32(kb + 8));
          }
        }
        online_softmax(s, o, m, l, lim, kt, tq, scale);
      }
      if (more) {
        cp_async_wait<2>();  // V(kt); K(kt + 1), V(kt + 1) may be in flight
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // V(kt) seen by every warp
      if (work) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          if (kt + 16 * kk > wlim) continue;  // warp-uniform: every p of this k-step is 0
          uint32_t a[kParts][4];
          p_fragments<kParts>(s, kk, a);
          // ldmatrix.trans: matrix mi = lane / 8 holds keys 16kk + (mi & 1) * 8 .. + 7 and
          // features n0 + (mi >> 1) * 8 .. + 7; r0 r1 are b0 b1 of n-tile n0 / 8, r2 r3 of the next.
          const int mi = lane >> 3;
          const __nv_bfloat16* vrow = v_s + (16 * kk + (lane & 7) + (mi & 1) * 8) * LD + (mi >> 1) * 8;
#pragma unroll
          for (int jp = 0; jp < NT_O / 2; ++jp) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, smem_addr(vrow + jp * 16));
#pragma unroll
            for (int i = 0; i < kParts; ++i) {
              mma_bf16(o[2 * jp], a[i], b[0], b[1]);
              mma_bf16(o[2 * jp + 1], a[i], b[2], b[3]);
            }
          }
        }
      }
    }
    // This pass's rows are stored now: later passes add 0 * V of another slot to every row of a
    // warp (NaN where that V is not finite).
    store_pass_rows<D>(p, o, l, active, tile, h, row0, tq);
  }

  cp_async_wait<0>();  // a tile without live rows never waited for its q copies
  zero_padding_rows<D>(p, q_slot, tile, h, row0, tq);
}

template <int D>
cudaError_t launch(const AttentionParams& p, cudaStream_t stream, int buffers) {
  static_assert(MmaCfg<D, 1>::kSmem == attention_prefill_mma_smem(D, 1), "the bytes the model plans with");
  static_assert(MmaCfg<D, 2>::kSmem == attention_prefill_mma_smem(D, 2), "the bytes the launcher checks");
  if (buffers == 0) {  // two where two blocks of that size fit an SM (the occupancy the kernel is built for)
    int dev = 0, per_sm = 0, reserved = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev);
    if (e != cudaSuccess) return e;
    buffers = 2 * (MmaCfg<D, 2>::kSmem + static_cast<size_t>(reserved)) <= static_cast<size_t>(per_sm) ? 2 : 1;
  }
  if (buffers == 2)
    return attn_detail::launch_prefill_tiles(attn_prefill_mma_kernel<D, 2>, kThreads, MmaCfg<D, 2>::kSmem, p, stream);
  return attn_detail::launch_prefill_tiles(attn_prefill_mma_kernel<D, 1>, kThreads, MmaCfg<D, 1>::kSmem, p, stream);
}

}  // namespace

cudaError_t attention_prefill_mma(const AttentionParams& p, cudaStream_t stream, int buffers) {
  LaunchCheck c("attention_prefill_mma");
  c.in_range(buffers, 0, 2, "buffers");
  if (!attn_detail::check_prefill_tiles(
          c, p, attention_prefill_mma_supports(p.D, p.q_dtype, p.cache_dtype),
          "needs bf16 q and caches and a head dim with a built tile (32, 64, 128, 256)")) {
    return cudaErrorInvalidValue;
  }
  if (p.T == 0) return cudaSuccess;
  switch (p.D) {
    case 32: return launch<32>(p, stream, buffers);
    case 64: return launch<64>(p, stream, buffers);
    case 128: return launch<128>(p, stream, buffers);
    case 256: return launch<256>(p, stream, buffers);
    default: c.require(false, "D must be 32, 64, 128 or 256"); return cudaErrorInvalidValue;
  }
}

}  // namespace sg
