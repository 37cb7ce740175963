// delta_inverse_probe.cu: what it costs to compute the delta-rule prefill's A and T = (I + A)^-1
// for every (chunk, v-head) in one launch BEFORE the recurrence, instead of inside
// delta_rule_mma_kernel's per-chunk chain (kernels/delta_rule_prefill_mma.cu, P1a's A and P2). A
// (and so T) depends only on k, g and beta of the chunk, never on the state S, so all chunks can
// run in parallel; docs/BENCHMARKS.md ("The delta-rule prefill, phase by phase") measured the
// inverse with its barriers at 0.544 ms and P1a's products (P and A) at 0.120 ms of the recurrent
// kernel's 2.893 ms a layer on the 4B prefill shape. This probe times the precompute alone so that
// a GPU run can weigh it (plus the recurrent kernel reading T back) against those 0.664 ms.
// chunk_inverse_kernel: one block of 128 threads per (chunk, v-head) over packed varlen sequences
// (chunks of 64 tokens that never cross a sequence's end; rows past a short last chunk's length are
// zero, as in the mma kernel): P0 loads the chunk's bf16 k rows of the v-head's k-head into a bf16
// tile and warp 0 makes the gates (chunk_io::chunk_gates); P1a computes A on the lower triangle
// with the mma kernel's code for bf16 inputs (the same 16 x 8 tiles, ldmatrix fragments and
// mma.sync order, then Bs[r] * (acc * w), w = expf(float(G_r - G_c))); P2 inverts with
// chunk_inverse::diagonal_blocks and off_diagonal (the same calls and barriers). Built with the
// library's flags (-fmad=false), the stored T is meant to be bit for bit the T the mma kernel
// holds in shared memory after P2 for the same chunk and head (not checked here: that needs a copy
// of the mma kernel that writes its Ts out); the probe checks a few chunks against a double
// precision CPU computation instead (tolerance below).
// Grid: one block per (chunk, v-head), blockIdx.x = chunk * Hv + hv, 128 threads, 36,608 bytes of
// static shared memory at Dk 128 (k tile 17 KB, A / T tile 18 KB; 28,416 at Dk 64) and 80 registers
// (ptxas -v, CUDA 13.0, no spill): 6 blocks an SM at Dk 128 (the probe prints the occupancy). The per-chunk
// work is a latency chain (two warps substitute 32 rows each while the others wait, then 32-deep
// products a thread), so many small resident blocks hide it better than blocks that walk several
// chunks one after another through the same chain; the v-heads of one k-head are neighbours in
// launch order, so the second read of a k row is served from L2. (Untried: one block per
// (chunk, k-head) computing k K^T once for its Hv / Hk v-heads, which differ only in beta and G.)
// T's layout: [n_chunks, Hv, 64, 64] f32 row-major, the full square with zeros above the diagonal:
// the recurrent block (Dv tile, hv, sequence) would read its chunk's T as one contiguous 16 KB
// (256-byte rows, cp.async into its [64, 72] tile), the f32 values P3 now reads from shared memory
// and splits into bf16 parts. A packed triangle would save 49% (2080 of 4096 entries) with ragged
// rows; pre-split bf16 parts would cost the same 16 KB. Chunks are numbered sequence by sequence
// from a host-built table {first token, tokens}; a step graph would instead need each sequence's
// first chunk number (a scan of cu_seqlens), or the index n + c0 / 64 (unique, at most
// max_seqs + T / 64 slots, with holes), which needs none.
// Inputs as tools/probes/delta_prefill_probe.cu makes them (the same hash, seeds and ranges, so
// the same values for the same shape): k rows of unit L2 norm in bf16, g uniform in [-1, 0) with
// every 37th value of the [T, Hv] array -12 (fast decay), beta uniform in [0, 1). Default shape
// the 4B prefill's: 32 sequences x 1024 tokens, Hk 16, Hv 32, Dk 128.
// Prints: PASS / FAIL for 8 checked chunks (5 of a small ragged batch of lengths 100, 1, 300, 64,
// 37: a first chunk, short last chunks of 36, 1 and 44 tokens, a middle chunk starting at token
// 229; 3 of the timed batch: first, middle, last), then the timed batch: ms a launch (REPS
// back-to-back launches after 2 warm-up ones, CUDA events), the bytes a launch moves (k read once
// per v-head block, g, beta, T written) and GB/s, the FLOPs of A and of the inverse, the T
// buffer's size and what writing and reading it takes at 4.3 TB/s, and the precompute's time
// against the 0.664 ms of P1a + P2.
// Usage: delta_inverse_probe [SEQS [LEN [REPS]]] [--dk 64|128] [--hk N] [--hv N]
// Build and run on the GPU machine (repository root; -fmad=false as the library builds its kernels):
//   nvcc -O3 -std=c++20 -fmad=false -gencode arch=compute_90a,code=sm_90a -I. \
//     -o /tmp/delta_inverse_probe tools/probes/delta_inverse_probe.cu && /tmp/delta_inverse_probe
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

