// norm_rows_probe.cu: what holds the prefill RMSNorm that reads the residual stream alone (y = (x *
// inv) * (1 + w), bf16 rows of n = 2560 (4B) or 5120 (27B), 32768 rows) below its bytes' floor.
// Kernel forms, each timed alone (time_graph: a graph of 20 launches, the median of 5 replays; each
// launch's 335-671 MB do not fit L2):
//   copy:  the bytes alone (each thread copies 16 bytes a row, grid-stride over the rows): the
//          card's rate for this read-and-write pattern;
//   row1:  the library's one-row kernel (a row a block of n / 8 threads, 16 bytes a thread, the sum
//          through warp butterflies, shared memory and one barrier, then the stores);
//   row2:  two rows a block, both rows' loads before the barrier (the library's kernel since 31d9612);
//   loop:  persistent blocks (2 or 4 an SM) that walk the rows, the next row's load issued before the
//          current row's barrier (double-buffered partials: one barrier a row);
//   lib:   the library's rmsnorm (kernels/rmsnorm.cu) on the same rows (its two-row kernel);
//   half:  a row a block of n / 16 threads, two 16-byte loads a thread (another summation order:
//          not the library's bytes; the largest difference from row1 over its largest value is printed).
// And the GDN gated norm, y = (w * (x * inv)) * silu(z), on the 4B's prefill rows (32768 tokens x 32
// heads of n = 128, z at the in_proj output's token stride of 12352): gcopy (the bytes alone: x and z
// read, y written), g1 (16 lanes a row, 16 rows a 256-thread block: the library's 16-byte kernel),
// g2 (two groups of 16 rows a block, both groups' loads first), glib (the library's gated_rmsnorm).
// row2, loop and lib keep row1's arithmetic, g2 and glib g1's: their outputs must equal those byte for
// byte (checked).
// Usage: norm_rows_probe. Build and run on the GPU machine (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. -o /tmp/norm_rows_probe tools/probes/norm_rows_probe.cu \
//     build/kernels/libsg_kernels.a build/kernels/libsg_kernels_host.a && /tmp/norm_rows_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/device_util.cuh"
#include "kernels/rmsnorm.h"
#include "tools/probes/probe_check.h"

namespace {

constexpr int kRowsTotal = 32768;
constexpr float kEps = 1e-6f;

using sg::dev::pack8;
using sg::dev::unpack8;

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

__device__ __forceinline__ float sumsq8(const float (&v)[8]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(v[i], v[i], s);
  return s;
}

// The row's 8 outputs of this thread from its 8 inputs and the row's sum of squares.
__device__ __forceinline__ uint4 norm8(const float (&v)[8], const float (&w)[8], float ss, int n) {
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + kEps);
  float y[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = (v[i] * inv) * (1.0f + w[i]);
  return pack8(y);
}

__device__ __forceinline__ void load_w(const __nv_bfloat16* w, int i, float (&out)[8]) {
  unpack8(*reinterpret_cast<const uint4*>(w + i), out);
}

__global__ void copy_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int n) {
  const int per_row = n / 8;
  const int64_t total = static_cast<int64_t>(rows) * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    reinterpret_cast<uint4*>(y)[i] = reinterpret_cast<const uint4*>(x)[i];
  }
}

