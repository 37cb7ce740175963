// wgmma_forms_probe.cu: every wgmma form and shared-memory descriptor that the delta-rule prefill
// (kernels/delta_rule_prefill_wgmma.cu) issues, each on its own against an exact integer matmul,
// so a layout or descriptor mistake shows by name instead of as a wrong state. Operands are small
// integers (exact in bf16, the sums exact in f32), so every form must match to the bit.
// Forms (tiles in the unswizzled core-matrix layout, chunk (r, c) of a tile of C columns at
// (r / 8) C 16 + c 128 + (r % 8) 16, as the kernel stores them):
//   qk    m64n64k16 SS, A and B K-major [64 x 128] tiles              P = Q K^T
//   kk32  m64n32k16 SS, B = rows 32 .. 63 of a K-major tile           A's right half
//   qs    m64n64k16 SS, A K-major, B MN-major [128 x 64] tile         O = Q S_w
//   ktv   m64n64k16 SS, A MN-major (columns 64 .. 127 of a [64 x 128] tile), B MN-major [64 x 64]
//                                                                     S_w += K^T LV'
//   tx    m64n64k16 RS, A from registers, B MN-major [64 x 64]        V' = T X, o += P V'
// Build and run on the GPU machine (repository root):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/wgmma_forms_probe \
//     tools/probes/wgmma_forms_probe.cu && /tmp/wgmma_forms_probe
// Prints one line a form and "all forms exact" (exit 0) or the first mismatches (exit 1).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"
#include "tools/probes/probe_check.h"

