// delta_rule.cu: recurrent gated delta rule, decode step.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_device.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"

namespace sg {
namespace cg = cooperative_groups;
namespace {

constexpr int kNormMaxDv = 256;

// The fused output norm's inverse RMS for this block's (row, v-head), from o' (the bf16-rounded
// outputs, `owner` threads only): gated_rmsnorm's 16-byte order (sums of 8 adjacent columns in
// index order, then a butterfly over the Dv / 8 sums in lanes 0 .. Dv / 8 - 1 of warp 0). Every
// thread of the block calls it. kCluster (col_blocks > 1): the head's columns are spread over the
// blocks of the cluster, and warp 0 reads the other blocks' sums from their shared memory; the
// cluster barrier is left arrived, and the caller waits (dev::cluster_wait) before it exits, so
// that no block leaves while another still reads its sums. Else the block holds the whole head.
template <bool kCluster>
__device__ float fused_norm_inv(const DeltaRuleDecodeParams& p, int cols, int jl, bool owner, float ob) {
  __shared__ float os[kNormMaxDv];        // [cols] this block's o'
  __shared__ float part[kNormMaxDv / 8];  // [cols / 8] this block's sums of squares (cluster)
  __shared__ float inv_s;
  if (owner) os[jl] = ob;
  __syncthreads();
  const int per = cols / 8, G = p.Dv / 8, lane = static_cast<int>(threadIdx.x);
  auto group_sum = [&](int g) {  // columns 8g .. 8g + 7 of this block, in index order
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s = fmaf(os[8 * g + i], os[8 * g + i], s);
    return s;
  };
  if constexpr (kCluster) {
    if (lane < per) part[lane] = group_sum(lane);
    dev::cluster_arrive_release();
    dev::cluster_wait();  // every block's sums are in its shared memory
  }
  if (lane < 32) {
    float s = 0.0f;
    if constexpr (kCluster) {
      if (lane < G) s = *cg::this_cluster().map_shared_rank(&part[lane % per], lane / per);
    } else {
      if (lane < G) s = group_sum(lane);
    }
    for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) inv_s = dev::gated_norm_inv(s, p.Dv, p.norm_eps);
  }
  if constexpr (kCluster) dev::cluster_arrive_release();  // this block reads no other block's memory after this
  __syncthreads();
  return inv_s;
}

// Row r's k and q / sqrt(Dk) of v-head hv's k-head into shared memory ks, qs [DK]; every thread
// of the block calls it (it ends with the barrier).
template <int DK>
__device__ __forceinline__ void load_qk(const DeltaRuleDecodeParams& p, int r, int hv, float* ks, float* qs) {
  const int hk = hv / (p.Hv / p.Hk);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  const int64_t qk0 = (static_cast<int64_t>(r) * p.Hk + hk) * DK;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    ks[i] = dev::load(p.k, p.qkv_dtype, qk0 + i);
    qs[i] = dev::load(p.q, p.qkv_dtype, qk0 + i) * scale;
  }
  __syncthreads();
}

