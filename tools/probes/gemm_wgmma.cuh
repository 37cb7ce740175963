// gemm_wgmma.cuh: a prefill-sized GEMM y[M, N] = x[M, K] W[N, K]^T (bf16 in, f32 accumulation,
// bf16 out) on sm_90a tensor cores, as a probe of what an own GEMM would cost against cublasGemmEx
// and what SwiGLU in its epilogue would save (tools/probes/gemm_wgmma_probe.cu; docs/BENCHMARKS.md
// has its runs). For the hand-built probes only.
//
// Persistent blocks (one an SM) of three warpgroups: in warpgroup 0 one thread issues TMA copies of
// 128 x 64 tiles of x and 256 x 64 tiles of W (128-byte swizzled) into a ring of kStages stages,
// each completing on its "full" mbarrier; warpgroups 1 and 2 are the consumers (rows 0-63 and
// 64-127 of a 128 x 256 output tile: four m64n256k16 products a stage, one group in flight while
// the next stage's wait runs, each warp arriving on the stage's "empty" barrier once the products
// that read it are done). kCluster 2: pairs of blocks (a cluster of two) take row tiles 2p and
// 2p + 1 of one column tile and each copies half of the W tile into both blocks (TMA multicast), so
// a stage is refilled once the consumer warps of both blocks have released it (their arrivals on
// the other block's barrier carry no cluster-scope release: with it the pairs ran twice as slow).
// Tiles are walked in groups of `group_n` column tiles, the column tiles fastest, so that the
// blocks running together share their W and x tiles in L2. Epilogues (kEpi): the consumers store
// bf16 pairs from the accumulators or 16 bytes a lane after a quad transpose, or they write the
// tile's bf16 values into a staging tile in shared memory and go on while warps 1-3 of warpgroup 0
// store it, or (deferred) they keep the tile as packed bf16 pairs in registers and store one
// 16-byte group a lane after each of the next tile's first stages, under that tile's products (the
// form that runs at cuBLAS's speed: the others leave the tensor cores idle while a tile is stored,
// 16% of the mainloop's time by ncu). Rows past M and columns past N are not written. kSwiglu:
// W's rows interleaved in groups of 8 (gate rows, then the matching up rows: the model's gate_up
// layout, kernels/swiglu.h), the output act = silu(gate) * up of the bf16-rounded gate and up with
// the swiglu kernel's arithmetic (dev::silu_batch, act rounded to bf16), into y[M, N / 2].
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <utility>

#include "kernels/device_util.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/tma_map.h"
#include "kernels/tma_util.cuh"
#include "kernels/wgmma_util.cuh"

