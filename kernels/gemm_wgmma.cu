// gemm_wgmma.cu: the prefill GEMM on wgmma (gemm_wgmma.h has the design and the numerics).
#include <cuda.h>
#include <cuda_bf16.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>

#include "kernels/device_util.cuh"
#include "kernels/gemm_wgmma.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/tma_map.h"
#include "kernels/tma_util.cuh"
#include "kernels/wgmma_util.cuh"

namespace sg {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // output tile rows x columns, K a stage
constexpr int kStages = 4;
constexpr uint32_t kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + the swizzle's 1024-byte alignment
constexpr int kThreads = 384;                                        // producer warpgroup + two consumers
constexpr int kProducerRegs = 56, kConsumerRegs = 224;               // 128 x 56 + 256 x 224 <= 65536
constexpr int kCluster = 2;                                          // blocks sharing each W tile
constexpr int kGroupN = 8;                                           // column tiles a raster group

struct Shape {
  int M, N, K;
  int64_t ldy;
  const int32_t* live_rows;  // SwiGLU: rows at or past *live_rows are stored as zeros (null: none)
};

// Output tile (tm, tn) of linear (pair) tile t: groups of kGroupN column tiles, column tiles fastest.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kGroupN * tiles_m;
  const int grp = t / per_group, within = t % per_group;
  const int gn = min(kGroupN, tiles_n - grp * kGroupN);
  tn = grp * kGroupN + within % gn;
  tm = within / gn;
}

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