// Grid (Hv * col_blocks, rows); block round_up(Dv / col_blocks * Q, 32): Q consecutive threads share
// column (blockIdx.x % col_blocks) * Dv / col_blocks + t / Q.
// NORM: 0 none, 1 the fused norm in one block (col_blocks 1), 2 in a cluster of col_blocks blocks.
// ST: the state's element type (float or __nv_bfloat16, p.state_dtype).
template <int DK, int Q, int NORM, typename ST>
__global__ void __launch_bounds__(Q == 1   ? 256
                                  : Q == 8 ? 1024
                                           : 512) delta_rule_decode_kernel(const DeltaRuleDecodeParams p) {
  __shared__ float ks[DK], qs[DK];
  const int cb = p.col_blocks, cols = p.Dv / cb;  // resolved by the launcher
  const int hv = blockIdx.x / cb, r = blockIdx.y, jl = threadIdx.x / Q;
  const int j = (blockIdx.x % cb) * cols + jl;  // this thread's state column
  const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv;
  const bool active = jl < cols;
  // Before the dependency wait: the slot (step metadata) and this column's state, which only this
  // op writes (launch.cuh says why both are safe to read here). The loads overlap the previous
  // kernel's tail.
  const int slot = p.slots[r];
  ST* S = static_cast<ST*>(p.state) + (static_cast<int64_t>(slot < 0 ? 0 : slot) * p.Hv + hv) * DK * p.Dv +
          (active ? j : 0);
  float s[DK / Q];
  dev::load_column<DK, Q>(s, S, p.Dv, active && slot >= 0);
  pdl_start();  // kernels/launch.cuh
  if (slot < 0) {
    if (active && threadIdx.x % Q == 0) dev::store(p.out, p.out_dtype, orow + j, 0.0f);
    return;
  }
  load_qk<DK>(p, r, hv, ks, qs);
  const float decay = expf(p.g[static_cast<int64_t>(r) * p.Hv + hv]);
  const float beta = p.beta[static_cast<int64_t>(r) * p.Hv + hv];
  const float v = active ? dev::load(p.v, p.qkv_dtype, orow + j) : 0.0f;
  const bool owner = active && threadIdx.x % Q == 0;
  float z = 0.0f, w = 0.0f;  // the fused norm's gate and weight of column j
  if (NORM != 0 && owner) {
    const int64_t zts = p.norm_z_stride ? p.norm_z_stride : static_cast<int64_t>(p.Hv) * p.Dv;
    z = dev::load(p.norm_z, DType::bf16, r * zts + static_cast<int64_t>(hv) * p.Dv + j);
    w = dev::load(p.norm_w, p.norm_w_dtype, j);
  }
  const float o = dev::delta_rule_step<DK, Q>(s, ks, qs, decay, beta, v);
  dev::store_column<DK, Q>(s, S, p.Dv, active);
  if constexpr (NORM != 0) {
    const float ob = __bfloat162float(__float2bfloat16_rn(o));  // the bf16 output gated_rmsnorm would read
    const float inv = fused_norm_inv<NORM == 2>(p, cols, jl, owner, ob);
    if (owner) dev::store(p.out, DType::bf16, orow + j, dev::gated_norm_value(w, ob, inv, z));
    if constexpr (NORM == 2) dev::cluster_wait();
  } else {
    if (owner) dev::store(p.out, p.out_dtype, orow + j, o);
  }
}

// A bf16 state without the fused norm: Q threads share a PAIR of adjacent columns (j, j + 1) and
// keep their state rows as the bf16x2 words they load (one 32-bit register holds both columns of a
// row), widening a word each time the step reads it. With the state held widened, as the one-column
// kernel holds it, the registers bound the bytes in flight: at 4B b=32 the one-column kernel moved a
// bf16 state at 55% of its floor where the f32 kernel reaches 82% of its (docs/BENCHMARKS.md).
// Each column runs delta_rule_step's arithmetic in its order (pair_step below), so the bytes are the
// same. Grid (Hv * col_blocks, rows), block round_up(Dv / col_blocks / 2 * Q, 32); Dv / col_blocks even.
namespace pair {
__device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }          // column j
__device__ __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }  // column j + 1
__device__ __forceinline__ uint32_t pack(float a, float b) {  // each rounded to nearest even
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// delta_rule_step on two columns whose rows are the words w[i] (lo: column j, hi: j + 1): the same
// products, fmaf chains and shuffles in the same order, the decayed state recomputed in the second
// pass (the same product) and the updated state rounded into w as it is made. o0, o1 as its o.
template <int DK, int Q>
__device__ __forceinline__ void pair_step(uint32_t (&w)[DK / Q], const float* ks, const float* qs, float decay,
                                          float beta, float v0, float v1, float& o0, float& o1) {
  constexpr int R = DK / Q;
  const int lane = threadIdx.x % 32, part = lane % Q, base = lane - part;
  const int r0 = part * R;
  float kv0 = 0.0f, kv1 = 0.0f;
#pragma unroll
  for (int p = 0; p < Q; ++p) {
    if (part == p) {
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const float k = ks[r0 + i];
        kv0 = fmaf(lo(w[i]) * decay, k, kv0);
        kv1 = fmaf(hi(w[i]) * decay, k, kv1);
      }
    }
    if constexpr (Q > 1) {
      kv0 = __shfl_sync(0xffffffffu, kv0, base + p);
      kv1 = __shfl_sync(0xffffffffu, kv1, base + p);
    }
  }
  const float u0 = (v0 - kv0) * beta, u1 = (v1 - kv1) * beta;
  o0 = 0.0f;
  o1 = 0.0f;
#pragma unroll
  for (int p = 0; p < Q; ++p) {
    if (part == p) {
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const float k = ks[r0 + i], q = qs[r0 + i];
        const float s0 = fmaf(k, u0, lo(w[i]) * decay), s1 = fmaf(k, u1, hi(w[i]) * decay);
        o0 = fmaf(s0, q, o0);
        o1 = fmaf(s1, q, o1);
        w[i] = pack(s0, s1);
      }
    }
    if constexpr (Q > 1) {
      o0 = __shfl_sync(0xffffffffu, o0, base + p);
      o1 = __shfl_sync(0xffffffffu, o1, base + p);
    }
  }
}
}  // namespace pair

