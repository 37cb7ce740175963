// rmsnorm.cu: zero-centred RMSNorm (optionally fused with the residual add) and the GDN gated
// RMSNorm. One kernel template for both: a row is owned by a warp (n <= 512) or a block.
#include <cuda_bf16.h>

#include "kernels/device_util.cuh"
#include "kernels/fast_div.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/rmsnorm.h"

namespace sg {
namespace {

constexpr int kWarpRowMaxN = 512;   // n up to this: one warp per row
constexpr int kWarpRowBlock = 256;  // 8 rows per block in warp-per-row mode
constexpr int kMaxBlock = 1024;
// Rows from which the 16-byte norm takes two rows a block: more rows than its one-row blocks fill the GPU with at once
// (three blocks an SM of the 4B's 2560-wide rows, one of the 27B's), where the bytes a thread keeps in flight decide
// the time; a decode bucket keeps one row a block.
constexpr int64_t kVecRowsMin = 1024;
static_assert(kWarpRowMaxN == 512 && 8 * kMaxBlock == 8192, "rmsnorm_sums_planes (rmsnorm.h) names these lengths");

// Both ops mapped onto one argument set (z null for the plain norm, residual fields unused for
// the gated one).
struct NormArgs {
  const void* x;
  DType xt;
  int64_t x_ts, x_hs;  // token / head strides of x (elements)
  const void* res;     // [T, heads, n] or null
  void* res_out;       // [T, heads, n] or null
  DType rt;
  bool xr;        // round x to rt before the residual add (RmsNormParams::round_x)
  const void* z;  // gated only: [T, heads, n] with token stride z_ts
  DType zt;
  int64_t z_ts;
  const void* w;
  DType wt;
  void* y;  // [T, heads, n] contiguous
  DType yt;
  int T, heads, n;
  float eps;
  const int32_t* live;
  int xsplits = 1;            // x: the sum of this many f32 planes (RmsNormParams::x_splits; 16-byte kernel)
  int64_t xsplit_stride = 0;  // elements between the planes
  FastDiv by_heads;           // row -> (token, head) in the 16-byte kernels (rows < 2^31); set by launch()
};

// The value as stored in dtype t (f32: unchanged; bf16: rounded to nearest even).
__device__ __forceinline__ float round_to(DType t, float v) {
  return t == DType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// Fixed butterfly over the warp; every lane ends with the same bits (IEEE add is commutative).
__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// Block-wide sum in a fixed order: warp butterflies, then every warp reduces the warp partials
// with the same butterfly (so all threads get identical bits without a second barrier).
__device__ __forceinline__ float block_sum(float s, float* partial) {
  s = warp_sum(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  return warp_sum(lane < nw ? partial[lane] : 0.0f);
}

// kRows block-wide sums at once, each in block_sum's order (its bits), over one barrier.
template <int kRows>
__device__ __forceinline__ void block_sums(float (&s)[kRows], float (*partial)[32]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    s[j] = warp_sum(s[j]);
    if (lane == 0) partial[j][warp] = s[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kRows; ++j) s[j] = warp_sum(lane < nw ? partial[j][lane] : 0.0f);
}

template <bool kGated, bool kWarpRow>
__global__ void __launch_bounds__(kMaxBlock) norm_kernel(const NormArgs a) {
  pdl_start();  // kernels/launch.cuh
  __shared__ float partial[32];
  int64_t row;
  int lane, G;
  if constexpr (kWarpRow) {
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    lane = threadIdx.x % 32;
    G = 32;
    if (row >= static_cast<int64_t>(a.T) * a.heads) return;  // whole warps
  } else {
    row = blockIdx.x;  // grid = T * heads exactly
    lane = threadIdx.x;
    G = blockDim.x;
  }
  const int t = static_cast<int>(row / a.heads), h = static_cast<int>(row % a.heads);
  const int64_t o0 = row * a.n;  // contiguous [T, heads, n] offset of y / residual / residual_out
  if (a.live && t >= *a.live) {  // padding token: defined zeros, nothing read
    for (int i = lane; i < a.n; i += G) {
      dev::store(a.y, a.yt, o0 + i, 0.0f);
      if (a.res_out) dev::store(a.res_out, a.rt, o0 + i, 0.0f);
    }
    return;
  }
  const int64_t x0 = static_cast<int64_t>(t) * a.x_ts + static_cast<int64_t>(h) * a.x_hs;
  // Pass 1: sum of squares (of the rounded residual sum when fused, which is stored here).
  float s = 0.0f;
  for (int i = lane; i < a.n; i += G) {
    float v = dev::load(a.x, a.xt, x0 + i);
    if (!kGated && a.res_out) {
      if (a.xr) v = round_to(a.rt, v);
      if (a.res) v = v + dev::load(a.res, a.rt, o0 + i);
      v = round_to(a.rt, v);
      dev::store(a.res_out, a.rt, o0 + i, v);
    }
    s = fmaf(v, v, s);
  }
  s = kWarpRow ? warp_sum(s) : block_sum(s, partial);
  const float inv = dev::gated_norm_inv(s, a.n, a.eps);  // the same inverse RMS for both norms
  // Pass 2: same element-to-thread map, so a thread only re-reads what it read or wrote itself
  // (this is what makes y == x and residual_out == x / residual aliasing safe).
  for (int i = lane; i < a.n; i += G) {
    const float wi = dev::load(a.w, a.wt, i);
    float yv;
    if constexpr (kGated) {
      const float v = dev::load(a.x, a.xt, x0 + i);
      const float zv = dev::load(a.z, a.zt, static_cast<int64_t>(t) * a.z_ts + static_cast<int64_t>(h) * a.n + i);
      yv = dev::gated_norm_value(wi, v, inv, zv);
    } else {
      const float v = a.res_out ? dev::load(a.res_out, a.rt, o0 + i) : dev::load(a.x, a.xt, x0 + i);
      yv = (v * inv) * (1.0f + wi);
    }
    dev::store(a.y, a.yt, o0 + i, yv);
  }
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

// Elements i .. i + 7 of a 16-byte aligned bf16 or f32 weight vector.
__device__ __forceinline__ void load_w8(const void* w, DType t, int64_t i, float* f) {
  if (t == DType::bf16) {
    dev::load8(static_cast<const __nv_bfloat16*>(w) + i, f);
  } else {
    dev::load8(static_cast<const float*>(w) + i, f);
  }
}

// The block-per-row norm for bf16 rows (bf16 or f32 weights; an f32 x with round_x, two 16-byte loads a thread, rounded
// to bf16 before the residual add) whose length is a multiple of 256
// (the layer norms of the real models: 2560, 5120): thread i owns the 8 consecutive elements 8i .. 8i + 7 and moves
// them with one 16-byte load or store per tensor, all loads issued before the first store, so a row costs one memory
// round trip and one barrier (the strided loop pays one round trip per element pair it owns: a load after a store to a
// possibly aliasing pointer cannot move ahead of it). Sum of squares: the thread's 8 in index order (fmaf), then the
// fixed butterflies of block_sum; depends only on n, as the strided loop's order does (not the same order, so not its
// bytes).
// kRows consecutive rows a block (the last block's rows past the end do nothing): each thread issues its loads of all
// of them before the first store and the rows share one barrier, so a thread keeps kRows times the bytes in flight (the
// 16-byte loads of a row leave too few in flight to stream the large prefill steps; kVecRowsMin: the one-row kernel's
// 62 registers hold an SM to 1024 threads, one block of the 27B's 5120-wide rows, 10 KB in flight where the norm reads
// the stream alone; two rows a block in 48 registers, two such blocks an SM, 40 KB: see the launch bounds below). Each
// row's arithmetic is the one-row kernel's (the same thread map, order and butterflies), so its bytes are too. Split
// planes (x_splits > 1) take the one-row kernel (their loads' registers would spill two rows). Launch bounds (kThreads,
// the most threads a block): one row a block of up to kVec2MaxN / 8 threads (the decode steps' norms, which sum split
// planes: up to 96 registers, so that eight planes' loads are in flight at once) or up to kMaxBlock (n above kVec2MaxN,
// 64 registers, four planes); two rows a block of n / 8 threads with n <= kVec2MaxN, bounded to two blocks of
// kVec2MaxN / 8 threads an SM, 48 registers a thread. Unbounded, ptxas gave the two-row kernel 50-52, which the SM
// allocates as 56 (eight at a time), so that one block of the 27B's 640 threads held an SM (35840 of its 65536
// registers) and the 4B's 320 three, not four.
constexpr int kVec2MaxN = 5120;
template <int kRows, int kThreads>
__global__ void __launch_bounds__(kThreads, kRows == 1 ? 1 : 2) norm_vec_kernel(const NormArgs a) {
  // Split planes whose loads are in flight together (the sum's order is the planes' order either way).
  constexpr int kPlanesInFlight = kThreads <= kVec2MaxN / 8 ? 8 : 4;
  __shared__ float partial[kRows][32];
  const int64_t rows = static_cast<int64_t>(a.T) * a.heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;  // grid = ceil(T * heads / kRows); blockDim = n / 8
  int t[kRows], h[kRows];
  bool in[kRows], pad[kRows];
  int64_t o0[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int64_t row = row0 + j;  // < 2^31: the launcher's bound on rows
    in[j] = row < rows;
    const uint32_t q = a.by_heads.div(static_cast<uint32_t>(row));
    t[j] = static_cast<int>(q);
    h[j] = static_cast<int>(a.by_heads.mod(static_cast<uint32_t>(row), q));
    o0[j] = row * a.n + 8 * threadIdx.x;
    pad[j] = in[j] && a.live && t[j] >= *a.live;
  }
  // Before the dependency wait (kernels/launch.cuh): the live row count (step metadata) and, for one
  // row, the weight (no kernel of a step writes it), so after the wait the rows' loads are the only
  // round trip before the sum; the padding rows' zeros are writes, so they follow the wait. Two rows
  // load the weight after their rows' loads, under the barrier (before them, its 8 registers pushed
  // the two-row kernel's 48 into spills).
  float w[8];
  if constexpr (kRows == 1) load_w8(a.w, a.wt, 8 * threadIdx.x, w);
  pdl_start();
  float v[kRows][8];
  uint4 ru[kRows], xb[kRows];  // xb: a bf16 x's 16 bytes, widened into v once every row's loads are issued
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    ru[j] = uint4{};
    xb[j] = uint4{};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[j][i] = 0.0f;
    if (!in[j] || pad[j]) continue;
    // The residual first: it depends on nothing here, and issued after the planes' sum it was a
    // memory round trip of its own.
    if (a.res) ru[j] = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.res) + o0[j]);
    const int64_t x0 = static_cast<int64_t>(t[j]) * a.x_ts + static_cast<int64_t>(h[j]) * a.x_hs + 8 * threadIdx.x;
    if (kRows == 1 && a.xt == DType::f32 && a.xsplits > 1) {  // the planes in order from 0.0f, rounded below
      const float* p = static_cast<const float*>(a.x) + x0;
      for (int k0 = 0; k0 < a.xsplits; k0 += kPlanesInFlight) {  // the planes' loads in flight together
        float t4[kPlanesInFlight][8];
#pragma unroll
        for (int q = 0; q < kPlanesInFlight; ++q)
          if (k0 + q < a.xsplits) dev::load8(p + (k0 + q) * a.xsplit_stride, t4[q]);
#pragma unroll
        for (int q = 0; q < kPlanesInFlight; ++q) {
          if (k0 + q < a.xsplits) {
#pragma unroll
            for (int i = 0; i < 8; ++i) v[j][i] += t4[q][i];
          }
        }
      }
    } else if (a.xt == DType::f32) {  // rounded to bf16 below (vec_ok: only with round_x)
      dev::load8(static_cast<const float*>(a.x) + x0, v[j]);
    } else {
      xb[j] = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + x0);
    }
  }
  // A load's first use waits for its bytes: widening row 0 inside the loop above held row 1's load back a
  // memory round trip (the rows' loads sit in separate branches, which the compiler does not reorder across).
  if (a.xt == DType::bf16) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) dev::unpack8(xb[j], v[j]);  // zeros for rows not read
  }
  float s[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (pad[j]) {  // padding token: defined zeros, nothing read
      const uint4 z{};
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.y) + o0[j]) = z;
      if (a.res_out) *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.res_out) + o0[j]) = z;
    }
    if (in[j] && !pad[j] && a.res_out) {
      float r[8];
      if (a.xr) dev::unpack8(dev::pack8(v[j]), v[j]);
      if (a.res) {
        dev::unpack8(ru[j], r);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[j][i] = v[j][i] + r[i];
      }
      const uint4 hu = dev::pack8(v[j]);  // the rounded residual stream, which the norm reads
      dev::unpack8(hu, v[j]);
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.res_out) + o0[j]) = hu;
    }
    s[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s[j] = fmaf(v[j][i], v[j][i], s[j]);
  }
  if constexpr (kRows > 1) load_w8(a.w, a.wt, 8 * threadIdx.x, w);
  block_sums<kRows>(s, partial);
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (!in[j] || pad[j]) continue;
    const float inv = dev::gated_norm_inv(s[j], a.n, a.eps);
    float y[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = (v[j][i] * inv) * (1.0f + w[i]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.y) + o0[j]) = dev::pack8(y);
  }
}

