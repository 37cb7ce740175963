// delta_prefill_probe.cu: the tensor-core delta-rule prefill (delta_rule_mma_kernel, launched by
// sg::delta_rule_prefill_mma) alone, on the 4B preset's prefill shape by default: 32 sequences x
// 1024 tokens packed varlen (cu_seqlens), Hk 16, Hv 32, Dk = Dv = 128, bf16 q, k, v, f32 state,
// bf16 output (as models/model_step_gdn.cpp calls it for the bf16 model: out_dtype = the
// activations', state_dtype = the SSM state's), no history. Outside any graph: times REPS
// back-to-back launches with CUDA events after two warm-up launches and prints the time a launch,
// the useful TFLOP/s of the chunked WY form and the TFLOP/s the kernel issues to the tensor cores
// (its split bf16 passes included), each as a fraction of the card's 790 TFLOP/s, the time a chunk
// of one block takes, and a checksum of one launch's output and final state from the same start
// (an edited copy that keeps the arithmetic prints the same hash; one that removes work does not).
// The kernel is compiled into the probe from SG_PROBE_KERNEL (default its library source), so a
// copy of that source edited for a measurement (tools/probes/delta_prefill_phases.sh: one phase of
// the per-chunk loop removed) is timed the same way; SG_PROBE_LAUNCH names its launcher (default
// sg::delta_rule_prefill_mma, called as (params, stream, dv_tile)).
// Inputs as tests/gpu/delta_rule_prefill_fixture.h makes them (the model's ranges), generated on
// the device from a fixed seed: q, k rows of unit L2 norm (as postconv makes them; the kernel
// scales q by 1/sqrt(Dk)), v uniform in [-1, 1), g (log decay) uniform in [-1, 0) with every 37th
// value -12 (fast decay), beta uniform in [0, 1), with history an initial state uniform in
// [-0.5, 0.5).
// Usage: delta_prefill_probe [SEQS [LEN [REPS]]] [--history] [--hk N] [--hv N] [--dk 32|64|128]
//          [--dv N] [--qkv bf16|f32] [--out bf16|f32] [--state f32|bf16] [--tile 0|32|64|128]
// Build and run on the GPU machine (repository root; -fmad=false as the library builds its kernels,
// so the timed code and the checksum are the library's):
//   nvcc -O3 -std=c++20 -fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -I. \
//     -o /tmp/delta_prefill_probe tools/probes/delta_prefill_probe.cu \
//     kernels/launch_check.cpp kernels/launch_policy.cpp && /tmp/delta_prefill_probe
// (tools/probes/delta_prefill_phases.sh builds it once per edited copy and prints the phase table.)
// With -DSG_PROBE_WGMMA it times the warpgroup form instead (kernels/delta_rule_prefill_wgmma.cu,
// sg::delta_rule_prefill_wgmma: Dk = Dv = 128, bf16 q/k/v, one Dv tile, 384 threads; --tile must be
// 0 or 128), and counts what that form issues; with -DSG_PROBE_TRACE as well it prints the last
// launch's timeline of one block, chunk by chunk, and the mean length of each phase (cycles).
// With -DSG_PROBE_WGMMA_T it times the two-kernel form (kernels/delta_rule_prefill_wgmma_t.cu: every
// chunk's T, then the recurrence with the state transposed; the same shapes as the warpgroup form)
// and, after its checksum, runs the one-kernel warpgroup form from the same start and prints the
// largest difference of the outputs and of the state, normalised by the largest magnitude, and past
// 1e-5 where they part (tools/cli/compare.h: by chunk, row, head and column, for the first
// and the last sequence) (link kernels/delta_rule_prefill_wgmma.cu as well):
//   nvcc ... -DSG_PROBE_WGMMA_T -o /tmp/delta_prefill_probe_t tools/probes/delta_prefill_probe.cu \
//     kernels/delta_rule_prefill_wgmma.cu kernels/launch_check.cpp kernels/launch_policy.cpp
#ifdef SG_PROBE_WGMMA_T
#ifndef SG_PROBE_KERNEL
#define SG_PROBE_KERNEL "kernels/delta_rule_prefill_wgmma_t.cu"
#endif
#define SG_PROBE_WARPGROUP 1
#elif defined(SG_PROBE_WGMMA)
#define SG_PROBE_WARPGROUP 1
#ifndef SG_PROBE_KERNEL
#define SG_PROBE_KERNEL "kernels/delta_rule_prefill_wgmma.cu"
#endif
#else
#ifndef SG_PROBE_KERNEL
#define SG_PROBE_KERNEL "kernels/delta_rule_prefill_mma.cu"
#endif
#ifndef SG_PROBE_LAUNCH
#define SG_PROBE_LAUNCH sg::delta_rule_prefill_mma
#endif
#endif
#ifdef SG_PROBE_TRACE
// -DSG_PROBE_TRACE (with -DSG_PROBE_WGMMA): the kernel's timeline points (SG_DELTA_TRACE in
// kernels/delta_rule_prefill_wgmma.cu) record the SM clock in block (hv 7, sequence 9) of each
// launch, a warpgroup leader each: points 0-4 warpgroup 2's (the chunk's T), 5-11 warpgroup 0's
// (a shape without that block prints no timeline).
__device__ long long g_trace[64][12];
#define SG_DELTA_TRACE(point, chunk)                                                                      \
  do {                                                                                                    \
    if ((threadIdx.x == 0 || threadIdx.x == 256) && blockIdx.x == 7 && blockIdx.y == 9 && (chunk) < 64) { \
      g_trace[chunk][point] = clock64();                                                                  \
    }                                                                                                     \
  } while (0)
