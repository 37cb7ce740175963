// conv_update.cu: decode conv update kernels (arms `grid` and `fast`).
#include "kernels/conv_update.h"

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

constexpr int kMaxK = 8;

// One (row, channel): read the K-1 state taps, the new input, accumulate in tap order, roll.
__device__ __forceinline__ void conv_update_one(const ConvUpdateParams& p, int r, int c) {
  const int slot = p.slots[r];
  if (slot < 0) {
    dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, 0.0f);
    return;
  }
  const int km1 = p.K - 1;
  const int64_t s0 = (static_cast<int64_t>(slot) * p.C + c) * km1;
  float acc = p.bias ? p.bias[c] : 0.0f;
  for (int j = 0; j < km1; ++j) acc = fmaf(p.w[c * p.K + j], dev::load(p.state, p.state_dtype, s0 + j), acc);
  const float xv = dev::load(p.x, p.x_dtype, static_cast<int64_t>(r) * p.x_stride + c);
  acc = fmaf(p.w[c * p.K + km1], xv, acc);
  dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, p.silu ? dev::silu(acc) : acc);
  // The taps roll as raw bits (data movement: a NaN keeps its payload, as in the fast arm's bodies).
  for (int j = 0; j + 1 < km1; ++j) {
    if (p.state_dtype == DType::bf16) {
      uint16_t* st = static_cast<uint16_t*>(p.state);
      st[s0 + j] = st[s0 + j + 1];
    } else {
      uint32_t* st = static_cast<uint32_t*>(p.state);
      st[s0 + j] = st[s0 + j + 1];
    }
  }
  if (km1 > 0) dev::store(p.state, p.state_dtype, s0 + km1 - 1, xv);
}

// Reference arm: grid-stride loop over rows * C.
__global__ void conv_update_grid_kernel(const ConvUpdateParams p) {
  pdl_start();  // kernels/launch.cuh
  const int64_t n = static_cast<int64_t>(p.rows) * p.C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    conv_update_one(p, static_cast<int>(i / p.C), static_cast<int>(i % p.C));
  }
}

constexpr int kConvUpdateFastMaxBlock = kConvUpdateFastBlockChoices[2];  // the launch bound: 512
static_assert(kConvUpdateFastBlockChoices[0] < kConvUpdateFastBlockChoices[1] &&
                  kConvUpdateFastBlockChoices[1] < kConvUpdateFastMaxBlock,
              "the largest block size last");

// Fast arm: grid (ceil(C / (B * V)), rows), block B (128 by default, 256 or 512); thread t of block
// x handles the V consecutive channels c0 = (x * B + t) * V .. c0 + V - 1 of row blockIdx.y, V = the contract's
// per_thread (2, 4 or 8, picked from the shape in contracts.cpp). The arithmetic per channel is
// conv_update_one's: acc = bias; acc = fmaf(w[c][j], tap_j, acc) for the K-1 state taps, then
// fmaf(w[c][K-1], x, acc); SiLU; the state rolls by one (taps copied bit for bit, x rounded once to
// the state dtype). Two bodies share that grid, chosen per launch on the host
// (conv_update_fast_vectorised):
//  - vec: K 2..5, x and out of one dtype, C % V == 0 and every buffer aligned to its access width
//    (access_bytes below). The thread's state (V (K-1) elements, contiguous: [slot, C, K-1]), x,
//    weights ([C, K] f32: V K floats) and bias are read, and the rolled state and outputs written,
//    as whole 4-, 8- or 16-byte words: no dtype branches, V x fewer memory instructions.
//  - scalar: any other case; the V channels one after the other with dtype-dispatched accesses.