namespace {

enum Form { kQK, kKK32, kQS, kKTV, kTX, kForms };
const char* const kNames[kForms] = {"qk", "kk32", "qs", "ktv", "tx"};

template <int C>
__device__ uint32_t at(int r, int c) {
  return static_cast<uint32_t>((r >> 3) * C * 16 + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2);
}

// a: [64 x 128] row-major (the K-major tiles' source, or the MN-major [64 x 128] of ktv);
// b: [128 x 64] or [64 x 64] or [64 x 128] row-major as the form needs. d: [64 x 64] row-major.
__global__ void forms_kernel(int form, const float* a, const float* b, float* d) {
  __shared__ __align__(128) unsigned char sa[64 * 128 * 2];
  __shared__ __align__(128) unsigned char sb[128 * 64 * 2];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  auto put = [](unsigned char* s, uint32_t o, float x) {
    *reinterpret_cast<__nv_bfloat16*>(s + o) = __float2bfloat16_rn(x);
  };
  for (int i = tid; i < 64 * 128; i += 128) put(sa, at<128>(i / 128, i % 128), a[i]);
  if (form == kQK || form == kKK32) {
    for (int i = tid; i < 64 * 128; i += 128) put(sb, at<128>(i / 128, i % 128), b[i]);
  } else if (form == kQS) {
    for (int i = tid; i < 128 * 64; i += 128) put(sb, at<64>(i / 64, i % 64), b[i]);
  } else {
    for (int i = tid; i < 64 * 64; i += 128) put(sb, at<64>(i / 64, i % 64), b[i]);
  }
  sg::wgmma::fence_proxy_async();
  __syncthreads();
  const uint32_t A = sg::mma::smem_addr(sa), B = sg::mma::smem_addr(sb);
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  int ncols = 64;
  uint32_t frag[4][4];
  if (form == kTX) {  // the m16n8k16 A fragments of rows 16 warp .. from a [64 x 64]
    for (int kk = 0; kk < 4; ++kk) {
      for (int f = 0; f < 4; ++f) {
        const int r = 16 * warp + g + 8 * (f & 1), c = 16 * kk + 2 * t + 8 * (f >> 1);
        const __nv_bfloat162 v = __floats2bfloat162_rn(a[r * 128 + c], a[r * 128 + c + 1]);
        frag[kk][f] = sg::mma::as_u32(v);
      }
    }
  }
  sg::wgmma::fence_operands<32>(acc);
  sg::wgmma::fence();
  using namespace sg::wgmma;
  switch (form) {
    case kQK:
      for (int kk = 0; kk < 8; ++kk) m64n64k16_ss(acc, desc(A + 256 * kk, 128, 2048), desc(B + 256 * kk, 128, 2048), 1);
      break;
    case kKK32:
      ncols = 32;
      for (int kk = 0; kk < 8; ++kk) {
        m64n32k16_ss(acc, desc(A + 256 * kk, 128, 2048), desc(B + 4 * 2048 + 256 * kk, 128, 2048), 1);
      }
      break;
    case kQS:
      for (int kk = 0; kk < 8; ++kk) {
        m64n64k16_ss_t<0, 1>(acc, desc(A + 256 * kk, 128, 2048), desc(B + 2048 * kk, 1024, 128), 1);
      }
      break;
    case kKTV:
      for (int kk = 0; kk < 4; ++kk) {
        m64n64k16_ss_t<1, 1>(acc, desc(A + 4096 * kk + 1024, 2048, 128), desc(B + 2048 * kk, 1024, 128), 1);
      }
      break;
    case kTX:
      for (int kk = 0; kk < 4; ++kk) m64n64k16_rs_tb(acc, frag[kk], desc(B + 2048 * kk, 1024, 128));
      break;
    default: break;
  }
  commit();
  wait<0>();
  fence_operands<32>(acc);
  for (int j = 0; j < ncols / 8; ++j) {
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * warp + g + 8 * (q >> 1), c = 8 * j + 2 * t + (q & 1);
      d[r * 64 + c] = acc[4 * j + q];
    }
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  probe_device_props(prop);
  std::printf("device %s (cc %d.%d)\n", prop.name, prop.major, prop.minor);
  uint32_t s = 12345;
  auto rnd = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>((s >> 24) % 9) - 4);  // -4 .. 4
  };
  std::vector<float> a(64 * 128), b(128 * 128);
  for (float& x : a) x = rnd();
  for (float& x : b) x = rnd();
  float *da = upload(a), *db = upload(b), *dd = nullptr;
  CK(cudaMalloc(&dd, 64 * 64 * sizeof(float)));
  bool all = true;
  for (int form = 0; form < kForms; ++form) {
    CK(cudaMemset(dd, 0xff, 64 * 64 * sizeof(float)));
    forms_kernel<<<1, 128>>>(form, da, db, dd);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> d(64 * 64);
    CK(cudaMemcpy(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const int ncols = form == kKK32 ? 32 : 64;
    int bad = 0;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < ncols; ++c) {
        double want = 0.0;
        switch (form) {
          case kQK:
            for (int k = 0; k < 128; ++k) want += a[r * 128 + k] * b[c * 128 + k];
            break;
          case kKK32:
            for (int k = 0; k < 128; ++k) want += a[r * 128 + k] * b[(32 + c) * 128 + k];
            break;
          case kQS:
            for (int k = 0; k < 128; ++k) want += a[r * 128 + k] * b[k * 64 + c];
            break;
          case kKTV:  // A[r][k] = a[k][64 + r] (columns 64 .. 127 of the tile, read transposed)
            for (int k = 0; k < 64; ++k) want += a[k * 128 + 64 + r] * b[k * 64 + c];
            break;
          case kTX:
            for (int k = 0; k < 64; ++k) want += a[r * 128 + k] * b[k * 64 + c];
            break;
          default: break;
        }
        const float got = d[r * 64 + c];
        if (got != static_cast<float>(want)) {
          if (bad < 4) std::printf("  %s: (%d, %d) got %g want %g\n", kNames[form], r, c, got, want);
          ++bad;
        }
      }
    }
    std::printf("%-5s %s (%d of %d values differ)\n", kNames[form], bad ? "WRONG" : "exact", bad, 64 * ncols);
    all = all && bad == 0;
  }
  std::printf(all ? "all forms exact\n" : "some forms wrong\n");
  return all ? 0 : 1;
}
