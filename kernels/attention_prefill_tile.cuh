// attention_prefill_tile.cuh: the pieces of a tensor-core prefill block that do not depend on how
// its products are computed, shared by attention_prefill_mma.cu (mma.sync, a warp per 16 rows) and
// attention_prefill_wgmma.cu (wgmma, a warpgroup per 64 rows). Both hold a query tile of 64 rows;
// each thread owns rows row0 = 16 * warp + g and row0 + 8 of it (g = lane / 4, t = lane % 4) and
// their scores and outputs in the m16n8 accumulator layout: s[j][2e + c] is row row0 + 8e, key
// 8j + 2t + c of the key tile; o[j][2e + c] the same row's feature 8j + 2t + c. The kernels'
// headers state the contract (slot passes, isolation, padding rows); these pieces are its steps.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_internal.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"

namespace sg::attn_detail {

constexpr int kPrefillTileRows = 64;  // query rows a block

// Bit r set for each live row r of the tile.
__device__ __forceinline__ uint64_t live_rows(const int* q_slot) {
  uint64_t live = 0;
  for (int r = 0; r < kPrefillTileRows; ++r) live |= static_cast<uint64_t>(q_slot[r] >= 0) << r;
  return live;
}

// The next slot pass (block-uniform): the rows of `remaining` in the slot of its lowest row
// (removed from `remaining`), and the number of keys the pass reads (its rows' largest position
// + 1).
struct SlotPass {
  int slot;
  uint64_t active;
  int kmax;
};
__device__ __forceinline__ SlotPass next_pass(const int* q_slot, const int* q_pos, uint64_t& remaining) {
  SlotPass ps{q_slot[__ffsll(static_cast<long long>(remaining)) - 1], 0, 0};
  for (int r = 0; r < kPrefillTileRows; ++r) {
    if (((remaining >> r) & 1u) && q_slot[r] == ps.slot) {
      ps.active |= uint64_t{1} << r;
      ps.kmax = max(ps.kmax, q_pos[r] + 1);
    }
  }
  remaining &= ~ps.active;
  return ps;
}

// The start of a slot pass: m = -inf, l = 0, O = 0 for this thread's rows (every pass starts
// afresh: the earlier passes' rows are stored, and the other rows' accumulators may hold 0 * V of
// another slot, NaN where that V is not finite), and lim[e], the last key row row0 + 8e sees in
// the pass (its position; -1 when it is not in the pass).
template <int NT_O>
__device__ __forceinline__ void begin_pass(float (&o)[NT_O][4], float (&m)[2], float (&l)[2], int (&lim)[2],
                                           uint64_t active, const int* q_pos, int row0) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    m[e] = kNegInf;
    l[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < NT_O; ++j) o[j][2 * e] = o[j][2 * e + 1] = 0.0f;
  }
  // After the resets (reading q_pos inside their loop costs the mma kernel 50 registers at D = 128).
#pragma unroll
  for (int e = 0; e < 2; ++e) lim[e] = ((active >> (row0 + 8 * e)) & 1u) ? q_pos[row0 + 8 * e] : -1;
}

// The A fragments (m16n8k16 layout) of P's k-step kk (keys 16kk .. 16kk + 15: n-tiles 2kk and
// 2kk + 1 of s), each value split into kParts bf16 parts (mma::split_pair): a[i] is part i.
template <int kParts, int NT_S>
__device__ __forceinline__ void p_fragments(const float (&s)[NT_S][4], int kk, uint32_t (&a)[kParts][4]) {
  uint32_t w[kParts];
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    // a0: row g, keys 2t, 2t + 1 (n-tile 2kk); a1: row g + 8; a2, a3: the same keys + 8 (2kk + 1).
    const int j = 2 * kk + (f >> 1), c = 2 * (f & 1);
    mma::split_pair<kParts>(s[j][c], s[j][c + 1], w);
#pragma unroll
    for (int i = 0; i < kParts; ++i) a[i][f] = w[i];
  }
}

// One key tile's online softmax for this thread's rows row0 + 8e (the f32 steps of the CUDA-core
// kernel): s = dot * scale, masked to -inf past lim[e] (the row's last key in this pass, -1: not
// in it); m' = max(m, max s); p = expf(s - m'); l = fmaf(l, expf(m - m'), sum p); O *= that
// correction. A row's scores sit in the 4 lanes of a quad. Leaves p in s.
template <int NT_S, int NT_O>
__device__ __forceinline__ void online_softmax(float (&s)[NT_S][4], float (&o)[NT_O][4], float (&m)[2], float (&l)[2],
                                               const int (&lim)[2], int kt, int tq, float scale) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float mx = kNegInf;
#pragma unroll
    for (int j = 0; j < NT_S; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const bool valid = kt + 8 * j + 2 * tq + c <= lim[e];
        const float sc = valid ? s[j][2 * e + c] * scale : kNegInf;
        s[j][2 * e + c] = sc;
        mx = fmaxf(mx, sc);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m[e], mx);
    float ps = 0.0f;