namespace sg::probe_gemm {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // output tile rows x columns, K a stage
constexpr uint32_t kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
constexpr int kThreads = 384;
constexpr int kProducerRegs = 56, kConsumerRegs = 224;  // 128 x 56 + 256 x 224 <= 65536
constexpr uint32_t kStagingBytes = kBM * kBN * 2;       // kEpi 2: one bf16 output tile
// Epilogue forms: 0 the consumers store 4-byte pairs, 1 they store 16 bytes a lane (a quad transpose),
// 2 they write the tile's bf16 values into shared memory and warps 1-3 of warpgroup 0 finish and
// store it while the consumers go on to the next tile's products; 3 (deferred) they keep the tile as
// packed bf16 pairs (64 registers) and store it, a 16-byte group after each of the next tile's first
// stages, while that tile's products run (rows past M and 8-column chunks past N not stored).
constexpr int kEpiPairs = 0, kEpiWide = 1, kEpiStaged = 2, kEpiDeferred = 3;

template <int kStages, int kEpi = kEpiWide>
constexpr size_t smem_bytes() {
  // + the staging tile (kEpi 2), + the 1024-byte alignment of the swizzle
  return size_t{kStages} * kStageBytes + (kEpi == kEpiStaged ? kStagingBytes : 0) + 1024;
}

struct Shape {
  int M = 0, N = 0, K = 0;
  int ldo = 0;      // output row stride (elements)
  int group_n = 8;  // column tiles a raster group
  // Pairs (kCluster 2) only: each block copies half of the W tile into both blocks (true) or the
  // whole tile into its own (false: the pair launched as a cluster, nothing shared; a control).
  bool multicast = true;
};

// Output tile (tm, tn) of linear tile t: groups of group_n column tiles, the column tiles fastest.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int group_n, int& tm, int& tn) {
  const int per_group = group_n * tiles_m;
  const int grp = t / per_group, within = t % per_group;
  const int gn = min(group_n, tiles_n - grp * group_n);
  tn = grp * group_n + within % gn;
  tm = within / gn;
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pick4(const uint32_t (&v)[4], int i) {
  return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}
// The 4 x 4 transpose of packed pairs within a quad (lanes 4g .. 4g + 3): lane q holds v[jj] =
// columns 8 jj + 2q, + 1 of one row for jj < 4; afterwards w[q'] = columns 8 q + 2 q', + 1: the 16
// contiguous bytes of columns 8q .. 8q + 7.
__device__ __forceinline__ uint4 quad_transpose(const uint32_t (&v)[4], int lane) {
  const int q = lane & 3;
  uint32_t w[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int src = (q + r) & 3;  // this round brings lane src's v[q]
    const uint32_t send = pick4(v, (q - r) & 3);
    const uint32_t got = r == 0 ? send : __shfl_sync(0xffffffffu, send, (lane & ~3) | src);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (i == src) w[i] = got;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// A consumer's accumulators acc[4 j + 2 h], acc[4 j + 2 h + 1] (row r0 + 8 h, columns 8 j + 2q, + 1;
// see epilogue) as a packed bf16 pair.
__device__ __forceinline__ uint32_t packed_pair(const float (&acc)[128], int h, int j) {
  return pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
}

// The epilogue of one output tile from a consumer warpgroup's accumulators: acc[4j + 0, 1] is row
// r0, columns 8j + 2q, + 1; acc[4j + 2, 3] row r0 + 8, the same columns (r0 = the warp's row + lane
// / 4, q = lane % 4). kWide: the quad's pairs transposed so that each lane stores 16 contiguous
// bytes (whole tiles inside N), else 4-byte pairs.
template <bool kSwiglu, bool kWide>
__device__ __forceinline__ void epilogue(const float (&acc)[128], __nv_bfloat16* __restrict__ out, const Shape& s,
                                         int tm, int tn, int c, int warp, int lane) {
  const int r0 = tm * kBM + c * 64 + warp * 16 + (lane >> 2), q = lane & 3;
  constexpr int kCols = kSwiglu ? kBN / 2 : kBN;  // output columns of the tile
  const int col0 = tn * kCols;
  // Output pairs jo0 .. jo0 + n - 1 (columns 8 jo + 2q, + 1) of row half h, packed, from the
  // accumulators; with kSwiglu, the gates' SiLU as one batch (dev::silu_batch: dev::silu's bytes).
  const auto pairs = [&](int jo0, int h, auto& v) {
    constexpr int n = sizeof(v) / sizeof(v[0]);
    if constexpr (!kSwiglu) {
#pragma unroll
      for (int jj = 0; jj < n; ++jj) v[jj] = packed_pair(acc, h, jo0 + jj);
    } else {  // gate: accumulator column group 2 jo; up: 2 jo + 1 (W's rows interleaved by 8)
      float g[2 * n], u[2 * n], a[2 * n];
#pragma unroll
      for (int jj = 0; jj < n; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          g[2 * jj + e] = round_bf16(acc[4 * (2 * (jo0 + jj)) + 2 * h + e]);
          u[2 * jj + e] = round_bf16(acc[4 * (2 * (jo0 + jj) + 1) + 2 * h + e]);
        }
      }
      dev::silu_batch(g, a);
#pragma unroll
      for (int jj = 0; jj < n; ++jj)
        v[jj] = pack_bf16x2(dev::swiglu_of_silu(a[2 * jj], u[2 * jj], true),
                            dev::swiglu_of_silu(a[2 * jj + 1], u[2 * jj + 1], true));
    }
  };
  const int ncols = kSwiglu ? s.N / 2 : s.N;
  if (kWide && col0 + kCols <= ncols) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
#pragma unroll
      for (int i = 0; i < kCols / 32; ++i) {  // pairs 4i .. 4i + 3
        uint32_t v[4];
        pairs(4 * i, h, v);
        const uint4 w = quad_transpose(v, lane);
        if (r < s.M) *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * s.ldo + col0 + 8 * (4 * i + q)) = w;
      }
    }
    return;
  }