#endif
#include SG_PROBE_KERNEL
#ifndef SG_PROBE_BLOCKS_PER_HEAD
#define SG_PROBE_BLOCKS_PER_HEAD 1
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/probes/delta_probe_inputs.cuh"
#include "tools/probes/probe_check.h"
#ifdef SG_PROBE_WGMMA_T
#include "tools/cli/compare.h"
#endif

namespace sg {

// The launcher's shared checks live in kernels/delta_rule_prefill.cu beside the sequential scan,
// whose contracts need fmt; this copy of them lets the probe link with launch_check.cpp and
// launch_policy.cpp alone (do not also link delta_rule_prefill.cu: the symbol would be defined twice).
void check_delta_rule_prefill_params(LaunchCheck& chk, const DeltaRulePrefillParams& p) {
  chk.in_range(p.Hk, 1, INT32_MAX, "Hk").in_range(p.Hv, 1, INT32_MAX, "Hv");
  chk.require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.in_range(p.max_seqs, 0, 65535, "max_seqs");  // kMaxGridYZ (contracts.h)
  chk.not_null(p.q, "q").not_null(p.k, "k").not_null(p.v, "v").not_null(p.g, "g").not_null(p.beta, "beta");
  chk.not_null(p.cu_seqlens, "cu_seqlens").not_null(p.slots, "slots").not_null(p.has_history, "has_history");
  chk.not_null(p.n_seqs, "n_seqs").not_null(p.state, "state").not_null(p.out, "out");
  chk.require((p.qkv_dtype == DType::f32 || p.qkv_dtype == DType::bf16) &&
                  (p.out_dtype == DType::f32 || p.out_dtype == DType::bf16),
              "qkv_dtype and out_dtype must be bf16 or f32");
  chk.require(p.state_dtype == DType::f32 || p.state_dtype == DType::bf16, "state_dtype must be f32 or bf16");
}

}  // namespace sg