// A consumer's finished tile as bf16 pairs: its accumulators acc[4 j + 2 h], acc[4 j + 2 h + 1] are
// row r0 + 8 h, columns 8 j + 2q, + 1 (r0 = the warp's 16-row slice + lane / 4, q = lane % 4), kept
// as pend[32 h + j].
__device__ __forceinline__ void pack_tile(const float (&acc)[128], uint32_t (&pend)[64]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 32; ++j) pend[32 * h + j] = pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
}
// Parts of a kept tile's epilogue, one after each of the next tile's first stages: a plain group's
// store (16 groups), or one SwiGLU output pair (two SiLUs) with its group's store (8 groups, half
// the columns) after the group's fourth pair, so that the exps and divisions spread over 32
// stages instead of loading the first 8.
template <bool kSwiglu>
constexpr int kParts = kSwiglu ? 32 : 16;
// The output row of half h of a lane's accumulators in tile row tm (consumer c, warp, lane).
__device__ __forceinline__ int out_row(int tm, int c, int warp, int lane, int h) {
  return tm * kBM + c * 64 + warp * 16 + (lane >> 2) + 8 * h;
}
// Group G of the kept tile (tm, tn) from its four packed pairs v: 16 contiguous output bytes a lane
// after a quad transpose. Plain: G = 8 h + i holds pend[4 G .. 4 G + 3]. SwiGLU: G = 4 h + i holds
// output pairs jo = 4 i + jj (swiglu_pair).
template <bool kSwiglu, int G>
__device__ __forceinline__ void store_packed(const uint32_t (&v)[4], __nv_bfloat16* __restrict__ out, const Shape& s,
                                             int tm, int tn, int c, int warp, int lane) {
  constexpr int h = kSwiglu ? G / 4 : G / 8, i = kSwiglu ? G % 4 : G % 8;
  constexpr int kCols = kSwiglu ? kBN / 2 : kBN;
  const int q = lane & 3, r = out_row(tm, c, warp, lane, h);
  const uint4 w = quad_transpose(v, lane);
  const int col = tn * kCols + 8 * (4 * i + q);
  if (r < s.M && col < (kSwiglu ? s.N / 2 : s.N)) *reinterpret_cast<uint4*>(out + r * s.ldy + col) = w;
}
// SwiGLU output pair jj of group G = 4 h + i (jo = 4 i + jj): the gate at column group 2 jo and up
// at 2 jo + 1 (W's rows interleaved by 8), from the rounded bf16 outputs: the bytes of the swiglu
// kernel on this GEMM's plain y. Each bf16 is widened by a shift (exact; widening through a cvt
// spilled 260 bytes a thread: the compiler widened every pair of the tile ahead of its use).
template <int G, int JJ>
__device__ __forceinline__ void swiglu_pair(const uint32_t (&pend)[64], uint32_t (&v)[4], int live, int r) {
  constexpr int h = G / 4, cg = 2 * (4 * (G % 4) + JJ);  // the gate's column group; up at cg + 1
  const uint32_t gw = pend[32 * h + cg], uw = pend[32 * h + cg + 1];
  const float g[2] = {__uint_as_float(gw << 16), __uint_as_float(gw & 0xffff0000u)};
  const float u[2] = {__uint_as_float(uw << 16), __uint_as_float(uw & 0xffff0000u)};
  float a[2];
  dev::silu_batch(g, a);
  v[JJ] = r < live ? pack_bf16x2(dev::swiglu_of_silu(a[0], u[0], true), dev::swiglu_of_silu(a[1], u[1], true)) : 0u;
}
// Part P of the kept tile's epilogue (kParts): plain, group P's store; SwiGLU, pair P % 4 of group
// P / 4 into v, and the group's store after its last pair.
template <bool kSwiglu, int P>
__device__ __forceinline__ void epilogue_part(const uint32_t (&pend)[64], uint32_t (&v)[4],
                                              __nv_bfloat16* __restrict__ out, const Shape& s, int live, int tm, int tn,
                                              int c, int warp, int lane) {
  if constexpr (!kSwiglu) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) v[jj] = pend[4 * P + jj];
    store_packed<false, P>(v, out, s, tm, tn, c, warp, lane);
  } else {
    constexpr int G = P / 4;
    swiglu_pair<G, P % 4>(pend, v, live, out_row(tm, c, warp, lane, G / 4));
    if constexpr (P % 4 == 3) store_packed<true, G>(v, out, s, tm, tn, c, warp, lane);
  }
}
template <bool kSwiglu, int... P>
__device__ __forceinline__ void epilogue_all(const uint32_t (&pend)[64], uint32_t (&v)[4],
                                             __nv_bfloat16* __restrict__ out, const Shape& s, int live, int tm, int tn,
                                             int c, int warp, int lane, std::integer_sequence<int, P...>) {
  (epilogue_part<kSwiglu, P>(pend, v, out, s, live, tm, tn, c, warp, lane), ...);
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// An arrival on the barrier at `bar` (a shared::cta address) in block `rank` of the cluster. No
// cluster-scope release: the arrival says this warp's wgmma reads of the stage are done, and with a
// release the pairs ran at half the speed.
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

template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                      __nv_bfloat16* __restrict__ out, const Shape s) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  using mma::smem_addr;
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;  // stage st: x tile, then W tile
  const int tid = threadIdx.x, wg = tid >> 7;
  const int tiles_m = (s.M + kBM - 1) / kBM, tiles_n = (s.N + kBN - 1) / kBN, kb = (s.K + kBK - 1) / kBK;
  // Work units are pairs of row tiles of one column tile; the cluster rank picks the row tile (with
  // an odd tiles_m the last pair's second tile lies past M: its copies read zeros, it stores nothing).
  const int pairs_m = (tiles_m + 1) / 2, units = pairs_m * tiles_n;
  const int rank = static_cast<int>(cluster_rank());
  const int first = blockIdx.x / kCluster, stride = gridDim.x / kCluster;
  const auto tile_at = [&](int t, int& tm, int& tn) {
    tile_of(t, pairs_m, tiles_n, tm, tn);
    tm = tm * kCluster + rank;
  };
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::mbar_init(smem_addr(&full[i]), 1);
      tma::mbar_init(smem_addr(&empty[i]), 8 * kCluster);  // every consumer warp of the pair
    }
    tma::mbar_fence_init();
  }
  pdl_start();         // kernels/launch.cuh: x is the previous kernel's
  cluster_sync_all();  // both blocks' barriers exist before either copies into the other

  if (wg == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == 0) {
      int it = 0;
      for (int t = first; t < units; t += stride) {
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
          // This block's half of the W tile, into both blocks.
          load_2d_multicast(b_s + rank * (kBBytes / 2), &b_map, k * kBK, tn * kBN + rank * (kBN / 2),
                            smem_addr(&full[st]), 0x3);
        }
      }
    }
    __syncwarp();  // warp 0 converged again before the pair's closing barrier
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int c = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31;
    const int live = kSwiglu && s.live_rows ? *s.live_rows : s.M;
    // A warp's release of stage st: on both blocks' barriers.
    const auto release = [&](int st) {
      if (lane != 0) return;
      mbar_arrive_cluster(smem_addr(&empty[st]), 0);
      mbar_arrive_cluster(smem_addr(&empty[st]), 1);
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
    uint32_t pend[64];  // the last tile, packed (pack_tile)
    uint32_t v[4];      // the group of it being stored (epilogue_part)
    bool pending = false;
    int ptm = 0, ptn = 0;
    for (int t = first; t < units; t += stride) {
      int tm, tn;
      tile_at(t, tm, tn);
      int k = 0;
      // The last tile's epilogue, a part after each of this tile's first stages (inlined by force:
      // kept as a call, the 32 SwiGLU parts cost a 1040-byte stack frame, and the compiler
      // serialised the wgmma products around the call).
      [&]<int... P>(std::integer_sequence<int, P...>) __attribute__((always_inline)) {
        (([&] {
           if (k < kb) step(k++);
           if (pending) epilogue_part<kSwiglu, P>(pend, v, out, s, live, ptm, ptn, c, warp, lane);
         }()),
         ...);
      }
      (std::make_integer_sequence<int, kParts<kSwiglu>>{});
      for (; k < kb; ++k) step(k);
      wgmma::wait<0>();
      wgmma::fence_operands<128>(acc);
      release((it - 1) % kStages);
      pack_tile(acc, pend);
      pending = true;
      ptm = tm;
      ptn = tn;
    }
    if (pending)
      epilogue_all<kSwiglu>(pend, v, out, s, live, ptm, ptn, c, warp, lane,
                            std::make_integer_sequence<int, kParts<kSwiglu>>{});
  }
  // The pair's blocks leave together: the other block's copies into this one and its arrivals on
  // this one's barriers are done.
  cluster_sync_all();
}