#include "kernels/delta_rule_chunk_inverse.cuh"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_mma_frag.cuh"
#include "kernels/delta_rule_prefill.h"
#include "kernels/mma_util.cuh"
#include "tools/probes/delta_probe_inputs.cuh"
#include "tools/probes/probe_check.h"

namespace {

using bf16 = __nv_bfloat16;
constexpr int kChunk = 64;
constexpr int kThreads = 128;  // 4 warps: P1a's 20 tiles 5 a warp; diagonal_blocks needs threads 0..63

struct InverseParams {
  const bf16* k = nullptr;           // [T, Hk, Dk]
  sg::DeltaRulePrefillParams gates;  // g, beta ([T, Hv] f32) and Hv: what chunk_io::chunk_gates reads
  const int2* chunks = nullptr;      // [n_chunks]: first token (absolute), tokens (1..64)
  float* t_out = nullptr;            // [n_chunks, Hv, 64, 64]
  int Hk = 0, Hv = 0;
};

template <int DK>
__global__ void __launch_bounds__(kThreads) chunk_inverse_kernel(const InverseParams p) {
  constexpr int C = kChunk, NT = kThreads, NW = NT / 32;
  constexpr int LDK = DK + 8;  // bf16 k row pitch, as MTile::LDK (an odd number of 16-byte units)
  constexpr int LDT = C + 8;   // A / T row pitch, as MTile::LDT
  static_assert((LDK * 2 / 16) % 2 == 1, "conflict-free ldmatrix rows");
  __shared__ double Gs[C];                     // G_r
  __shared__ float Es[C], Ls[C], Bs[C];        // exp(G_r), exp(G_last - G_r) (unused here), beta_r
  __shared__ __align__(16) bf16 Kh[C * LDK];   // k rows (zeros past L)
  __shared__ __align__(16) float Ts[C * LDT];  // A, then T

  const int Hv = p.Hv, hv = static_cast<int>(blockIdx.x % static_cast<unsigned>(Hv));
  const int64_t chunk = blockIdx.x / static_cast<unsigned>(Hv);
  const int2 ch = p.chunks[chunk];
  const int64_t c0 = ch.x;
  const int L = ch.y;
  const int hk = hv / (Hv / p.Hk);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates

  // ---- P0: k rows -> Kh as bf16 bits (the mma kernel widens them to f32 and rounds back, which is
  // exact), rows >= L zero; all loads issued before any store.
  {
    constexpr int RU = DK / 8, IK = C * RU / NT;  // 16-byte units a row; a thread
    static_assert(IK >= 1 && IK * NT == C * RU, "");
    uint4 kx[IK];
#pragma unroll
    for (int u = 0; u < IK; ++u) {
      const int f = tid + u * NT, r = f / RU, i = 8 * (f % RU);
      kx[u] = r < L ? *reinterpret_cast<const uint4*>(p.k + ((c0 + r) * p.Hk + hk) * DK + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < IK; ++u) {
      const int f = tid + u * NT, r = f / RU, i = 8 * (f % RU);
      *reinterpret_cast<uint4*>(Kh + r * LDK + i) = kx[u];
    }
  }
  if (tid < 32) sg::chunk_io::chunk_gates(p.gates, c0, L, hv, lane, Gs, Es, Ls, Bs);
  __syncthreads();

  // ---- P1a (A only): the mma kernel's `which == 1` tiles, 16 x 8 (row tile rb, column tile
  // nb <= 2 rb + 1), the same fragments, mma order and scalar expression.
  for (int u = warp; u < 20; u += NW) {
    const int rb = u < 2 ? 0 : u < 6 ? 1 : u < 12 ? 2 : 3;
    const int nb = u - (rb == 0 ? 0 : rb == 1 ? 2 : rb == 2 ? 6 : 12);
    float acc[4] = {};
    const bf16* arow = Kh + 16 * rb * LDK;
    const bf16* brow = Kh + 8 * nb * LDK;
#pragma unroll
    for (int kk = 0; kk < DK; kk += 32) {  // two k steps: one ldmatrix of B, two of A
      uint32_t bw[4];
      sg::mma_frag::ldm_b2(bw, brow + kk, LDK, lane);
      sg::mma::mma_bf16(acc, sg::mma_frag::ldm_a(arow + kk, LDK, lane).hi, bw[0], bw[1]);
      sg::mma::mma_bf16(acc, sg::mma_frag::ldm_a(arow + kk + 16, LDK, lane).hi, bw[2], bw[3]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * rb + g + (q >= 2 ? 8 : 0), c = 8 * nb + 2 * t + (q & 1);
      const float w = c <= r ? expf(static_cast<float>(Gs[r] - Gs[c])) : 0.0f;  // never exp of a positive
      Ts[r * LDT + c] = c < r ? Bs[r] * (acc[q] * w) : 0.0f;
    }
  }
  __syncthreads();

  // ---- P2: T = (I + A)^-1, the same calls and barriers as the mma kernel.
  if (tid < 64) sg::chunk_inverse::diagonal_blocks<LDT>(Ts, tid, lane);
  __syncthreads();
  sg::chunk_inverse::off_diagonal<LDT, NT>(Ts, tid);
  __syncthreads();

  // ---- T's lower triangle (c <= r) to global memory, zeros above the diagonal (a select: the
  // upper triangle of Ts holds the substitution's transposed copies).
  float* const out = p.t_out + (chunk * Hv + hv) * (C * C);
#pragma unroll
  for (int u = 0; u < C * C / 4 / NT; ++u) {
    const int f = tid + u * NT, r = f / (C / 4), c = 4 * (f % (C / 4));
    const float4 x = sg::chunk_io::ld4(Ts + r * LDT + c);
    *reinterpret_cast<float4*>(out + r * C + c) =
        make_float4(c <= r ? x.x : 0.0f, c + 1 <= r ? x.y : 0.0f, c + 2 <= r ? x.z : 0.0f, c + 3 <= r ? x.w : 0.0f);
  }
}

// ---- Inputs: tools/probes/delta_probe_inputs.cuh (delta_prefill_probe's generator, so the values
// equal that probe's for the same seeds and indices).
using probe_inputs::fill_uniform;
using probe_inputs::fill_unit_rows;

// One packed varlen batch: inputs, its chunk table and the T buffer.
struct Batch {
  int T = 0, Hk = 0, Hv = 0, Dk = 0;
  std::vector<int2> chunks;    // {first token, tokens}, sequence by sequence
  std::vector<int> chunk_seq;  // the chunk's sequence
  bf16* k = nullptr;
  float *g = nullptr, *beta = nullptr, *t_out = nullptr;
  InverseParams p;
  size_t t_bytes() const { return chunks.size() * size_t(Hv) * kChunk * kChunk * sizeof(float); }
};

Batch make_batch(const std::vector<int>& lens, int Hk, int Hv, int Dk) {
  Batch b;
  b.Hk = Hk, b.Hv = Hv, b.Dk = Dk;
  for (size_t n = 0; n < lens.size(); ++n) {
    for (int j = 0; j < lens[n]; j += kChunk) {
      b.chunks.push_back(make_int2(b.T + j, std::min(kChunk, lens[n] - j)));
      b.chunk_seq.push_back(static_cast<int>(n));
    }
    b.T += lens[n];
  }
  const int64_t kn = int64_t{b.T} * Hk * Dk, gn = int64_t{b.T} * Hv;
  CK(cudaMalloc(&b.k, kn * sizeof(bf16)));
  CK(cudaMalloc(&b.g, gn * sizeof(float)));
  CK(cudaMalloc(&b.beta, gn * sizeof(float)));
  CK(cudaMalloc(&b.t_out, b.t_bytes()));
  fill_unit_rows<<<1024, 256>>>(b.k, sg::DType::bf16, int64_t{b.T} * Hk, Dk,
                                2);  // delta_prefill_probe's seeds: k 2, g 4, beta 5
  CK(cudaGetLastError());
  fill_uniform<<<1024, 256>>>(b.g, sg::DType::f32, gn, 4, -1.0f, 0.0f, 37, -12.0f);
  CK(cudaGetLastError());
  fill_uniform<<<1024, 256>>>(b.beta, sg::DType::f32, gn, 5, 0.0f, 1.0f, 0, 0.0f);
  CK(cudaGetLastError());
  CK(cudaMemset(b.t_out, 0xff, b.t_bytes()));  // NaN: an entry the kernel does not write fails the check
  b.p.k = b.k;
  b.p.gates.g = b.g, b.p.gates.beta = b.beta, b.p.gates.Hv = Hv, b.p.gates.Hk = Hk, b.p.gates.Dk = Dk;
  b.p.chunks = upload(b.chunks);
  b.p.t_out = b.t_out;
  b.p.Hk = Hk, b.p.Hv = Hv;
  CK(cudaDeviceSynchronize());
  return b;
}

template <int DK>
void launch_dk(const Batch& b) {
  static bool once = [] {  // the most shared memory the carveout allows: 6 blocks of 36.6 KB an SM
    CK(cudaFuncSetAttribute(chunk_inverse_kernel<DK>, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)once;
  const int64_t blocks = int64_t(b.chunks.size()) * b.Hv;
  chunk_inverse_kernel<DK><<<static_cast<unsigned>(blocks), kThreads>>>(b.p);
  CK(cudaGetLastError());
}

void launch(const Batch& b) { b.Dk == 64 ? launch_dk<64>(b) : launch_dk<128>(b); }

// ---- The check: chunk ci of batch b, every v-head, against A and T = (I + A)^-1 in double
// (forward substitution, column by column), over the full 64 x 64 (rows past L: identity; above
// the diagonal: exactly 0). Error: max |T_gpu - T_ref| / max |T_ref| (max |T_ref| = 1, the diagonal).
// Tolerance 1e-5: A's entries are f32 sums of Dk exact bf16 x bf16 products whose magnitudes add up
// to at most |k_r| |k_c| = 1 (unit rows), so a sum is off by at most about Dk rounding steps of 2^-24
// of that (8e-6 at Dk 128 if every step erred the same way, about 1e-6 for random roundings; the
// tensor cores' truncation inside an mma is of the same order); beta < 1 and w <= 1 only shrink it,
// and expf of G rounded to f32 errs by a few 2^-24 of w. T's fmaf chains are at most 63 long (32 in
// a diagonal block, 32 + 32 through the off-diagonal products) over entries of A about beta |cos| of
// two random unit rows (0.1, rarely 0.3), so T stays O(1) and the substitution adds a few 2^-24.
// A wrong index, row, gate or sign moves entries by the size of A's (1e-2 and more).
constexpr double kTolerance = 1e-5;

bool check_chunk(const Batch& b, int ci, const char* what) {
  const int2 ch = b.chunks[ci];
  const int c0 = ch.x, L = ch.y, Hk = b.Hk, Hv = b.Hv, Dk = b.Dk, C = kChunk;
  std::vector<uint16_t> k(size_t(L) * Hk * Dk);
  std::vector<float> g(size_t(L) * Hv), beta(size_t(L) * Hv), t(size_t(Hv) * C * C);
  CK(cudaMemcpy(k.data(), b.k + size_t(c0) * Hk * Dk, k.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(g.data(), b.g + size_t(c0) * Hv, g.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(beta.data(), b.beta + size_t(c0) * Hv, beta.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(t.data(), b.t_out + size_t(ci) * Hv * C * C, t.size() * 4, cudaMemcpyDeviceToHost));
  auto kval = [&](int r, int hk, int i) {
    const uint32_t w = uint32_t{k[(size_t(r) * Hk + hk) * Dk + i]} << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return double(f);
  };
  double worst = 0, tmax = 0;
  int worst_hv = 0, fast = 0;
  bool upper_zero = true;
  std::vector<double> A(C * C), Tr(C * C);
  for (int hv = 0; hv < Hv; ++hv) {
    const int hk = hv / (Hv / Hk);
    std::vector<double> G(C, 0.0);
    double acc = 0;
    for (int r = 0; r < L; ++r) {
      const float gr = g[size_t(r) * Hv + hv];
      acc += gr;
      G[r] = acc;
      if (r > 0 && gr == -12.0f) ++fast;  // a fast decay inside the chunk (at row 0 it shifts every G alike)
    }
    std::fill(A.begin(), A.end(), 0.0);
    for (int r = 1; r < L; ++r) {
      for (int c = 0; c < r; ++c) {
        double dot = 0;
        for (int i = 0; i < Dk; ++i) dot += kval(r, hk, i) * kval(c, hk, i);
        A[r * C + c] = double(beta[size_t(r) * Hv + hv]) * dot * std::exp(G[r] - G[c]);
      }
    }
    std::fill(Tr.begin(), Tr.end(), 0.0);
    for (int c = 0; c < C; ++c) {
      Tr[c * C + c] = 1.0;
      for (int r = c + 1; r < C; ++r) {
        double s = 0;
        for (int m = c; m < r; ++m) s += A[r * C + m] * Tr[m * C + c];
        Tr[r * C + c] = -s;
      }
    }
    double err = 0, mx = 0;
    for (int r = 0; r < C; ++r) {
      for (int c = 0; c < C; ++c) {
        const float x = t[(size_t(hv) * C + r) * C + c];
        if (c > r && x != 0.0f) upper_zero = false;
        const double d = std::fabs(double(x) - Tr[r * C + c]);
        err = std::max(err, std::isnan(d) ? HUGE_VAL : d);
        mx = std::max(mx, std::fabs(Tr[r * C + c]));
      }
    }
    if (err / mx > worst || hv == 0) worst = err / mx, worst_hv = hv;
    tmax = std::max(tmax, mx);
  }
  const bool pass = worst <= kTolerance && upper_zero;
  std::printf(
      "  check %-22s seq %d, chunk at tokens %d..%d (%2d): worst normalised error %.2e (v-head %d) over %d v-heads, "
      "max|T| %.3f, %d fast-decay (-12) gates past row 0%s: %s\n",
      what, b.chunk_seq[ci], c0, c0 + L - 1, L, worst, worst_hv, Hv, tmax, fast,
      upper_zero ? "" : ", NONZERO ABOVE THE DIAGONAL", pass ? "PASS" : "FAIL");
  return pass;
}

int usage() {
  std::fprintf(stderr, "usage: delta_inverse_probe [SEQS [LEN [REPS]]] [--dk 64|128] [--hk N] [--hv N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int seqs = 32, len = 1024, reps = 20, Hk = 16, Hv = 32, Dk = 128;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--dk" && has_value) {
      Dk = std::atoi(argv[++i]);
    } else if (a == "--hk" && has_value) {
      Hk = std::atoi(argv[++i]);
    } else if (a == "--hv" && has_value) {
      Hv = std::atoi(argv[++i]);
    } else if (!a.empty() && a[0] != '-' && positional < 3) {
      (positional == 0 ? seqs : positional == 1 ? len : reps) = std::atoi(a.c_str());
      ++positional;
    } else {
      return usage();
    }
  }
  // At most 2^22 tokens: T takes Hv * 256 bytes a token (32 GB at Hv 32).
  if (seqs < 1 || len < 1 || reps < 1 || int64_t{seqs} * len > (1 << 22) || (Dk != 64 && Dk != 128) || Hk < 1 ||
      Hv < 1 || Hv % Hk != 0 || (int64_t{seqs} * len / kChunk + seqs) * Hv > INT32_MAX) {
    return usage();
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "delta_inverse_probe: no CUDA device\n");
    return 1;
  }

  // The check: a small ragged batch (chunks: 0 = seq 0's first, 1 = its short last (36 tokens),
  // 2 = seq 1's only (1 token), 5 = a middle chunk of seq 2 (starting at token 229), 7 = seq 2's
  // short last (44)), then the timed batch's first, middle and last chunks.
  bool ok = true;
  std::printf("delta_inverse_probe: T = (I + A)^-1 of every (64-token chunk, v-head), Dk %d, Hk %d, Hv %d\n", Dk, Hk,
              Hv);
  {
    const Batch r = make_batch({100, 1, 300, 64, 37}, Hk, Hv, Dk);
    launch(r);
    CK(cudaDeviceSynchronize());
    ok &= check_chunk(r, 0, "ragged, first:");
    ok &= check_chunk(r, 1, "ragged, short last:");
    ok &= check_chunk(r, 2, "ragged, one token:");
    ok &= check_chunk(r, 5, "ragged, middle:");
    ok &= check_chunk(r, 7, "ragged, short last:");
    CK(cudaFree(r.k));
    CK(cudaFree(r.g));
    CK(cudaFree(r.beta));
    CK(cudaFree(r.t_out));
  }
  const Batch b = make_batch(std::vector<int>(seqs, len), Hk, Hv, Dk);
  const int n_chunks = static_cast<int>(b.chunks.size()), cps = (len + kChunk - 1) / kChunk;
  launch(b);
  CK(cudaDeviceSynchronize());
  ok &= check_chunk(b, 0, "timed, first:");
  ok &= check_chunk(b, (seqs / 2) * cps + cps / 2, "timed, middle:");
  ok &= check_chunk(b, n_chunks - 1, "timed, last:");

  // Timed: REPS back-to-back launches after two warm-up launches (each one identical).
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) launch(b);
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) launch(b);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float total = 0;
  CK(cudaEventElapsedTime(&total, e0, e1));
  const double ms = total / reps;

  int dev = 0, per_sm = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  cudaFuncAttributes fa{};
  if (Dk == 64) {
    CK(cudaFuncGetAttributes(&fa, chunk_inverse_kernel<64>));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chunk_inverse_kernel<64>, kThreads, 0));
  } else {
    CK(cudaFuncGetAttributes(&fa, chunk_inverse_kernel<128>));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chunk_inverse_kernel<128>, kThreads, 0));
  }
  const int64_t blocks = int64_t{n_chunks} * Hv;
  // Bytes: k as each v-head block reads it (the v-heads of a k-head read the same rows: DRAM sees
  // them about once when the neighbouring blocks run together), g and beta, T written.
  const double k_bytes = double(b.T) * Hv * Dk * 2, k_distinct = double(b.T) * Hk * Dk * 2,
               gb_bytes = double(b.T) * Hv * 8, t_bytes = double(b.t_bytes());
  const double bytes = k_bytes + gb_bytes + t_bytes;
  // FLOPs (2 a multiply-add) over every chunk (L tokens) and v-head: A on its strict triangle,
  // Dk L (L - 1); the inverse of a unit lower triangular L x L, about L^3 / 3 (the kernel runs the
  // full 64 x 64 blockwise form for short chunks too; counted at L).
  double fl_a = 0, fl_inv = 0;
  for (const int2& c : b.chunks) {
    fl_a += double(Dk) * c.y * (c.y - 1) * Hv;
    fl_inv += double(c.y) * c.y * c.y / 3.0 * Hv;
  }
  const double tbs = 4.3e12;  // the H200's DRAM rate, as the other probes use it
  const double t_write_ms = t_bytes / tbs * 1e3;
  const bool four_b = seqs == 32 && len == 1024 && Hk == 16 && Hv == 32 && Dk == 128;
  std::printf(
      "timed: %d x %d tokens, Hk %d, Hv %d, Dk %d, bf16 k, f32 g and beta\n"
      "  %lld blocks (%d chunks x %d v-heads) of %d threads, %zu bytes of static shared memory, %d registers, "
      "%zu bytes of spill (%d blocks an SM, %d SMs: %.1f waves)\n"
      "  T buffer: %.1f MB f32 [%d chunks, %d, 64, 64] (%s); writing it at 4.3 TB/s takes %.3f ms, reading it "
      "back in the recurrent kernel another %.3f ms\n"
      "  %.4f ms a launch (%d launches)\n"
      "  moves %.1f MB a launch (k %.1f MB read once per v-head block, %.1f MB of it distinct; g, beta %.1f MB; "
      "T %.1f MB written): %.0f GB/s, %.1f%% of 4.3 TB/s\n"
      "  FLOPs: A %.2f GFLOP (Dk L(L-1) a chunk and v-head), inverse %.2f GFLOP (about L^3/3): %.1f TFLOP/s\n"
      "  precompute %.4f ms against 0.664 ms of P1a + P2 inside the recurrent kernel (BENCHMARKS)%s\n"
      "  (0.664 = the inverse with its barriers 0.544 + P1a's P and A products 0.120, of which A is half; the "
      "recurrent kernel would also read T back, %.3f ms at 4.3 TB/s: a saving of at most %.3f ms a layer)\n",
      seqs, len, Hk, Hv, Dk, static_cast<long long>(blocks), n_chunks, Hv, kThreads, fa.sharedSizeBytes, fa.numRegs,
      fa.localSizeBytes, per_sm, prop.multiProcessorCount,
      double(blocks) / (double(per_sm > 0 ? per_sm : 1) * prop.multiProcessorCount), t_bytes / 1e6, n_chunks, Hv,
      "lower triangle, zeros above the diagonal", t_write_ms, t_write_ms, ms, reps, bytes / 1e6, k_bytes / 1e6,
      k_distinct / 1e6, gb_bytes / 1e6, t_bytes / 1e6, bytes / (ms * 1e-3) / 1e9, 100.0 * bytes / (ms * 1e-3) / tbs,
      fl_a / 1e9, fl_inv / 1e9, (fl_a + fl_inv) / (ms * 1e-3) / 1e12, ms,
      four_b ? "" : " [measured at 32 x 1024, Hk 16, Hv 32, Dk 128: not this shape]", t_write_ms,
      0.664 - ms - t_write_ms);
  std::printf("%s\n", ok ? "all checks PASS" : "some checks FAIL");
  return ok ? 0 : 1;
}