// The GDN gated norm on the same 16-byte footing for short bf16 rows (n = 64, 128, 256: the real
// Dv = 128): R = n / 8 consecutive lanes own a row, 8 consecutive elements each; the sum of
// squares goes through a butterfly over those R lanes. Every lane of a warp takes part in the
// shuffles (rows past the end compute on zeros and store nothing).
// kFast: T x heads rows below 2^31, so the row's token and head come from a.by_heads (a multiply
// and a shift, fast_div.h) instead of a 64-bit division (a long instruction sequence a thread); the
// launcher picks it whenever it can.
// Six blocks an SM (40 registers a thread; 48 fit five, and the same rows' plain form in 40 registers ran 10% faster in
// tools/probes/norm_rows_probe.cu): the row length and head stride are 8 R (gated_vec_ok), not a.n, and z stays packed
// until the output, which is what brings it to 40.
template <int R, bool kFast>
__global__ void __launch_bounds__(kWarpRowBlock, 6) gated_vec_kernel(const NormArgs a) {
  const int64_t rows = static_cast<int64_t>(a.T) * a.heads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kWarpRowBlock / R) + threadIdx.x / R;
  const int part = threadIdx.x % R;
  const bool in = row < rows;
  int t = 0, h = 0;
  if (in && kFast) {
    const uint32_t r = static_cast<uint32_t>(row), q = a.by_heads.div(r);
    t = static_cast<int>(q);
    h = static_cast<int>(a.by_heads.mod(r, q));
  } else if (in) {
    t = static_cast<int>(row / a.heads);
    h = static_cast<int>(row % a.heads);
  }
  // Before the dependency wait, as the one-row norm_vec_kernel: the live row count and the weight.
  const bool live = in && !(a.live && t >= *a.live);
  const int64_t o0 = row * (8 * R) + 8 * part;
  float v[8] = {}, w[8] = {};
  uint4 zu{};
  if (live) load_w8(a.w, a.wt, 8 * part, w);
  pdl_start();  // kernels/launch.cuh
  if (live) {
    const int64_t x0 = static_cast<int64_t>(t) * a.x_ts + static_cast<int64_t>(h) * (8 * R) + 8 * part;
    const int64_t z0 = static_cast<int64_t>(t) * a.z_ts + static_cast<int64_t>(h) * (8 * R) + 8 * part;
    const uint4 xu = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + x0);
    zu = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.z) + z0);
    dev::unpack8(xu, v);
  }
  const float s = dev::row_sumsq8<R>(v);
  if (!in) return;
  float y[8] = {};
  if (live) {
    const float inv = dev::gated_norm_inv(s, 8 * R, a.eps);
    float zf[8];
    dev::unpack8(zu, zf);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dev::gated_norm_value(w[i], v[i], inv, zf[i]);
  }
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.y) + o0) = dev::pack8(y);
}