template <int DK, int Q>
__global__ void __launch_bounds__(Q == 8 ? 512 : 256) delta_rule_decode_pair_kernel(const DeltaRuleDecodeParams p) {
  __shared__ float ks[DK], qs[DK];
  constexpr int R = DK / Q;
  const int cb = p.col_blocks, cols = p.Dv / cb;  // resolved by the launcher
  const int hv = blockIdx.x / cb, r = blockIdx.y, jp = threadIdx.x / Q;
  const int j = (blockIdx.x % cb) * cols + 2 * jp;  // this thread group's columns: j, j + 1
  const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv;
  const bool active = 2 * jp < cols;
  const int r0 = (threadIdx.x % 32 % Q) * R;  // this lane's rows (delta_rule_step's mapping)
  const int64_t words = p.Dv / 2;             // bf16x2 words a state row
  // Before the dependency wait, as in the one-column kernel: the slot and the pair's state.
  const int slot = p.slots[r];
  uint32_t* S = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.state) +
                                            (static_cast<int64_t>(slot < 0 ? 0 : slot) * p.Hv + hv) * DK * p.Dv +
                                            (active ? j : 0));
  uint32_t w[R];  // [R] rows r0.., each the bf16 pair (S[row][j], S[row][j + 1])
  const bool live = active && slot >= 0;
#pragma unroll
  for (int i = 0; i < R; ++i) w[i] = live ? S[(r0 + i) * words] : 0u;
  pdl_start();  // kernels/launch.cuh
  const bool owner = active && threadIdx.x % Q == 0;
  if (slot < 0) {
    if (owner) {
      dev::store(p.out, p.out_dtype, orow + j, 0.0f);
      dev::store(p.out, p.out_dtype, orow + j + 1, 0.0f);
    }
    return;
  }
  load_qk<DK>(p, r, hv, ks, qs);
  const float decay = expf(p.g[static_cast<int64_t>(r) * p.Hv + hv]);
  const float beta = p.beta[static_cast<int64_t>(r) * p.Hv + hv];
  const float v0 = active ? dev::load(p.v, p.qkv_dtype, orow + j) : 0.0f;
  const float v1 = active ? dev::load(p.v, p.qkv_dtype, orow + j + 1) : 0.0f;
  float o0, o1;
  pair::pair_step<DK, Q>(w, ks, qs, decay, beta, v0, v1, o0, o1);
  if (active) {
#pragma unroll
    for (int i = 0; i < R; ++i) S[(r0 + i) * words] = w[i];
  }
  if (owner) {
    dev::store(p.out, p.out_dtype, orow + j, o0);
    dev::store(p.out, p.out_dtype, orow + j + 1, o1);
  }
}