namespace {

using probe_inputs::fill_uniform;
using probe_inputs::fill_unit_rows;
using sg::DType;

void* device_alloc(size_t bytes) {
  void* d = nullptr;
  CK(cudaMalloc(&d, bytes));
  return d;
}

void uniform_values(void* out, DType t, int64_t n, uint64_t seed, float lo, float hi, int spike = 0,
                    float spike_value = 0.0f) {
  fill_uniform<<<1024, 256>>>(out, t, n, seed, lo, hi, spike, spike_value);
  CK(cudaGetLastError());
}

std::vector<uint8_t> download(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  CK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

// FNV-1a over 8-byte words (then the tail bytes): equal bytes, equal hashes.
uint64_t hash_bytes(const std::vector<uint8_t>& b, uint64_t h = 1469598103934665603ull) {
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, &b[i], 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < b.size(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The f32 or bf16 value at byte i of a downloaded buffer.
float value_at(const std::vector<uint8_t>& b, size_t i, DType t) {
  float x;
  if (t == DType::bf16) {
    uint16_t u;
    std::memcpy(&u, &b[i], 2);
    const uint32_t w = uint32_t{u} << 16;
    std::memcpy(&x, &w, 4);
  } else {
    std::memcpy(&x, &b[i], 4);
  }
  return x;
}

// Sum and sum of magnitudes of a downloaded f32 or bf16 buffer.
void sums(const std::vector<uint8_t>& b, DType t, double& sum, double& asum) {
  sum = asum = 0.0;
  const size_t es = sg::dtype_size(t);
  for (size_t i = 0; i + es <= b.size(); i += es) {
    const float x = value_at(b, i, t);
    sum += x;
    asum += std::fabs(x);
  }
}

// FLOPs of one launch (2 a multiply-add), summed over every sequence's chunks (L tokens, 1..64) and
// v-heads, Dk = DK, Dv = DV.
// Useful: the chunked WY form's matrix products, causal ones counted on their triangle:
//   P = q K^T  (c <= r)      2 DK L(L+1)/2      A = k K^T  (c < r)     2 DK L(L-1)/2
//   O = q S, X = k S         2 (2L) DK DV       V' = T X   (c <= r)    2 DV L(L+1)/2
//   o += P V'  (c <= r)      2 DV L(L+1)/2      S += K^T (EL V')       2 DK L DV
// i.e. 2 DK L^2 + 6 L DK DV + 2 DV L(L+1): 8,404,992 a full 64-token chunk and head at
// Dk = Dv = 128 (a first chunk without history multiplies a zero state, counted all the same);
// T = (I + A)^-1 (about L^3 / 3 on the CUDA cores) and the elementwise gates are not counted.
// Issued: what delta_rule_mma_kernel hands the tensor cores, mma.sync m16n8k16 (4096 FLOPs each)
// per chunk and Dv tile of BV columns (whole tiles, padded rows and the triangles' diagonal tiles
// included), with the products of an operand split into a high and a low bf16 part done as
// lo*hi + hi*lo + hi*hi (3 mma; 2 when one operand is exactly bf16: q, k from bf16 inputs):
//   P1a  P, A: 40 tiles 16 x 8 x DK/16 k steps          x 1 (bf16 q, k)   or 3 (f32)
//   P1b  [q; k] S: 8 x BV/8 tiles x DK/16 k steps        x 2 (S split)     or 3
//   P3   T X: 10 (row, key) tile pairs x BV/8 x 1 step   x 3
//   P4   P V': the same                                  x 3
//   P4   K^T (EL V'): DK/16 x BV/8 tiles x ceil(L/16)    x 2 (V' split)    or 3
// At Dk = Dv = 128 with bf16 inputs, 4352 mma (17.8 MFLOP) a chunk and head, of which 2176 (one
// pass each) would be the dense tile work: the split passes double the tensor-core work.
struct Flops {
  double useful = 0, issued = 0, one_pass = 0;
};
// The timed form's shapes, tile, threads and shared memory.
#ifdef SG_PROBE_WARPGROUP
bool form_supports(int Dk, int Dv, DType qkv, int tile) {
  return sg::delta_rule_prefill_wgmma_supports(Dk, Dv, qkv) && (tile == 0 || tile == 128);
}
int form_tile(int) { return 128; }
int form_threads(int) { return sg::kThreads; }
#ifdef SG_PROBE_WGMMA_T
size_t form_smem(int, int, DType) { return sg::delta_rule_prefill_wgmma_t_smem(); }
#else
size_t form_smem(int, int, DType) { return sg::delta_rule_prefill_wgmma_smem(); }
#endif
// What the warpgroup forms issue a chunk and head, in m64n64k16 instructions (2 x 64 x 64 x 16
// FLOPs each; both warpgroups, whole tiles): P 2 x 8, A 2 x 8 halves (8), O and X 2 x 2 x 2 x 8 (S
// split), V' = T X and P V' 2 x 2 x 3 x 4, K^T (EL V') 2 x 2 x 2 x 4 (V' split): 168; one pass of
// each product would be 104. The two-kernel form issues the same products, P once (its T kernel
// computes A and P): 160.
void form_issued(Flops& f) {
#ifdef SG_PROBE_WGMMA_T
  f.issued += 160.0 * 131072.0;
  f.one_pass += 96.0 * 131072.0;
#else
  f.issued += 168.0 * 131072.0;
  f.one_pass += 104.0 * 131072.0;
#endif
}
#else
bool form_supports(int Dk, int Dv, DType, int tile) {
  return sg::delta_rule_prefill_mma_supports(Dk, Dv) && (tile == 0 || tile == 32 || tile == 64 || tile == 128);
}
int form_tile(int Dv) { return sg::delta_rule_prefill_mma_tile(Dv); }
int form_threads(int BV) { return 4 * BV; }
size_t form_smem(int Dk, int BV, DType qkv) { return sg::delta_rule_prefill_mma_smem(Dk, BV, qkv); }
#endif

Flops count_flops(int seqs, int len, int Hv, int DK, int DV, int BV, bool two) {
  Flops f;
  const double tiles = (DV + BV - 1) / BV;
  for (int c0 = 0; c0 < len; c0 += 64) {
    const double L = len - c0 < 64 ? len - c0 : 64;
    f.useful += 2.0 * DK * L * L + 6.0 * L * DK * DV + 2.0 * DV * L * (L + 1);
#ifdef SG_PROBE_WARPGROUP
    form_issued(f);  // one Dv tile, whole 64-token tiles whatever L
    (void)tiles;
#else
    const double p1a = 40.0 * (DK / 16), p1b = 8.0 * (BV / 8) * (DK / 16), p34 = 2 * 10.0 * (BV / 8),
                 st = (DK / 16) * (BV / 8) * std::ceil(L / 16);
    f.issued += tiles * (p1a * (two ? 3 : 1) + p1b * (two ? 3 : 2) + p34 * 3 + st * (two ? 3 : 2)) * 4096.0;
    f.one_pass += tiles * (p1a + p1b + p34 + st) * 4096.0;
#endif
  }
  const double heads = double(seqs) * Hv;
  f.useful *= heads, f.issued *= heads, f.one_pass *= heads;
  return f;
}

const char* name(DType t) { return t == DType::bf16 ? "bf16" : "f32"; }

#ifdef SG_PROBE_TRACE
// The timeline of the last launch's traced block: every point's clock (thousands of cycles after
// chunk 0's first state point) a chunk, then the mean length of each phase over the middle chunks.
// A point after a barrier may be read before the barrier releases its warp, so a wait can show in
// the phase after it.
void print_trace(int chunks, int seqs, int Hv) {
  if (seqs <= 9 || Hv <= 7) {
    std::printf("timeline: no block (hv 7, sequence 9) in this shape\n");
    return;
  }
  constexpr int kPoints = 12;
  long long t[64][kPoints];
  CK(cudaMemcpyFromSymbol(t, g_trace, sizeof(t)));
  const int n = std::min(chunks, 64);
  const long long t0 = t[0][5];
  std::printf("timeline (kcycles after chunk 0's point 5), block (7, 9):\n chunk");
  for (int k = 0; k < kPoints; ++k) std::printf(" %7d", k);
  std::printf("\n");
  for (int c = 0; c < n; ++c) {
    std::printf(" %5d", c);
    for (int k = 0; k < kPoints; ++k) std::printf(" %7.2f", (t[c][k] - t0) / 1e3);
    std::printf("\n");
  }
  struct Phase {
    const char* name;
    int a, b;
  };
  const Phase ph[] = {{"T: free buffer, k tile and gates", 0, 1},
                      {"T: A = K K^T", 1, 2},
                      {"T: diagonal blocks and their merge", 2, 3},
                      {"T: off-diagonal, T's parts", 3, 4},
                      {"T: the chunk (0 -> 4)", 0, 4},
                      {"state: ready, copies, P1 products", 5, 7},
                      {"state: O, X epilogue and barrier", 7, 8},
                      {"state: P3 (V' = T X) and epilogue", 8, 9},
                      {"state: P4 products", 9, 10},
                      {"state: stores and put_state", 10, 11},
                      {"state: the chunk (5 -> 11)", 5, 11}};
  const int lo = std::min(2, n - 1), hi = std::max(lo + 1, n - 2);
  std::printf("phases, mean over chunks %d .. %d (cycles):\n", lo, hi - 1);
  for (const Phase& f : ph) {
    double sum = 0;
    for (int c = lo; c < hi; ++c) sum += double(t[c][f.b] - t[c][f.a]);
    std::printf("  %-36s %8.0f\n", f.name, sum / (hi - lo));
  }
  const double period = double(t[hi - 1][11] - t[lo][11]) / std::max(1, hi - 1 - lo);
  std::printf("  %-36s %8.0f\n", "chunk period (11 -> 11)", period);
}
#endif

#ifdef SG_PROBE_WGMMA_T
struct Workspace {  // the two-kernel form's chunk records, for the probe's one shape (set up in main)
  void* data = nullptr;
  size_t bytes = 0;
  int tokens = 0;
};
Workspace g_ws;

// A downloaded f32 or bf16 buffer as f32 values.
std::vector<float> values_of(const std::vector<uint8_t>& b, DType t) {
  const size_t es = sg::dtype_size(t);
  std::vector<float> x(b.size() / es);
  for (size_t i = 0; i < x.size(); ++i) x[i] = value_at(b, i * es, t);
  return x;
}
#endif

// One launch; a refused one prints the launcher's reason and ends the probe.
void launch_once(const sg::DeltaRulePrefillParams& p, int tile) {
#ifdef SG_PROBE_WGMMA_T
  (void)tile;  // form_supports allowed 0 or 128 only
  const cudaError_t err = sg::delta_rule_prefill_wgmma_t(p, g_ws.data, g_ws.bytes, g_ws.tokens, nullptr);
#elif defined(SG_PROBE_WGMMA)
  (void)tile;  // form_supports allowed 0 or 128 only: the form's one tile
  const cudaError_t err = sg::delta_rule_prefill_wgmma(p, nullptr);
#else
  const cudaError_t err = SG_PROBE_LAUNCH(p, nullptr, tile);
#endif
  if (err != cudaSuccess) {
    std::fprintf(stderr, "launch failed (%s): %s\n", cudaGetErrorString(err), sg::take_launch_refusal().c_str());
    std::exit(1);
  }
}

bool parse_dtype(const char* s, DType& t) {
  if (std::strcmp(s, "bf16") == 0) return t = DType::bf16, true;
  if (std::strcmp(s, "f32") == 0) return t = DType::f32, true;
  return false;
}

int usage() {
  std::fprintf(stderr,
               "usage: delta_prefill_probe [SEQS [LEN [REPS]]] [--history] [--hk N] [--hv N] [--dk 32|64|128] "
               "[--dv N] [--qkv bf16|f32] [--out bf16|f32] [--state f32|bf16] [--tile 0|32|64|128]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int seqs = 32, len = 1024, reps = 20, Hk = 16, Hv = 32, Dk = 128, Dv = 128, tile = 0;
  bool hist = false;
  DType qkv = DType::bf16, out_t = DType::bf16, state_t = DType::f32;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--history") {
      hist = true;
    } else if (a == "--hk" && has_value) {
      Hk = std::atoi(argv[++i]);
    } else if (a == "--hv" && has_value) {
      Hv = std::atoi(argv[++i]);
    } else if (a == "--dk" && has_value) {
      Dk = std::atoi(argv[++i]);
    } else if (a == "--dv" && has_value) {
      Dv = std::atoi(argv[++i]);
    } else if (a == "--tile" && has_value) {
      tile = std::atoi(argv[++i]);
    } else if (a == "--qkv" && has_value) {
      if (!parse_dtype(argv[++i], qkv)) return usage();
    } else if (a == "--out" && has_value) {
      if (!parse_dtype(argv[++i], out_t)) return usage();
    } else if (a == "--state" && has_value) {
      if (!parse_dtype(argv[++i], state_t)) return usage();
    } else if (!a.empty() && a[0] != '-' && positional < 3) {
      (positional == 0 ? seqs : positional == 1 ? len : reps) = std::atoi(a.c_str());
      ++positional;
    } else {
      return usage();
    }
  }
  if (seqs < 1 || seqs > 65535 || len < 1 || reps < 1 || int64_t{seqs} * len > (1 << 24) || Hk < 1 || Hv < 1 ||
      Hv % Hk != 0 || !form_supports(Dk, Dv, qkv, tile)) {
    return usage();
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "delta_prefill_probe: no CUDA device\n");
    return 1;
  }
  const int T = seqs * len, BV = tile != 0 ? tile : form_tile(Dv);
  const size_t qn = size_t(T) * Hk * Dk, vn = size_t(T) * Hv * Dv, gn = size_t(T) * Hv,
               sn = size_t(seqs) * Hv * Dk * Dv;
  const size_t qkv_es = sg::dtype_size(qkv), out_bytes = vn * sg::dtype_size(out_t),
               state_bytes = sn * sg::dtype_size(state_t);

  std::vector<int32_t> cu(seqs + 1), slots(seqs);
  for (int s = 0; s <= seqs; ++s) cu[s] = s * len;
  for (int s = 0; s < seqs; ++s) slots[s] = s;
  sg::DeltaRulePrefillParams p;
  void* q = device_alloc(qn * qkv_es);
  void* k = device_alloc(qn * qkv_es);
  void* v = device_alloc(vn * qkv_es);
  float* g = static_cast<float*>(device_alloc(gn * 4));
  float* beta = static_cast<float*>(device_alloc(gn * 4));
  void* state = device_alloc(state_bytes);
  void* state0 = device_alloc(state_bytes);  // the initial state, restored before the checksum launch
  void* out = device_alloc(out_bytes);
  fill_unit_rows<<<1024, 256>>>(q, qkv, int64_t(T) * Hk, Dk, 1);
  CK(cudaGetLastError());
  fill_unit_rows<<<1024, 256>>>(k, qkv, int64_t(T) * Hk, Dk, 2);
  CK(cudaGetLastError());
  uniform_values(v, qkv, int64_t(vn), 3, -1.0f, 1.0f);
  uniform_values(g, DType::f32, int64_t(gn), 4, -1.0f, 0.0f, 37, -12.0f);
  uniform_values(beta, DType::f32, int64_t(gn), 5, 0.0f, 1.0f);
  uniform_values(state0, state_t, int64_t(sn), 6, -0.5f, 0.5f);
  CK(cudaMemcpy(state, state0, state_bytes, cudaMemcpyDeviceToDevice));
  CK(cudaMemset(out, 0, out_bytes));
  p.q = q, p.k = k, p.v = v, p.qkv_dtype = qkv, p.g = g, p.beta = beta;
  p.cu_seqlens = upload(cu);
  p.slots = upload(slots);
  p.has_history = upload(std::vector<uint8_t>(seqs, hist ? 1 : 0));
  p.n_seqs = upload(std::vector<int32_t>{seqs});
  p.state = state, p.state_dtype = state_t, p.out = out, p.out_dtype = out_t;
  p.max_seqs = seqs, p.Hk = Hk, p.Hv = Hv, p.Dk = Dk, p.Dv = Dv;
#ifdef SG_PROBE_WGMMA_T
  g_ws.tokens = T;
  g_ws.bytes = sg::delta_rule_prefill_wgmma_t_workspace(T, seqs, Hv);
  g_ws.data = device_alloc(g_ws.bytes);
#endif
  CK(cudaDeviceSynchronize());

  // Timed: REPS launches back to back after two warm-up launches (the shared-memory attribute, the
  // clocks). Each launch is identical without history; with history each one continues from the
  // state the previous one left (the same work).
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) launch_once(p, tile);
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) launch_once(p, tile);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float total = 0;
  CK(cudaEventElapsedTime(&total, e0, e1));
  const double ms = total / reps;
#ifdef SG_PROBE_WGMMA_T
  // The T kernel alone (the same TU holds it): the rest of a launch is the recurrence.
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) {
    const int64_t records = sg::record_count(g_ws.tokens, p.max_seqs);
    CK(sg::launch_chunk_t(p, static_cast<unsigned char*>(g_ws.data), records, nullptr));
  }
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float t_total = 0;
  CK(cudaEventElapsedTime(&t_total, e0, e1));
  const double t_ms = t_total / reps;