// The access width for one thread's slice of a buffer when every thread's slice is `bytes` long
// and starts at thread * bytes (the slices of the vec body: V elements of x or out, V (K-1) of the
// state, V K weights, V bias values): the largest of 16, 8, 4 dividing `bytes`, so each access is
// naturally aligned once the buffer's base (and x's row stride) is. With V even every slice is a
// whole number of 32-bit words (bf16 V = 2, K = 4 state: 12 bytes, three 4-byte words).
__host__ __device__ constexpr int access_bytes(int bytes) { return bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : 4; }

// Element e of a register copy of memory, as raw bits: bf16 packs two per 32-bit word.
template <class T>
__device__ __forceinline__ uint32_t bits_at(const uint32_t* w, int e) {
  if constexpr (sizeof(T) == 2) return (w[e >> 1] >> (16 * (e & 1))) & 0xffffu;
  return w[e];
}
template <class T>
__device__ __forceinline__ void put_bits(uint32_t* w, int e, uint32_t b) {
  if constexpr (sizeof(T) == 2) {
    w[e >> 1] |= b << (16 * (e & 1));
  } else {
    w[e] = b;
  }
}
template <class T>
__device__ __forceinline__ float bits_to_f32(uint32_t b) {
  return __uint_as_float(sizeof(T) == 2 ? b << 16 : b);
}
template <class T>
__device__ __forceinline__ uint32_t f32_to_bits(float v) {  // one rounding (to nearest even) for bf16
  if constexpr (sizeof(T) == 2) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  return __float_as_uint(v);
}
// N32 32-bit words from / to memory aligned to access_bytes(4 * N32), as accesses of that width.
template <int N32>
__device__ __forceinline__ void load_words(uint32_t (&w)[N32], const void* src) {
  constexpr int kWords = access_bytes(4 * N32) / 4;  // 32-bit words per access: 1, 2 or 4
  if constexpr (kWords == 4) {
    const uint4* s = static_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < N32 / 4; ++i) {
      const uint4 v = s[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (kWords == 2) {
    const uint2* s = static_cast<const uint2*>(src);
#pragma unroll
    for (int i = 0; i < N32 / 2; ++i) {
      const uint2 v = s[i];
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
    const uint32_t* s = static_cast<const uint32_t*>(src);
#pragma unroll
    for (int i = 0; i < N32; ++i) w[i] = s[i];
  }
}
template <int N32>
__device__ __forceinline__ void store_words(void* dst, const uint32_t (&w)[N32]) {
  constexpr int kWords = access_bytes(4 * N32) / 4;
  if constexpr (kWords == 4) {
    uint4* d = static_cast<uint4*>(dst);
#pragma unroll
    for (int i = 0; i < N32 / 4; ++i) d[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  } else if constexpr (kWords == 2) {
    uint2* d = static_cast<uint2*>(dst);
#pragma unroll
    for (int i = 0; i < N32 / 2; ++i) d[i] = make_uint2(w[2 * i], w[2 * i + 1]);
  } else {
    uint32_t* d = static_cast<uint32_t*>(dst);
#pragma unroll
    for (int i = 0; i < N32; ++i) d[i] = w[i];
  }
}

// The vec body. V: channels per thread; TS: state element type, TA: x and out element type (float
// or __nv_bfloat16).
template <int V, int K, class TS, class TA>
__global__ void __launch_bounds__(kConvUpdateFastMaxBlock) conv_update_fast_kernel(const ConvUpdateParams p) {
  constexpr int KM1 = K - 1;
  static_assert(V % 2 == 0 && (V * KM1 * sizeof(TS)) % 4 == 0, "whole 32-bit words per thread slice");
  constexpr int kStateWords = V * KM1 * static_cast<int>(sizeof(TS)) / 4;  // [V, K-1] state elements
  constexpr int kActWords = V * static_cast<int>(sizeof(TA)) / 4;          // [V] x or out elements
  const int r = blockIdx.y;
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= p.C) return;  // C % V == 0: a thread has all V channels or none
  // Before the dependency wait (launch.cuh says why these may be read there): the slot (step
  // metadata), the weights and the channels' conv state, which only this op reads and writes.
  const int slot = p.slots[r];
  void* out = static_cast<TA*>(p.out) + static_cast<int64_t>(r) * p.C + c0;                           // [V]
  TS* st = static_cast<TS*>(p.state) + (static_cast<int64_t>(slot < 0 ? 0 : slot) * p.C + c0) * KM1;  // [V, K-1]
  uint32_t s[kStateWords] = {}, xw[kActWords];
  if (slot >= 0) load_words(s, st);
  uint32_t w[V * K], b[V] = {};  // f32 bits: weights [V, K], bias [V] (+0.0f without bias)
  load_words(w, p.w + static_cast<int64_t>(c0) * K);
  if (p.bias) load_words(b, p.bias + c0);
  pdl_start();  // kernels/launch.cuh
  if (slot < 0) {
    uint32_t zero[kActWords] = {};
    store_words(out, zero);
    return;
  }
  load_words(xw, static_cast<const TA*>(p.x) + static_cast<int64_t>(r) * p.x_stride + c0);  // [V]
  uint32_t ns[kStateWords] = {}, ow[kActWords] = {};
#pragma unroll
  for (int i = 0; i < V; ++i) {
    float acc = __uint_as_float(b[i]);
#pragma unroll
    for (int j = 0; j < KM1; ++j)
      acc = fmaf(__uint_as_float(w[i * K + j]), bits_to_f32<TS>(bits_at<TS>(s, i * KM1 + j)), acc);
    const float xv = bits_to_f32<TA>(bits_at<TA>(xw, i));
    acc = fmaf(__uint_as_float(w[i * K + KM1]), xv, acc);
    put_bits<TA>(ow, i, f32_to_bits<TA>(p.silu ? dev::silu(acc) : acc));
#pragma unroll
    for (int j = 0; j + 1 < KM1; ++j) put_bits<TS>(ns, i * KM1 + j, bits_at<TS>(s, i * KM1 + j + 1));
    put_bits<TS>(ns, i * KM1 + KM1 - 1, f32_to_bits<TS>(xv));
  }
  store_words(out, ow);
  store_words(st, ns);
}

// The scalar body: the same grid, the thread's V channels one by one (any K, dtypes, alignment).
template <int V>
__global__ void __launch_bounds__(kConvUpdateFastMaxBlock) conv_update_fast_scalar_kernel(const ConvUpdateParams p) {
  pdl_start();  // kernels/launch.cuh
  const int r = blockIdx.y;
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const int c1 = min(c0 + V, p.C);
  for (int c = c0; c < c1; ++c) conv_update_one(p, r, c);
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

bool aligned_to(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// True when the vec body may run with V channels per thread: K 2..5, x and out of one dtype,
// C % V == 0, and each buffer's base (and x's row stride in bytes) a multiple of its access width.
// C % V == 0 then makes every thread's offsets multiples of those widths.
bool conv_update_fast_vectorised(const ConvUpdateParams& p, int V) {
  const bool act_ok = p.x_dtype == p.out_dtype && (p.x_dtype == DType::f32 || p.x_dtype == DType::bf16);
  const bool state_ok = p.state_dtype == DType::f32 || p.state_dtype == DType::bf16;
  if (!(p.K >= 2 && p.K <= 5 && act_ok && state_ok && p.C % V == 0)) return false;
  const int ea = static_cast<int>(dtype_size(p.x_dtype)), es = static_cast<int>(dtype_size(p.state_dtype));
  const int wa = access_bytes(V * ea), ws = access_bytes(V * (p.K - 1) * es);
  const int ww = access_bytes(V * p.K * 4), wb = access_bytes(V * 4);
  return aligned_to(p.x, wa) && (p.x_stride * ea) % wa == 0 && aligned_to(p.out, wa) && aligned_to(p.state, ws) &&
         aligned_to(p.w, ww) && (p.bias == nullptr || aligned_to(p.bias, wb));
}

// Turns the runtime (V, K, state dtype, act dtype) of a vec launch into template arguments.
template <int V, int K, class TS>
void launch_fast_vec(const ConvUpdateParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  if (p.x_dtype == DType::bf16) {
    launch_kernel(conv_update_fast_kernel<V, K, TS, __nv_bfloat16>, grid, block, 0, stream, p);
  } else {
    launch_kernel(conv_update_fast_kernel<V, K, TS, float>, grid, block, 0, stream, p);
  }
}

template <int V, int K>
void launch_fast_vec(const ConvUpdateParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  if (p.state_dtype == DType::bf16) {
    launch_fast_vec<V, K, __nv_bfloat16>(p, grid, block, stream);
  } else {
    launch_fast_vec<V, K, float>(p, grid, block, stream);
  }
}

template <int V>
void launch_fast_v(const ConvUpdateParams& p, dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
  if (!conv_update_fast_vectorised(p, V)) {
    launch_kernel(conv_update_fast_scalar_kernel<V>, grid, block, smem, stream, p);
    return;
  }
  switch (p.K) {
    case 2: launch_fast_vec<V, 2>(p, grid, block, stream); break;
    case 3: launch_fast_vec<V, 3>(p, grid, block, stream); break;
    case 4: launch_fast_vec<V, 4>(p, grid, block, stream); break;
    default: launch_fast_vec<V, 5>(p, grid, block, stream); break;
  }
}

// V = k.per_thread, validated by conv_update() against the contract function (2, 4 or 8).
void launch_fast(const ConvUpdateParams& p, const LaunchContract<ConvUpdateArm>& k, cudaStream_t stream) {
  const dim3 grid = to_dim3(k.grid), block = to_dim3(k.block);
  switch (k.per_thread) {
    case 2: launch_fast_v<2>(p, grid, block, k.smem_bytes, stream); break;
    case 4: launch_fast_v<4>(p, grid, block, k.smem_bytes, stream); break;
    default: launch_fast_v<8>(p, grid, block, k.smem_bytes, stream); break;
  }
}

}  // namespace

cudaError_t conv_update(const ConvUpdateParams& p, const LaunchContract<ConvUpdateArm>& c, cudaStream_t stream) {
  LaunchCheck chk("conv.update");
  chk.in_range(p.K, 1, kMaxK, "K");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  // The contract must be the one for these params: the fast arm maps blockIdx.y to the row.
  try {
    // The fast arm's V travels in the contract (per_thread): the contract function given that V
    // must give this very launch (a fast contract with per_thread 0 gets the pick and differs).
    const int v = c.arm == ConvUpdateArm::fast ? c.per_thread : 0;
    const int b = c.arm == ConvUpdateArm::fast ? static_cast<int>(c.block.x) : 0;
    const auto want = conv_update_contract(c.arm, ConvUpdateShape{p.rows, p.C, p.K, v, b});
    chk.require(want.grid == c.grid && want.block == c.block && want.smem_bytes == c.smem_bytes &&
                    want.per_thread == c.per_thread,
                "the contract: it is not the one conv_update_contract gives for these params");
    if (!chk.ok()) return cudaErrorInvalidValue;
  } catch (const std::exception& e) {
    chk.require(false, std::string("its shape: ") + e.what());
    return cudaErrorInvalidValue;
  }
  switch (c.arm) {  // closed: an arm without a case does not compile (-Werror=switch)
    case ConvUpdateArm::grid:
      launch_kernel(conv_update_grid_kernel, to_dim3(c.grid), to_dim3(c.block), c.smem_bytes, stream, p);
      return cudaGetLastError();
    case ConvUpdateArm::fast: launch_fast(p, c, stream); return cudaGetLastError();
  }
  chk.require(false, "the contract: its arm is not one of the op's arms");
  return cudaErrorInvalidValue;
}

}  // namespace sg