// Staged (DeltaRuleDecodeParams::staged): persistent blocks over the (row, v-head) items, each
// block all Dv columns of a head (col_blocks 1). A block copies the next item's state slab
// ([Dk, Dv], contiguous) into shared memory with cp.async while it computes the current item from
// registers, so that the state keeps streaming while blocks compute (in the other kernels a block
// loads, computes, stores and exits, and the next wave's loads start only as blocks exit). f32: one
// column a thread group of Q; bf16: column pairs, as the pair kernel. The same per-column
// arithmetic (delta_rule_step, pair::pair_step), so the same bytes. Block (Dv or Dv / 2) * Q
// threads (<= 256); dynamic shared memory Dk * Dv state elements; grid min(rows * Hv, resident
// blocks), from the occupancy the device gives this kernel.
template <int DK, int Q, typename ST>
__global__ void __launch_bounds__(kDeltaRuleStagedMaxThreads, Q == 2 ? 2 : 1)
    delta_rule_decode_staged_kernel(const DeltaRuleDecodeParams p) {
  constexpr bool kPairs = std::is_same_v<ST, __nv_bfloat16>;
  constexpr int R = DK / Q;
  extern __shared__ __align__(16) unsigned char staged_slab[];  // [DK, Dv] ST: the staged item's state
  __shared__ __align__(16) float ks[DK], qs[DK];
  const int Dv = p.Dv, n_items = p.rows * p.Hv;
  const int jl = threadIdx.x / Q, j = kPairs ? 2 * jl : jl;  // this thread group's column(s): j (, j + 1)
  const bool active = j < Dv;
  const int r0 = (threadIdx.x % 32 % Q) * R;  // this lane's rows (delta_rule_step's mapping)
  const int64_t slab_elems = static_cast<int64_t>(DK) * Dv;
  const int chunks = static_cast<int>(slab_elems * static_cast<int64_t>(sizeof(ST)) / 16);
  // Copies item's slab into shared memory (nothing for a padding row); one commit group either way.
  auto stage = [&](int item) {
    const int slot = p.slots[item / p.Hv];
    if (slot >= 0) {
      const auto* src = reinterpret_cast<const unsigned char*>(
          static_cast<const ST*>(p.state) + (static_cast<int64_t>(slot) * p.Hv + item % p.Hv) * slab_elems);
      for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        mma::cp_async16(mma::smem_addr(staged_slab + 16 * c), src + 16 * c, true);
    }
    mma::cp_async_commit();
  };
  int item = blockIdx.x;
  stage(item);  // before the dependency wait: step metadata and state only this op touches
  pdl_start();  // kernels/launch.cuh
  for (; item < n_items; item += gridDim.x) {
    const int r = item / p.Hv, hv = item % p.Hv, slot = p.slots[r];
    const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * Dv;
    const bool owner = active && threadIdx.x % Q == 0;
    mma::cp_async_wait<0>();
    __syncthreads();  // the slab has landed; every thread is done with the previous item's ks, qs
    std::conditional_t<kPairs, uint32_t, float> s[R];  // rows r0.. of column j (f32) or of the pair (bf16)
    const bool live = active && slot >= 0;
    if (live) {
      if constexpr (kPairs) {
        const auto* w = reinterpret_cast<const uint32_t*>(staged_slab) + jl;
#pragma unroll
        for (int i = 0; i < R; ++i) s[i] = w[(r0 + i) * (Dv / 2)];
      } else {
        const auto* f = reinterpret_cast<const float*>(staged_slab) + j;
#pragma unroll
        for (int i = 0; i < R; ++i) s[i] = f[(r0 + i) * Dv];
      }
    } else {
#pragma unroll
      for (int i = 0; i < R; ++i) s[i] = 0;
    }
    __syncthreads();  // the slab is free
    if (item + static_cast<int>(gridDim.x) < n_items) stage(item + gridDim.x);
    if (slot < 0) {  // a padding row (the whole block): zero outputs, no state
      if (owner) {
        dev::store(p.out, p.out_dtype, orow + j, 0.0f);
        if constexpr (kPairs) dev::store(p.out, p.out_dtype, orow + j + 1, 0.0f);
      }
      continue;
    }
    load_qk<DK>(p, r, hv, ks, qs);
    const float decay = expf(p.g[static_cast<int64_t>(r) * p.Hv + hv]);
    const float beta = p.beta[static_cast<int64_t>(r) * p.Hv + hv];
    ST* S = static_cast<ST*>(p.state) + (static_cast<int64_t>(slot) * p.Hv + hv) * slab_elems + (active ? j : 0);
    if constexpr (kPairs) {
      const float v0 = active ? dev::load(p.v, p.qkv_dtype, orow + j) : 0.0f;
      const float v1 = active ? dev::load(p.v, p.qkv_dtype, orow + j + 1) : 0.0f;
      float o0, o1;
      pair::pair_step<DK, Q>(s, ks, qs, decay, beta, v0, v1, o0, o1);
      if (active) {
        auto* W = reinterpret_cast<uint32_t*>(S);
#pragma unroll
        for (int i = 0; i < R; ++i) W[(r0 + i) * (Dv / 2)] = s[i];
      }
      if (owner) {
        dev::store(p.out, p.out_dtype, orow + j, o0);
        dev::store(p.out, p.out_dtype, orow + j + 1, o1);
      }
    } else {
      const float v = active ? dev::load(p.v, p.qkv_dtype, orow + j) : 0.0f;
      const float o = dev::delta_rule_step<DK, Q>(s, ks, qs, decay, beta, v);
      dev::store_column<DK, Q>(s, S, Dv, active);
      if (owner) dev::store(p.out, p.out_dtype, orow + j, o);
    }
  }
  mma::cp_async_wait<0>();  // (no copy is left in flight at exit: the last stage was not issued)
}