#endif

  // The checksum: one launch from the initial state.
  CK(cudaMemcpy(state, state0, state_bytes, cudaMemcpyDeviceToDevice));
  launch_once(p, tile);
  CK(cudaDeviceSynchronize());
  const std::vector<uint8_t> ho = download(out, out_bytes), hs = download(state, state_bytes);
  const uint64_t hash = hash_bytes(hs, hash_bytes(ho));
  double osum, oabs, ssum, sabs;
  sums(ho, out_t, osum, oabs);
  sums(hs, state_t, ssum, sabs);

  int dev = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  const size_t smem = form_smem(Dk, BV, qkv);
  const int per_sm =
      smem == 0
          ? 1
          : std::max(1, static_cast<int>(prop.sharedMemPerMultiprocessor / (smem + prop.reservedSharedMemPerBlock)));
  // A copy of the kernel that splits a head's value columns over SG_PROBE_BLOCKS_PER_HEAD blocks
  // (build-probe copies) says so at build time.
  const int64_t blocks = int64_t{(Dv + BV - 1) / BV} * Hv * seqs * SG_PROBE_BLOCKS_PER_HEAD, chunks = (len + 63) / 64;
  // A block walks its sequence's chunks one after another; with `per_sm` blocks resident an SM, a
  // chunk of one block takes about this long (a launch over blocks x chunks chunk-steps).
  const double us_chunk = 1e3 * ms * prop.multiProcessorCount * per_sm / double(blocks * chunks);
  const Flops f = count_flops(seqs, len, Hv, Dk, Dv, BV, qkv == DType::f32);
  auto tflops = [&](double x) { return x / (ms * 1e-3) / 1e12; };
  std::printf(
      "%s: %d x %d tokens, Hk %d, Hv %d, Dk %d, Dv %d (tile %d), %s q/k/v, %s out, %s state, %s history\n"
      "  %d blocks of %d threads, %zu bytes of shared memory (%d an SM, %d SMs): %.2f waves, %lld chunks a block\n"
      "  %.4f ms a launch (%d launches), %.2f us a chunk of one block\n"
      "  useful %.1f TFLOP/s (%.2f GFLOP, %.1f%% of 790); issued to the tensor cores %.1f TFLOP/s "
      "(%.2f GFLOP with the split passes, %.1f%% of 790; one pass would be %.2f GFLOP)\n"
      "  out sum %.6e |sum| %.6e, state sum %.6e |sum| %.6e\n"
      "  checksum %016llx\n",
      SG_PROBE_KERNEL, seqs, len, Hk, Hv, Dk, Dv, BV, name(qkv), name(out_t), name(state_t), hist ? "with" : "no",
      static_cast<int>(blocks), form_threads(BV), smem, per_sm, prop.multiProcessorCount,
      double(blocks) / (prop.multiProcessorCount * per_sm), static_cast<long long>(chunks), ms, reps, us_chunk,
      tflops(f.useful), f.useful / 1e9, 100.0 * tflops(f.useful) / 790.0, tflops(f.issued), f.issued / 1e9,
      100.0 * tflops(f.issued) / 790.0, f.one_pass / 1e9, osum, oabs, ssum, sabs,
      static_cast<unsigned long long>(hash));