#pragma unroll
    for (int j = 0; j < NT_S; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float sc = s[j][2 * e + c];
        const float pr = sc == kNegInf ? 0.0f : expf(sc - mn);  // mn finite when sc is
        s[j][2 * e + c] = pr;
        ps += pr;
      }
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    if (mn != kNegInf) {  // else nothing valid yet for this row: m, l, O stay
      const float corr = expf(m[e] - mn);
      l[e] = fmaf(l[e], corr, ps);
      m[e] = mn;
#pragma unroll
      for (int j = 0; j < NT_O; ++j) {
        o[j][2 * e] *= corr;
        o[j][2 * e + 1] *= corr;
      }
    }
  }
}

// out = (O / l) * sigmoid(gate) of this thread's rows row0 and row0 + 8 that are in `active` (the
// rows of the pass that just ended: live, so below T). Inlined: as a called function it took the
// accumulators through local memory, which cost more than the register spills (420 bytes then) the
// inlined copy brings the D = 256 mma kernel (4B prefill shape, tools/probes/attn_prefill_probe.cu
// on the H200: mma 4.67 -> 4.24 ms a layer, wgmma 4.65 -> 3.95 ms, where it spills nothing).
template <int D>
__device__ __forceinline__ void store_pass_rows(const AttentionParams& p, const float (&o)[D / 8][4],
                                                const float (&l)[2], uint64_t active, int tile, int h, int row0,
                                                int tq) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = row0 + 8 * e;
    if (!((active >> r) & 1u)) continue;
    const int64_t orow = (static_cast<int64_t>(tile * kPrefillTileRows + r) * p.Hq + h) * D;
    // The gate values of kJ n-tiles are all loaded before any of their outputs is stored: a load
    // after a store may read what the store wrote (out and gate are both plain pointers), so
    // interleaved, every load waited for its own round trip. A thread's two columns 2 tq, 2 tq + 1
    // are adjacent: with bf16 gate and out on 4-byte aligned bases, one 4-byte load and store a pair.
    constexpr int kJ = D / 8 < 8 ? D / 8 : 8;
    static_assert((D / 8) % kJ == 0, "the n-tiles come in whole groups of kJ");
    const bool pairs = p.q_dtype == DType::bf16 && p.out_dtype == DType::bf16 &&
                       ((reinterpret_cast<uintptr_t>(p.gate) | reinterpret_cast<uintptr_t>(p.out)) & 3) == 0;
#pragma unroll
    for (int j0 = 0; j0 < D / 8; j0 += kJ) {
      float g[kJ][2];
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int64_t i = orow + 8 * (j0 + j) + 2 * tq;
        if (pairs) {
          const __nv_bfloat162 w =
              *reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(p.gate) + i);
          g[j][0] = __low2float(w);
          g[j][1] = __high2float(w);
        } else {
#pragma unroll
          for (int c = 0; c < 2; ++c) g[j][c] = dev::load(p.gate, p.q_dtype, i + c);
        }
      }
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int64_t i = orow + 8 * (j0 + j) + 2 * tq;
        const float x0 = (o[j0 + j][2 * e] / l[e]) * sigmoidf_(g[j][0]);
        const float x1 = (o[j0 + j][2 * e + 1] / l[e]) * sigmoidf_(g[j][1]);
        if (pairs) {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + i) = __floats2bfloat162_rn(x0, x1);
        } else {
          dev::store(p.out, p.out_dtype, i, x0);
          dev::store(p.out, p.out_dtype, i + 1, x1);
        }
      }
    }
  }
}

// Zeros for this thread's rows row0, row0 + 8 that are padding (below T, no slot).
template <int D>
__device__ __forceinline__ void zero_padding_rows(const AttentionParams& p, const int* q_slot, int tile, int h,
                                                  int row0, int tq) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = row0 + 8 * e, t = tile * kPrefillTileRows + r;
    if (t >= p.T || q_slot[r] >= 0) continue;
    const int64_t orow = (static_cast<int64_t>(t) * p.Hq + h) * D;
    for (int d = 2 * tq; d < D; d += 8) {
      dev::store(p.out, p.out_dtype, orow + d, 0.0f);
      dev::store(p.out, p.out_dtype, orow + d + 1, 0.0f);
    }
  }
}

// Host: the checks of a tensor-core prefill entry point beyond check_common (`built`: the kernel
// runs the shape; `what` says which shapes it runs), then the launch of kernel<D>'s grid
// (ceil(T / 64), Hq) of `threads` threads with `smem` bytes of dynamic shared memory (opted in
// above 48 KB before every launch). Returns the error to report; cudaSuccess without a launch for
// T == 0.
inline bool check_prefill_tiles(LaunchCheck& c, const AttentionParams& p, bool built, const char* what) {
  check_common(c, p);
  c.require(built, what);
  c.in_range(p.Hq, 1, 65535, "Hq");
  check_mma(c, p);
  return c.ok();
}
template <typename Kernel>
cudaError_t launch_prefill_tiles(Kernel* kernel, int threads, size_t smem, const AttentionParams& p,
                                 cudaStream_t stream) {
  if (const cudaError_t err = dev::allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((p.T + kPrefillTileRows - 1) / kPrefillTileRows), static_cast<unsigned>(p.Hq));
  launch_kernel(kernel, grid, threads, smem, stream, p, p.Hq / p.Hkv, attention_scale(p.D));
  return cudaGetLastError();
}

}  // namespace sg::attn_detail