// kRows consecutive rows a block of n / 8 threads.
template <int kRows>
__global__ void __launch_bounds__(1024)
    rows_kernel(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y, int rows, int n) {
  __shared__ float partial[kRows][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  float w[8];
  load_w(wt, 8 * threadIdx.x, w);
  float v[kRows][8], s[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + j;
    uint4 u{};
    if (row < rows) u = *reinterpret_cast<const uint4*>(x + row * n + 8 * threadIdx.x);
    unpack8(u, v[j]);
  }
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    s[j] = warp_sum(sumsq8(v[j]));
    if (lane == 0) partial[j][warp] = s[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + j;
    const float ss = warp_sum(lane < nw ? partial[j][lane] : 0.0f);
    if (row < rows) *reinterpret_cast<uint4*>(y + row * n + 8 * threadIdx.x) = norm8(v[j], w, ss, n);
  }
}

// Persistent blocks of n / 8 threads walking rows blockIdx.x, + gridDim.x, ...: the next row's load
// is issued before this row's barrier; partials double-buffered so that one barrier a row serves.
__global__ void __launch_bounds__(1024)
    loop_kernel(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y, int rows, int n) {
  __shared__ float partial[2][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  float w[8];
  load_w(wt, 8 * threadIdx.x, w);
  int64_t row = blockIdx.x;
  uint4 cur{};
  if (row < rows) cur = *reinterpret_cast<const uint4*>(x + row * n + 8 * threadIdx.x);
  for (int b = 0; row < rows; row += gridDim.x, b ^= 1) {
    const int64_t next = row + gridDim.x;
    uint4 nxt{};
    if (next < rows) nxt = *reinterpret_cast<const uint4*>(x + next * n + 8 * threadIdx.x);
    float v[8];
    unpack8(cur, v);
    const float s = warp_sum(sumsq8(v));
    if (lane == 0) partial[b][warp] = s;
    __syncthreads();
    const float ss = warp_sum(lane < nw ? partial[b][lane] : 0.0f);
    *reinterpret_cast<uint4*>(y + row * n + 8 * threadIdx.x) = norm8(v, w, ss, n);
    cur = nxt;
  }
}

// A row a block of n / 16 threads, each two 16-byte pieces (8 t and 8 t + n / 2).
__global__ void __launch_bounds__(512)
    half_kernel(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y, int rows, int n) {
  __shared__ float partial[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  const int64_t row = blockIdx.x;
  const int i0 = 8 * threadIdx.x, i1 = i0 + n / 2;
  float w0[8], w1[8], v0[8], v1[8];
  load_w(wt, i0, w0);
  load_w(wt, i1, w1);
  unpack8(*reinterpret_cast<const uint4*>(x + row * n + i0), v0);
  unpack8(*reinterpret_cast<const uint4*>(x + row * n + i1), v1);
  float s = sumsq8(v0);
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(v1[i], v1[i], s);
  s = warp_sum(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  const float ss = warp_sum(lane < nw ? partial[lane] : 0.0f);
  *reinterpret_cast<uint4*>(y + row * n + i0) = norm8(v0, w0, ss, n);
  *reinterpret_cast<uint4*>(y + row * n + i1) = norm8(v1, w1, ss, n);
}

constexpr int kGHeads = 32, kGN = 128, kGZStride = 12352;  // the 4B's GDN output rows and in_proj width

__global__ void gated_copy_kernel(const __nv_bfloat16* x, const __nv_bfloat16* z, __nv_bfloat16* y, int rows) {
  const int64_t total = static_cast<int64_t>(rows) * (kGN / 8);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / (kGN / 8), t = row / kGHeads, h = row % kGHeads, part = i % (kGN / 8);
    const uint4 a = reinterpret_cast<const uint4*>(x)[i];
    const uint4 b = *reinterpret_cast<const uint4*>(z + t * kGZStride + h * kGN + 8 * part);
    reinterpret_cast<uint4*>(y)[i] = make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
  }
}

// kGroups groups of 16 rows a 256-thread block, 16 lanes a row (8 elements each).
template <int kGroups>
__global__ void __launch_bounds__(256)
    gated_kernel(const __nv_bfloat16* x, const __nv_bfloat16* z, const float* wt, __nv_bfloat16* y, int rows) {
  constexpr int R = kGN / 8;
  const int part = threadIdx.x % R;
  float w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = wt[8 * part + i];
  uint4 xu[kGroups], zu[kGroups];
  int64_t row[kGroups];
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    row[j] = (static_cast<int64_t>(blockIdx.x) * kGroups + j) * (256 / R) + threadIdx.x / R;
    xu[j] = uint4{};
    zu[j] = uint4{};
    if (row[j] < rows) {
      const int64_t t = row[j] / kGHeads, h = row[j] % kGHeads;
      xu[j] = *reinterpret_cast<const uint4*>(x + row[j] * kGN + 8 * part);
      zu[j] = *reinterpret_cast<const uint4*>(z + t * kGZStride + h * kGN + 8 * part);
    }
  }
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    float v[8], zf[8], o[8];
    unpack8(xu[j], v);
    unpack8(zu[j], zf);
    const float inv = sg::dev::gated_norm_inv(sg::dev::row_sumsq8<R>(v), kGN, kEps);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = sg::dev::gated_norm_value(w[i], v[i], inv, zf[i]);
    if (row[j] < rows) *reinterpret_cast<uint4*>(y + row[j] * kGN + 8 * part) = pack8(o);
  }
}

std::vector<uint16_t> fetch(const __nv_bfloat16* d, size_t n) {
  std::vector<uint16_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

// A form's time: y (elems bf16) poisoned with NaN first, so that a form that writes nothing cannot
// pass the byte check after it; then a graph of 20 launches timed (time_graph).
template <typename F>
float time_form(cudaStream_t st, __nv_bfloat16* y, size_t elems, F launch) {
  CK(cudaMemset(y, 0xff, elems * 2));
  return time_graph(st, 20, 1, [&](int) { launch(); });
}

void print_form(const char* head, const char* name, float ms, double gb, const std::string& note) {
  std::printf("  %s %-5s %8.1f us  %7.1f GB/s  %s\n", head, name, 1e3 * ms, gb / (ms * 1e-3), note.c_str());
}

std::string same(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref, const char* ref_name) {
  return (got == ref ? "bytes == " : "BYTES DIFFER from ") + std::string(ref_name);
}

int main() {
  cudaDeviceProp prop{};
  const int sms = probe_device_props(prop);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  std::printf("%s, %d SMs; %d rows, y = (x * inv) * (1 + w), bf16\n", prop.name, sms, kRowsTotal);
  for (int n : {2560, 5120}) {
    const size_t elems = static_cast<size_t>(kRowsTotal) * n;
    const __nv_bfloat16* x = upload(probe_random_bf16(elems, 4.0f, 7 + n));
    const __nv_bfloat16* w = upload(probe_random_bf16(n, 0.5f, 8 + n));
    __nv_bfloat16* y = upload(std::vector<__nv_bfloat16>(elems));
    const double gb = 2.0 * elems * 2 / 1e9;  // x read, y written
    const int threads = n / 8;
    char head[16];
    std::snprintf(head, sizeof head, "n %d ", n);
    auto form = [&](auto launch) { return time_form(st, y, elems, launch); };
    print_form(head, "copy", form([&] { copy_kernel<<<4 * sms, 512, 0, st>>>(x, y, kRowsTotal, n); }), gb, "");
    print_form(head, "row1", form([&] { rows_kernel<1><<<kRowsTotal, threads, 0, st>>>(x, w, y, kRowsTotal, n); }), gb,
               "");
    const auto ref = fetch(y, elems);
    float ms = form([&] { rows_kernel<2><<<(kRowsTotal + 1) / 2, threads, 0, st>>>(x, w, y, kRowsTotal, n); });
    print_form(head, "row2", ms, gb, same(fetch(y, elems), ref, "row1"));
    for (int per_sm : {2, 4}) {
      ms = form([&] { loop_kernel<<<per_sm * sms, threads, 0, st>>>(x, w, y, kRowsTotal, n); });
      print_form(head, per_sm == 2 ? "loop2" : "loop4", ms, gb, same(fetch(y, elems), ref, "row1"));
    }
    sg::RmsNormParams lp;
    lp.x = x;
    lp.x_dtype = sg::DType::bf16;
    lp.w = w;
    lp.w_dtype = sg::DType::bf16;
    lp.y = y;
    lp.y_dtype = sg::DType::bf16;
    lp.T = kRowsTotal;
    lp.n = n;
    lp.eps = kEps;
    ms = form([&] { CK(sg::rmsnorm(lp, st)); });
    print_form(head, "lib", ms, gb, same(fetch(y, elems), ref, "row1"));
    ms = form([&] { half_kernel<<<kRowsTotal, n / 16, 0, st>>>(x, w, y, kRowsTotal, n); });
    print_form(head, "half", ms, gb,
               "another sum order: largest difference from row1 " +
                   std::to_string(max_rel_diff_bf16(fetch(y, elems), ref)) + " of the largest value");
  }
  {  // the gated norm
    const int rows = kRowsTotal * kGHeads;
    const size_t elems = static_cast<size_t>(rows) * kGN, zelems = static_cast<size_t>(kRowsTotal) * kGZStride;
    std::vector<float> hw(kGN);
    uint64_t seed = 13;
    for (auto& e : hw) e = 1.0f + 0.5f * probe_rnd(seed);
    const __nv_bfloat16* x = upload(probe_random_bf16(elems, 2.0f, 11));
    const __nv_bfloat16* z = upload(probe_random_bf16(zelems, 4.0f, 12));
    const float* w = upload(hw);
    __nv_bfloat16* y = upload(std::vector<__nv_bfloat16>(elems));
    const double gb = 3.0 * elems * 2 / 1e9;  // x and z read, y written
    auto form = [&](auto launch) { return time_form(st, y, elems, launch); };
    print_form("gated", "gcopy", form([&] { gated_copy_kernel<<<4 * sms, 512, 0, st>>>(x, z, y, rows); }), gb, "");
    print_form("gated", "g1", form([&] { gated_kernel<1><<<rows / 16, 256, 0, st>>>(x, z, w, y, rows); }), gb, "");
    const auto ref = fetch(y, elems);
    float ms = form([&] { gated_kernel<2><<<rows / 32, 256, 0, st>>>(x, z, w, y, rows); });
    print_form("gated", "g2", ms, gb, same(fetch(y, elems), ref, "g1"));
    sg::GatedRmsNormParams gp;
    gp.x = x;
    gp.z = z;
    gp.z_token_stride = kGZStride;
    gp.w = w;
    gp.y = y;
    gp.T = kRowsTotal;
    gp.heads = kGHeads;
    gp.n = kGN;
    gp.eps = kEps;
    ms = form([&] { CK(sg::gated_rmsnorm(gp, st)); });
    print_form("gated", "glib", ms, gb, same(fetch(y, elems), ref, "g1"));
  }
  return 0;
}