#ifdef SG_PROBE_TRACE
  print_trace(static_cast<int>(chunks), seqs, Hv);
#endif
#ifdef SG_PROBE_WGMMA_T
  // The compiled kernel's own v-heads a T block (an edited copy may differ from the library's).
  const int vh = sg::chunk_t_pairs(Hk, Hv) ? 2 : 1;
  std::printf("  of which the T kernel alone %.4f ms (%lld blocks of %d threads, %zu bytes of shared memory)\n", t_ms,
              static_cast<long long>(sg::record_count(g_ws.tokens, p.max_seqs) * Hv / vh), 128 * vh,
              size_t{vh == 2 ? sg::ChunkT<2>::kSmemBytes : sg::ChunkT<1>::kSmemBytes});
  // The one-kernel warpgroup form from the same start: how far the two forms' bytes are apart.
  CK(cudaMemcpy(state, state0, state_bytes, cudaMemcpyDeviceToDevice));
  const cudaError_t werr = sg::delta_rule_prefill_wgmma(p, nullptr);
  if (werr != cudaSuccess) {
    std::fprintf(stderr, "the one-kernel form failed (%s): %s\n", cudaGetErrorString(werr),
                 sg::take_launch_refusal().c_str());
    return 1;
  }
  CK(cudaDeviceSynchronize());
  const std::vector<uint8_t> wo = download(out, out_bytes), ws = download(state, state_bytes);
  const std::vector<float> to = values_of(ho, out_t), oo = values_of(wo, out_t), ts = values_of(hs, state_t),
                           os = values_of(ws, state_t);
  const double dout = sg::diag::max_normalised_difference(to.data(), oo.data(), to.size()),
               dstate = sg::diag::max_normalised_difference(ts.data(), os.data(), ts.size());
  std::printf(
      "  against the one-kernel form (checksum %016llx): out %.3g, state %.3g (largest difference / largest "
      "magnitude)\n",
      static_cast<unsigned long long>(hash_bytes(ws, hash_bytes(wo))), dout, dstate);
  // Past 1e-5, where the forms part in sequence 0 and the last one (chunks, rows, heads, columns).
  if (!(dout <= 1e-5) || !(dstate <= 1e-5)) {
    const size_t row = size_t(Hv) * Dv, head = size_t(Hv) * Dk * Dv;
    for (int s : {0, seqs - 1}) {
      std::printf("  sequence %d, outputs: %s\n", s,
                  sg::diag::error_map(to.data() + s * len * row, oo.data() + s * len * row, len * row,
                                      sg::diag::delta_out_views(len, Hv, Dv), 1e-5)
                      .c_str());
      std::printf("  sequence %d, final state: %s\n", s,
                  sg::diag::error_map(ts.data() + s * head, os.data() + s * head, head,
                                      sg::diag::delta_state_views(Hv, Dk, Dv), 1e-5)
                      .c_str());
      if (seqs == 1) break;
    }
  }
#endif
  return 0;
}