// The staged kernel's threads a block (column pairs with a bf16 state) and its dynamic shared memory.
template <int Q, typename ST>
int staged_threads(int Dv) {
  return delta_rule_decode_block(Dv, 1, Q, std::is_same_v<ST, __nv_bfloat16>);
}
template <int DK, typename ST>
size_t staged_smem(int Dv) {
  return static_cast<size_t>(DK) * Dv * sizeof(ST);
}

// The staged kernel's grid: min(rows * Hv, the blocks the device keeps resident), or 0 on an error
// (left for cudaGetLastError). Neither the attribute nor the occupancy query is a stream operation:
// legal while capturing.
template <int DK, int Q, typename ST>
int staged_blocks(const DeltaRuleDecodeParams& p) {
  auto* kernel = delta_rule_decode_staged_kernel<DK, Q, ST>;
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) ||
      dev::allow_dynamic_smem(kernel, staged_smem<DK, ST>(p.Dv)) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, staged_threads<Q, ST>(p.Dv),
                                                    staged_smem<DK, ST>(p.Dv))) {
    return 0;
  }
  return std::max(1, std::min(p.rows * p.Hv, std::max(1, per_sm) * sms));
}

template <int DK, int Q, typename ST>
void launch_staged(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  const int blocks = staged_blocks<DK, Q, ST>(p);
  if (blocks == 0) return;
  launch_kernel(delta_rule_decode_staged_kernel<DK, Q, ST>, dim3(blocks), dim3(staged_threads<Q, ST>(p.Dv)),
                staged_smem<DK, ST>(p.Dv), stream, p);
}

// The same grid for both state dtypes; the block of the column-pair kernel is half as wide. p's
// col_blocks and pair_columns are resolved (delta_rule_decode). Not with one thread a pair (Q = 1):
// ptxas spills it at Dk 64 and 128 (-Xptxas -v: about 4 registers a row, then kilobytes of spill).
template <int DK, int Q, typename ST>
void launch(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  const int cb = p.col_blocks;
  const dim3 grid(p.Hv * cb, p.rows), block(delta_rule_decode_block(p.Dv, cb, Q, false));
  if constexpr (Q == 2 || (Q == 1 && std::is_same_v<ST, float>)) {
    if (p.staged) {
      launch_staged<DK, Q, ST>(p, stream);
      return;
    }
  }
  if constexpr (std::is_same_v<ST, __nv_bfloat16> && Q > 1) {
    if (p.pair_columns) {
      launch_kernel(delta_rule_decode_pair_kernel<DK, Q>, grid, dim3(delta_rule_decode_block(p.Dv, cb, Q, true)), 0,
                    stream, p);
      return;
    }
  }
  if (p.norm_w && cb > 1) {
    launch_kernel_cluster(delta_rule_decode_kernel<DK, Q, 2, ST>, grid, block, 0, stream, static_cast<unsigned>(cb), p);
  } else if (p.norm_w) {
    launch_kernel(delta_rule_decode_kernel<DK, Q, 1, ST>, grid, block, 0, stream, p);
  } else {
    launch_kernel(delta_rule_decode_kernel<DK, Q, 0, ST>, grid, block, 0, stream, p);
  }
}