bool gated_vec_ok(const NormArgs& a) {
  const bool bf16 = a.xt == DType::bf16 && a.zt == DType::bf16 && float_type(a.wt) && a.yt == DType::bf16;
  if (!bf16 || (a.n != 64 && a.n != 128 && a.n != 256)) return false;
  if (a.x_ts % 8 != 0 || a.x_hs != a.n || a.z_ts % 8 != 0) return false;  // heads a row apart (gated_args)
  return dev::aligned16(a.x) && dev::aligned16(a.z) && dev::aligned16(a.w) && dev::aligned16(a.y);
}

// The vector path applies: bf16 rows (y, residual; x bf16, or f32 with round_x; the weight bf16 or f32), n a multiple
// of 256 up to 8192 (whole warps of 8 elements a thread), 16-byte aligned bases and strides.
bool vec_ok(const NormArgs& a) {
  // x bf16, or f32 rounded to bf16 first (round_x, which implies the residual stream's output)
  const bool x_ok = a.xt == DType::bf16 || (a.xt == DType::f32 && a.xr);
  const bool bf16 = x_ok && float_type(a.wt) && a.yt == DType::bf16 && (!a.res_out || a.rt == DType::bf16);
  if (!bf16 || a.n % 256 != 0 || a.n > 8 * kMaxBlock) return false;
  if (a.x_ts % 8 != 0 || a.x_hs % 8 != 0 || (a.xsplits > 1 && a.xsplit_stride % 4 != 0)) return false;
  return dev::aligned16(a.x) && dev::aligned16(a.w) && dev::aligned16(a.y) && dev::aligned16(a.res) &&
         dev::aligned16(a.res_out);
}