#pragma unroll
  for (int jo = 0; jo < kCols / 8; ++jo) {
    const int col = col0 + 8 * jo + 2 * q;
    if (col >= ncols) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      if (r >= s.M) continue;
      uint32_t v[1];
      pairs(jo, h, v);
      *reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(r) * s.ldo + col) = v[0];
    }
  }
}

// kEpi 3: a consumer's tile as bf16 pairs, pend[32 h + j] = packed_pair(acc, h, j) (so group g = 8 h + i
// of the plain GEMM is pend[4 g .. 4 g + 3], stage_tile's order).
__device__ __forceinline__ void pack_tile(const float (&acc)[128], uint32_t (&pend)[64]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 32; ++j) pend[32 * h + j] = packed_pair(acc, h, j);
}
// Output groups of a deferred tile: 16 (the plain GEMM) or 8 (SwiGLU: half the columns).
template <bool kSwiglu>
constexpr int kDeferredGroups = kSwiglu ? 8 : 16;
// Group G of the deferred tile (tm, tn): 16 contiguous output bytes a lane after a quad transpose.
// SwiGLU: group G = 4 h + i' holds output pairs jo = 4 i' + jj, gate at accumulator column group
// 2 jo and up at 2 jo + 1 (W's rows interleaved by 8), from the bf16-rounded pairs (the epilogue's
// round_bf16, so the same bytes).
template <bool kSwiglu, int G>
__device__ __forceinline__ void store_group(const uint32_t (&pend)[64], __nv_bfloat16* __restrict__ out, const Shape& s,
                                            int tm, int tn, int c, int warp, int lane) {
  constexpr int h = kSwiglu ? G / 4 : G / 8, i = kSwiglu ? G % 4 : G % 8;
  constexpr int kCols = kSwiglu ? kBN / 2 : kBN;
  const int q = lane & 3, r = tm * kBM + c * 64 + warp * 16 + (lane >> 2) + 8 * h;
  uint32_t v[4];
  if constexpr (!kSwiglu) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) v[jj] = pend[4 * G + jj];
  } else {  // one output pair at a time; each bf16 widened by a shift (exact: through __low2float or a
            // cvt the kernel spilled 260 bytes a thread, the compiler widening ahead of use)
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int cg = 2 * (4 * i + jj);  // the gate's column group; up at cg + 1
      const uint32_t gw = pend[32 * h + cg], uw = pend[32 * h + cg + 1];
      const float g[2] = {__uint_as_float(gw << 16), __uint_as_float(gw & 0xffff0000u)};
      const float u[2] = {__uint_as_float(uw << 16), __uint_as_float(uw & 0xffff0000u)};
      float a[2];
      dev::silu_batch(g, a);
      v[jj] = pack_bf16x2(dev::swiglu_of_silu(a[0], u[0], true), dev::swiglu_of_silu(a[1], u[1], true));
    }
  }
  const uint4 w = quad_transpose(v, lane);
  const int col = tn * kCols + 8 * (4 * i + q);
  if (r < s.M && col < (kSwiglu ? s.N / 2 : s.N))
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * s.ldo + col) = w;
}
template <bool kSwiglu, int... G>
__device__ __forceinline__ void store_groups(const uint32_t (&pend)[64], __nv_bfloat16* __restrict__ out,
                                             const Shape& s, int tm, int tn, int c, int warp, int lane,
                                             std::integer_sequence<int, G...>) {
  (store_group<kSwiglu, G>(pend, out, s, tm, tn, c, warp, lane), ...);
}

// The staging tile (kEpi 2): 128 rows of 256 bf16 (32 16-byte chunks a row), chunk c of row r at
// c ^ 4 (r % 8) so that a consumer quad's 16-byte stores (8 rows x 4 chunks a warp phase) hit
// distinct banks. Byte offset of (r, c):
__device__ __forceinline__ uint32_t staged_at(int r, int c) {
  return static_cast<uint32_t>(r * (kBN * 2) + ((c ^ ((r & 7) << 2)) << 4));
}
// Named barriers between the consumers (256 threads) and the epilogue warps (96): the tile is
// staged / the staging tile is free again.
constexpr int kBarStaged = 1, kBarFree = 2, kEpiThreads = 256 + 96;
__device__ __forceinline__ void bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kEpiThreads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kEpiThreads) : "memory");
}