// The tensor map of a [rows, K] bf16 operand with row stride ld, read in boxes of box_rows x 64.
bool operand_map(CUtensorMap* map, const void* p, int rows, int K, int64_t ld, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)};
  return tma::encode_bf16_sw128(map, p, 2, dims, strides, box);
}

template <bool kSwiglu>
cudaError_t launch(const GemmWgmmaParams& p, int64_t ldx, int64_t ldy, int sms, cudaStream_t stream) {
  CUtensorMap a_map, b_map;
  if (!operand_map(&a_map, p.x, p.M, p.K, ldx, kBM) || !operand_map(&b_map, p.W, p.N, p.K, p.K, kBN / kCluster)) {
    refuse_launch("gemm_wgmma", "the driver could not encode the tensor maps");
    return cudaErrorNotSupported;
  }
  const auto kernel = gemm_wgmma_kernel<kSwiglu>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (e != cudaSuccess) return e;
  // One pair of blocks a unit (two row tiles of one column tile), at most one block an SM and no
  // more pairs than can run at once.
  const int units = ((p.M + kBM - 1) / kBM + 1) / 2 * ((p.N + kBN - 1) / kBN);
  int pairs = units < sms / kCluster ? units : sms / kCluster;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kCluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(pairs * kCluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  // Asked once a device and form (a host query, kept out of the launches that a capture records).
  static std::array<std::atomic<int>, 64> resident_of{};  // 0: not asked yet
  int dev = 0;
  if (e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const bool cacheable = dev >= 0 && dev < static_cast<int>(resident_of.size());
  int resident = cacheable ? resident_of[static_cast<size_t>(dev)].load(std::memory_order_relaxed) : 0;
  if (resident == 0) {
    if (e = cudaOccupancyMaxActiveClusters(&resident, kernel, &cfg); e != cudaSuccess) return e;
    resident = resident > 0 ? resident : -1;  // -1: the query gave no bound
    if (cacheable) resident_of[static_cast<size_t>(dev)].store(resident, std::memory_order_relaxed);
  }
  if (resident > 0 && resident < pairs) pairs = resident;
  const Shape s{p.M, p.N, p.K, ldy, p.live_rows};
  return launch_kernel_cluster(kernel, dim3(static_cast<unsigned>(pairs * kCluster)), dim3(kThreads), kSmemBytes,
                               stream, kCluster, a_map, b_map, static_cast<__nv_bfloat16*>(p.y), s);
}

// The rules of the params (all but the device's): field-named refusals in `c`.
bool param_rules(LaunchCheck& c, const GemmWgmmaParams& p) {
  const bool sw = p.swiglu_group != 0;
  const int64_t ldx = p.ldx ? p.ldx : p.K, cols = sw ? p.N / 2 : p.N, ldy = p.ldy ? p.ldy : cols;
  c.require(p.swiglu_group == 0 || p.swiglu_group == 8, "swiglu_group must be 0 or 8")
      .in_range(p.M, 0, INT32_MAX, "M")
      .in_range(p.N, 8, INT32_MAX, "N")
      .require(p.N % (sw ? 16 : 8) == 0, sw ? "N must be a multiple of 16 with SwiGLU" : "N must be a multiple of 8")
      .in_range(p.K, 8, INT32_MAX, "K")
      .require(p.K % 8 == 0, "K must be a multiple of 8")
      .require(ldx >= p.K && ldx % 8 == 0, "ldx must be >= K and a multiple of 8")
      .require(ldy >= cols && ldy % 8 == 0, "ldy must be >= the output's columns and a multiple of 8")
      .require(sw || !p.live_rows, "live_rows applies to the SwiGLU epilogue only")
      .in_range(p.sms, 0, INT32_MAX, "sms");
  if (!c.ok() || p.M == 0) return c.ok();  // no rows: no pointer is read
  c.not_null(p.x, "x").not_null(p.W, "W").not_null(p.y, "y");
  return c.ok() && c.require(dev::aligned16(p.x) && dev::aligned16(p.W) && dev::aligned16(p.y),
                             "x, W and y must be 16-byte aligned")
                       .ok();
}

}  // namespace

bool gemm_wgmma_supports(const GemmWgmmaParams& p) {
  LaunchCheck c("gemm_wgmma");
  return param_rules(c, p);
}

cudaError_t gemm_wgmma(const GemmWgmmaParams& p, cudaStream_t stream) {
  LaunchCheck c("gemm_wgmma");
  if (!param_rules(c, p)) return cudaErrorInvalidValue;
  if (p.M == 0) return cudaSuccess;
  const bool sw = p.swiglu_group != 0;
  const int64_t ldx = p.ldx ? p.ldx : p.K, ldy = p.ldy ? p.ldy : (sw ? p.N / 2 : p.N);
  if (const cudaError_t err = dev::require_sm90a(c); err != cudaSuccess) return err;
  int sms = p.sms;
  if (sms == 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
  }
  if (!c.in_range(sms, kCluster, INT32_MAX, "sms").ok()) return cudaErrorInvalidValue;
  return sw ? launch<true>(p, ldx, ldy, sms, stream) : launch<false>(p, ldx, ldy, sms, stream);
}

}  // namespace sg