template <bool kGated>
cudaError_t launch(NormArgs a, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.T) * a.heads;
  if (rows == 0) return cudaSuccess;
  a.by_heads = FastDiv(static_cast<uint32_t>(a.heads));
  const auto too_many_rows = [] {
    refuse_launch(kGated ? "gated_rmsnorm" : "rmsnorm", "T x heads rows exceed the grid");
    return cudaErrorInvalidValue;
  };
  if (kGated && gated_vec_ok(a)) {
    const int R = a.n / 8, per_block = kWarpRowBlock / R;
    const int64_t blocks = (rows + per_block - 1) / per_block;
    if (blocks > 0x7fffffff) return too_many_rows();
    const unsigned g = static_cast<unsigned>(blocks);
    const bool fast = rows <= 0x7fffffffll;
    const auto go = [&](auto kernel) { launch_kernel(kernel, g, kWarpRowBlock, 0, stream, a); };
    if (R == 8) fast ? go(gated_vec_kernel<8, true>) : go(gated_vec_kernel<8, false>);
    if (R == 16) fast ? go(gated_vec_kernel<16, true>) : go(gated_vec_kernel<16, false>);
    if (R == 32) fast ? go(gated_vec_kernel<32, true>) : go(gated_vec_kernel<32, false>);
    return cudaGetLastError();
  }
  if (a.n <= kWarpRowMaxN) {
    const int64_t per_block = kWarpRowBlock / 32;
    const int64_t blocks = (rows + per_block - 1) / per_block;
    if (blocks > 0x7fffffff) return too_many_rows();
    launch_kernel(norm_kernel<kGated, true>, static_cast<unsigned>(blocks), kWarpRowBlock, 0, stream, a);
  } else {
    if (rows > 0x7fffffff) return too_many_rows();
    if (!kGated && vec_ok(a)) {
      constexpr int kT = kVec2MaxN / 8;
      if (rows >= kVecRowsMin && a.xsplits == 1 && a.n <= kVec2MaxN) {
        launch_kernel(norm_vec_kernel<2, kT>, static_cast<unsigned>((rows + 1) / 2), a.n / 8, 0, stream, a);
      } else if (a.n <= kVec2MaxN) {
        launch_kernel(norm_vec_kernel<1, kT>, static_cast<unsigned>(rows), a.n / 8, 0, stream, a);
      } else {
        launch_kernel(norm_vec_kernel<1, kMaxBlock>, static_cast<unsigned>(rows), a.n / 8, 0, stream, a);
      }
      return cudaGetLastError();
    }
    const int want = (a.n + 7) / 8;
    const int block = want >= kMaxBlock ? kMaxBlock : (want + 31) / 32 * 32;
    launch_kernel(norm_kernel<kGated, false>, static_cast<unsigned>(rows), block, 0, stream, a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  LaunchCheck chk("rmsnorm");
  chk.not_null(p.x, "x").not_null(p.w, "w").not_null(p.y, "y").in_range(p.T, 0, INT32_MAX, "T");
  chk.in_range(p.heads, 1, INT32_MAX, "heads")
      .in_range(p.n, 1, INT32_MAX, "n")
      .require(p.eps >= 0.0f, "eps must be >= 0");
  chk.require(float_type(p.x_dtype) && float_type(p.w_dtype) && float_type(p.y_dtype),
              "x_dtype, w_dtype and y_dtype must be bf16 or f32");
  chk.require(!p.residual || p.residual_out, "residual needs residual_out");
  chk.require(!p.residual_out || float_type(p.residual_dtype), "residual_dtype must be bf16 or f32");
  chk.require(!p.residual_out || p.residual_out != p.y, "residual_out must not be y");
  const int64_t hs = p.x_head_stride ? p.x_head_stride : p.n;
  const int64_t ts = p.x_token_stride ? p.x_token_stride : hs * p.heads;
  chk.require(hs >= p.n, "x_head_stride must be >= n")
      .require(ts >= (p.heads - 1) * hs + p.n, "x_token_stride must hold every head of a token");
  if (!chk.ok()) return cudaErrorInvalidValue;
  NormArgs a{p.x,
             p.x_dtype,
             ts,
             hs,
             p.residual,
             p.residual_out,
             p.residual_dtype,
             p.round_x && p.residual_out,
             nullptr,
             DType::f32,
             0,
             p.w,
             p.w_dtype,
             p.y,
             p.y_dtype,
             p.T,
             p.heads,
             p.n,
             p.eps,
             p.live_rows};
  if (p.x_splits != 1) {
    a.xsplits = p.x_splits;
    a.xsplit_stride = p.x_split_stride;
    chk.in_range(p.x_splits, 1, INT32_MAX, "x_splits");
    chk.require(p.x_dtype == DType::f32 && a.xr, "x_splits > 1 needs an f32 x with round_x and residual_out");
    chk.require(p.x_split_stride >= static_cast<int64_t>(p.T) * ts, "x_split_stride must be >= T x the token stride");
    chk.require(rmsnorm_sums_planes(p.n) && vec_ok(a),
                "x_splits > 1 needs the 16-byte kernel: bf16 rows, n a multiple of 256 above 512, 16-byte aligned "
                "planes");
    if (!chk.ok()) return cudaErrorInvalidValue;
  }
  return launch<false>(a, stream);
}

namespace {
NormArgs gated_args(const GatedRmsNormParams& p, int64_t xts, int64_t zts) {
  return NormArgs{p.x, p.x_dtype, xts,       p.n, nullptr,   nullptr, DType::f32, false, p.z,   p.z_dtype,
                  zts, p.w,       p.w_dtype, p.y, p.y_dtype, p.T,     p.heads,    p.n,   p.eps, p.live_rows};
}
}  // namespace

bool gated_rmsnorm_vector_path(const GatedRmsNormParams& p) {
  const int64_t row = static_cast<int64_t>(p.heads) * p.n;
  return gated_vec_ok(
      gated_args(p, p.x_token_stride ? p.x_token_stride : row, p.z_token_stride ? p.z_token_stride : row));
}

cudaError_t gated_rmsnorm(const GatedRmsNormParams& p, cudaStream_t stream) {
  LaunchCheck chk("gated_rmsnorm");
  chk.not_null(p.x, "x").not_null(p.z, "z").not_null(p.w, "w").not_null(p.y, "y").in_range(p.T, 0, INT32_MAX, "T");
  chk.in_range(p.heads, 1, INT32_MAX, "heads")
      .in_range(p.n, 1, INT32_MAX, "n")
      .require(p.eps >= 0.0f, "eps must be >= 0");
  chk.require(float_type(p.x_dtype) && float_type(p.z_dtype) && float_type(p.w_dtype) && float_type(p.y_dtype),
              "x_dtype, z_dtype, w_dtype and y_dtype must be bf16 or f32");
  const int64_t row = static_cast<int64_t>(p.heads) * p.n;
  const int64_t xts = p.x_token_stride ? p.x_token_stride : row;
  const int64_t zts = p.z_token_stride ? p.z_token_stride : row;
  chk.require(xts >= row, "x_token_stride must be >= heads x n")
      .require(zts >= row, "z_token_stride must be >= heads x n");
  if (!chk.ok()) return cudaErrorInvalidValue;
  return launch<true>(gated_args(p, xts, zts), stream);
}

}  // namespace sg