// A consumer warpgroup's rows of the output tile into the staging tile at `stg`, as bf16 (the GEMM's
// rounding; SwiGLU comes after, in the epilogue warps).
__device__ __forceinline__ void stage_tile(const float (&acc)[128], uint32_t stg, int c, int warp, int lane) {
  const int q = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = c * 64 + warp * 16 + (lane >> 2) + 8 * h;
#pragma unroll
    for (int i = 0; i < kBN / 32; ++i) {
      uint32_t v[4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) v[jj] = packed_pair(acc, h, 4 * i + jj);
      const uint4 w = quad_transpose(v, lane);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(stg + staged_at(r, 4 * i + q)), "r"(w.x),
                   "r"(w.y), "r"(w.z), "r"(w.w)
                   : "memory");
    }
  }
}

__device__ __forceinline__ uint4 lds16(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}

// The epilogue warps' part of one staged tile (et: 0 .. 95): 16-byte pieces of output rows; with
// kSwiglu, 8 act values from a gate chunk (2j) and its up chunk (2j + 1), dev::swiglu_value's bytes.
template <bool kSwiglu>
__device__ __forceinline__ void finish_tile(uint32_t stg, __nv_bfloat16* __restrict__ out, const Shape& s, int tm,
                                            int tn, int et) {
  constexpr int kPieces = kSwiglu ? kBN / 16 : kBN / 8;  // 16-byte output pieces a row
  const int ncols = kSwiglu ? s.N / 2 : s.N;
  for (int it = et; it < kBM * kPieces; it += 96) {
    const int r = it / kPieces, j = it % kPieces, row = tm * kBM + r, col = tn * kPieces * 8 + 8 * j;
    if (row >= s.M || col >= ncols) continue;
    uint4 o;
    if constexpr (!kSwiglu) {
      o = lds16(stg + staged_at(r, j));
    } else {
      float g[8], u[8], a[8], y[8];
      dev::unpack8(lds16(stg + staged_at(r, 2 * j)), g);
      dev::unpack8(lds16(stg + staged_at(r, 2 * j + 1)), u);
      dev::silu_batch(g, a);
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = dev::swiglu_of_silu(a[e], u[e], true);
      o = dev::pack8(y);
    }
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * s.ldo + col) = o;
  }
}

// Cluster helpers (kCluster 2: two blocks of one cluster take row tiles 2p and 2p + 1 of one
// column tile, and each copies half of the W tile into both blocks' shared memory).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// An arrival on the barrier at `bar` (a shared::cta address) in block `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// The box at (c0, c1) into `dst` of every block in `mask`, completing on `bar` in each.
__device__ __forceinline__ void load_2d_multicast(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                                  uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}