// Where the staged kernel runs, at split q: its shape fits (delta_rule_decode_staged_fits, as the
// contract's staged arm) and the state is 16-byte aligned (its cp.async copies).
bool staged_applies(const DeltaRuleDecodeParams& p, int q) {
  return delta_rule_decode_staged_fits(p.Dk, p.Dv, q, static_cast<int>(dtype_size(p.state_dtype)),
                                       p.norm_w != nullptr) &&
         reinterpret_cast<uintptr_t>(p.state) % 16 == 0;
}

}  // namespace

bool delta_rule_decode_supports(int Dk, int Dv) { return delta_rule_decode_split(Dk, Dv) != 0; }

int delta_rule_decode_staged_grid(const DeltaRuleDecodeParams& p) {
  const int q = delta_rule_decode_split(p.Dk, p.Dv, p.split);
  if (q == 0 || p.rows < 1 || p.Hv < 1 || !p.staged || !staged_applies(p, q)) return 0;
  int blocks = 0;
  dev::with_delta_rule_tile(p.Dk, q, [&](auto dk, auto qq) {
    dev::with_state_type(p.state_dtype, [&](auto st) {
      constexpr int Q = decltype(qq)::value;
      if constexpr (Q == 2 || (Q == 1 && std::is_same_v<decltype(st), float>)) {
        blocks = staged_blocks<decltype(dk)::value, Q, decltype(st)>(p);
      }
    });
  });
  return blocks;
}

cudaError_t delta_rule_decode(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  LaunchCheck chk("delta_rule.decode");
  chk.require(delta_rule_decode_supports(p.Dk, p.Dv), "no built split for this Dk, Dv (Dk 8..128, Dv <= 256)");
  chk.in_range(p.Hk, 1, INT32_MAX, "Hk").require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.require(p.state_dtype == DType::f32 || p.state_dtype == DType::bf16, "state_dtype must be f32 or bf16");
  if (!chk.ok()) return cudaErrorInvalidValue;
  const int q = delta_rule_decode_split(p.Dk, p.Dv, p.split);
  const bool may_pair = p.pair_columns && reinterpret_cast<uintptr_t>(p.state) % 4 == 0 &&
                        delta_rule_decode_may_pair(q, static_cast<int>(dtype_size(p.state_dtype)), p.norm_w != nullptr);
  const int cb = delta_rule_decode_col_blocks(p.Dv, q, p.col_blocks, may_pair);
  chk.require(q != 0, "split: not a built split for this Dk, Dv (1, 2, 4 or 8; 0 = automatic)");
  chk.require(cb != 0, "col_blocks must be 0, 1, 2 or 4 and divide Dv");
  if (p.norm_w) {
    chk.require(p.Dv == 64 || p.Dv == 128 || p.Dv == kNormMaxDv, "the fused norm needs Dv 64, 128 or 256");
    chk.require(p.out_dtype == DType::bf16, "the fused norm needs a bf16 out");
    chk.not_null(p.norm_z, "norm_z")
        .require(p.norm_w_dtype == DType::bf16 || p.norm_w_dtype == DType::f32, "norm_w_dtype must be bf16 or f32");
    chk.require(p.norm_z_stride == 0 || p.norm_z_stride >= static_cast<int64_t>(p.Hv) * p.Dv,
                "norm_z_stride must be 0 or >= Hv x Dv");
    chk.require(p.norm_eps >= 0.0f, "norm_eps must be >= 0");
  }
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  DeltaRuleDecodeParams r = p;
  r.col_blocks = cb;
  r.pair_columns = may_pair && (p.Dv / cb) % 2 == 0;  // the column-pair kernel runs
  r.staged = p.staged && staged_applies(p, q);
  bool typed = false;
  const bool built = dev::with_delta_rule_tile(p.Dk, q, [&](auto dk, auto qq) {
    typed = dev::with_state_type(
        p.state_dtype, [&](auto st) { launch<decltype(dk)::value, decltype(qq)::value, decltype(st)>(r, stream); });
  });
  chk.require(typed || !built, "state_dtype must be f32 or bf16");
  chk.require(built, "no built tile for this Dk and split");
  if (!built || !typed) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace sg