template <int kStages, bool kSwiglu, int kCluster, int kEpi>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_tn_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                   __nv_bfloat16* __restrict__ out, const Shape s) {
  static_assert(kCluster == 1 || kCluster == 2, "one block or a pair");
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  using mma::smem_addr;
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;  // stage st: x tile, then W tile
  const int tid = threadIdx.x, wg = tid >> 7;
  const int tiles_m = (s.M + kBM - 1) / kBM, tiles_n = (s.N + kBN - 1) / kBN, kb = (s.K + kBK - 1) / kBK;
  // kCluster 2: "tiles" are pairs of row tiles, the pair's rank picks its row tile (with an odd
  // tiles_m the last pair's second tile lies past M: its copies read zeros, it stores nothing).
  const int pairs_m = (tiles_m + kCluster - 1) / kCluster, ntiles = pairs_m * tiles_n;
  const int rank = kCluster == 2 ? static_cast<int>(cluster_rank()) : 0;
  const int first = blockIdx.x / kCluster, stride = gridDim.x / kCluster;
  const auto tile_at = [&](int t, int& tm, int& tn) {  // this block's output tile of (pair) tile t
    tile_of(t, pairs_m, tiles_n, s.group_n, tm, tn);
    tm = tm * kCluster + rank;
  };
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::mbar_init(smem_addr(&full[i]), 1);
      tma::mbar_init(smem_addr(&empty[i]), kCluster == 2 && s.multicast ? 16 : 8);  // consumer warps (of the pair)
    }
    tma::mbar_fence_init();
  }
  if constexpr (kCluster == 2) {
    cluster_sync_all();  // both blocks' barriers exist before either copies into the other
  } else {
    __syncthreads();
  }

  if (wg == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == 0) {
      int it = 0;
      for (int t = first; t < ntiles; t += stride) {
        int tm, tn;
        tile_at(t, tm, tn);
        for (int k = 0; k < kb; ++k, ++it) {
          const int st = it % kStages, use = it / kStages;
          if (use > 0) {
            tma::mbar_wait(smem_addr(&empty[st]), (use - 1) & 1);
            tma::release_reads();
          }
          const uint32_t a_s = base + st * kStageBytes, b_s = a_s + kABytes;
          tma::mbar_arrive_expect_tx(smem_addr(&full[st]), kStageBytes);
          tma::load_2d(a_s, &a_map, k * kBK, tm * kBM, smem_addr(&full[st]));
          if constexpr (kCluster == 1) {
            tma::load_2d(b_s, &b_map, k * kBK, tn * kBN, smem_addr(&full[st]));
          } else if (!s.multicast) {  // the whole W tile into this block, in two boxes
            tma::load_2d(b_s, &b_map, k * kBK, tn * kBN, smem_addr(&full[st]));
            tma::load_2d(b_s + kBBytes / 2, &b_map, k * kBK, tn * kBN + kBN / 2, smem_addr(&full[st]));
          } else {  // this block's half of the W tile, into both blocks
            load_2d_multicast(b_s + rank * (kBBytes / 2), &b_map, k * kBK, tn * kBN + rank * (kBN / 2),
                              smem_addr(&full[st]), 0x3);
          }
        }
      }
    }
    __syncwarp();                           // warp 0 converged again before the pair's closing barrier
    if (kEpi == kEpiStaged && tid >= 32) {  // the epilogue warps
      const uint32_t stg = base + kStages * kStageBytes;
      bar_arrive(kBarFree);  // the staging tile starts free
      for (int t = first; t < ntiles; t += stride) {
        int tm, tn;
        tile_at(t, tm, tn);
        bar_sync(kBarStaged);
        finish_tile<kSwiglu>(stg, out, s, tm, tn, tid - 32);
        bar_arrive(kBarFree);
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int c = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31;
    // A warp's release of stage st: its own block's barrier and, in a pair, the other block's.
    const auto release = [&](int st) {
      if (lane != 0) return;
      if (kCluster == 1 || !s.multicast) {
        tma::mbar_arrive(smem_addr(&empty[st]));
      } else {
        mbar_arrive_cluster(smem_addr(&empty[st]), 0);
        mbar_arrive_cluster(smem_addr(&empty[st]), 1);
      }
    };
    float acc[128];
    int it = 0;
    // One stage's products: wait for it, issue them, release the stage before it.
    const auto step = [&](int k) {
      const int st = it % kStages;
      tma::mbar_wait(smem_addr(&full[st]), (it / kStages) & 1);
      const uint32_t a_s = base + st * kStageBytes + c * (kABytes / 2), b_s = base + st * kStageBytes + kABytes;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {  // k-step kk: 32 bytes into every 128-byte row
        wgmma::m64n256k16_ss(acc, wgmma::desc_sw128(a_s + kk * 32, 16, 1024),
                             wgmma::desc_sw128(b_s + kk * 32, 16, 1024), (k > 0 || kk > 0) ? 1 : 0);
      }
      wgmma::commit();
      wgmma::wait<1>();  // the previous stage's products are done: release it
      if (k > 0) release((it - 1) % kStages);
      ++it;
    };
    [[maybe_unused]] uint32_t pend[64];
    [[maybe_unused]] bool pending = false;
    [[maybe_unused]] int ptm = 0, ptn = 0;
    for (int t = first; t < ntiles; t += stride) {
      int tm, tn;
      tile_at(t, tm, tn);
      int k = 0;
      if constexpr (kEpi == kEpiDeferred) {  // the last tile's groups, one after each of the first stages
        constexpr int kG = kDeferredGroups<kSwiglu>;
        [&]<int... G>(std::integer_sequence<int, G...>) {
          (([&] {
             if (k < kb) step(k++);
             if (pending) store_group<kSwiglu, G>(pend, out, s, ptm, ptn, c, warp, lane);
           }()),
           ...);
        }
        (std::make_integer_sequence<int, kG>{});
      }
      for (; k < kb; ++k) step(k);
      wgmma::wait<0>();
      wgmma::fence_operands<128>(acc);
      release((it - 1) % kStages);

      if constexpr (kEpi == kEpiStaged) {
        bar_sync(kBarFree);  // the epilogue warps have read the last tile
        stage_tile(acc, base + kStages * kStageBytes, c, warp, lane);
        bar_arrive(kBarStaged);
      } else if constexpr (kEpi == kEpiDeferred) {
        pack_tile(acc, pend);
        pending = true;
        ptm = tm;
        ptn = tn;
      } else {
        epilogue<kSwiglu, kEpi == kEpiWide>(acc, out, s, tm, tn, c, warp, lane);
      }
    }
    if constexpr (kEpi == kEpiDeferred) {
      if (pending)
        store_groups<kSwiglu>(pend, out, s, ptm, ptn, c, warp, lane,
                              std::make_integer_sequence<int, kDeferredGroups<kSwiglu>>{});
    }
    if constexpr (kEpi == kEpiStaged) bar_sync(kBarFree);  // the epilogue warps' last arrival
  }
  // A pair's blocks leave together: the other block's copies into this one and its arrivals on
  // this one's barriers are done.
  if constexpr (kCluster == 2) cluster_sync_all();
}

// The tensor map of a [rows, K] bf16 row-major operand read in boxes of box_rows x 64.
inline bool operand_map(CUtensorMap* map, const void* p, int rows, int K, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K) * 2};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)};
  return tma::encode_bf16_sw128(map, p, 2, dims, strides, box);
}

// The launch of a kernel of this file on `grid` blocks in clusters of `cluster` (`attr` holds the
// configuration's one attribute, so it must outlive the launch).
inline cudaLaunchConfig_t launch_config(int grid, size_t smem, int cluster, cudaStream_t stream,
                                        cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

// How many clusters of gemm_tn_kernel<...> run at once (grid: the blocks asked for).
template <int kStages, bool kSwiglu, int kCluster, int kEpi>
inline cudaError_t max_clusters(int grid, int& clusters) {
  auto kernel = gemm_tn_kernel<kStages, kSwiglu, kCluster, kEpi>;
  const size_t smem = smem_bytes<kStages, kEpi>();
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config(grid, smem, kCluster, nullptr, attr);
  return cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
}

// Launches y = x W^T (kSwiglu: act of W's interleaved gate_up rows) on persistent blocks (one an
// SM, at most the tiles; kCluster 2: pairs, no more pairs than run at once). K % 8 == 0 (the map's
// row stride), N % 8 == 0 (16-byte output chunks; N % 16 == 0 with SwiGLU); M and N otherwise free:
// the copies read zeros past them and no store lands there.
template <int kStages, bool kSwiglu, int kCluster = 1, int kEpi = kEpiWide>
inline cudaError_t gemm_tn(const void* x, const void* w, void* y, const Shape& s, int sms, cudaStream_t stream) {
  CUtensorMap a_map, b_map;
  if (s.K % 8 != 0 || s.N % (kSwiglu ? 16 : 8) != 0) return cudaErrorInvalidValue;
  if (!operand_map(&a_map, x, s.M, s.K, kBM) || !operand_map(&b_map, w, s.N, s.K, kBN / kCluster))
    return cudaErrorInvalidValue;
  // Work units: tiles, or pairs of row tiles (kCluster 2); a block (pair) for each, at most an SM each.
  const int units = ((s.M + kBM - 1) / kBM + kCluster - 1) / kCluster * ((s.N + kBN - 1) / kBN);
  const int per = sms / kCluster;
  int grid = (units < per ? units : per) * kCluster, clusters = 0;
  cudaError_t e = max_clusters<kStages, kSwiglu, kCluster, kEpi>(grid, clusters);  // also sets the smem limit
  if (e != cudaSuccess) return e;
  if (clusters > 0 && clusters * kCluster < grid) grid = clusters * kCluster;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config(grid, smem_bytes<kStages, kEpi>(), kCluster, stream, attr);
  return cudaLaunchKernelEx(&cfg, gemm_tn_kernel<kStages, kSwiglu, kCluster, kEpi>, a_map, b_map,
                            static_cast<__nv_bfloat16*>(y), s);
}

}  // namespace sg::probe_gemm
