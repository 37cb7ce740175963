// GPU tests of the prefill GEMM on wgmma (kernels/gemm_wgmma.h): y = x W^T against the CPU
// reference linear with the cuBLAS GEMM test's tolerance (f32 accumulation in another order:
// 1e-5 sum |x||w|, plus one bf16 rounding of y) for M, N and K that are no multiple of the tiles,
// strided x and y, every row tile pair count and one pair walking every tile; on inputs whose sums
// are exact in f32 the bytes of the exact result rounded once (any correct accumulation order gives
// them: cuBLAS's too); the SwiGLU epilogue gives the bytes of this GEMM followed by the swiglu
// kernel, rows past live_rows zero, columns past the output untouched; graph replay == eager == a
// rerun; 200 launches beside another GEMM on a second stream give the first launch's bytes; bad
// params refused with the field named.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "kernels/gemm_wgmma.h"
#include "kernels/launch_check.h"
#include "kernels/ref/mlp_ref.h"
#include "kernels/swiglu.h"
#include "models/step_settings.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using test::DevBuf;

namespace {

bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return sm90a_device(d.cc_major, d.cc_minor);
}

struct Problem {
  int M, N, K, ldx;
  std::vector<float> x, W;  // x [M, ldx], W [N, K] (bf16 values)
  DevBuf dx, dW;
  Problem(int M_, int N_, int K_, int ldx_, std::vector<float> x_, std::vector<float> W_)
      : M(M_),
        N(N_),
        K(K_),
        ldx(ldx_),
        x(std::move(x_)),
        W(std::move(W_)),
        dx(DevBuf::from(x, DType::bf16)),
        dW(DevBuf::from(W, DType::bf16)) {}
  static Problem random(int M, int N, int K, int ldx, uint64_t seed) {
    return Problem(M, N, K, ldx, test::uniform_bf16(static_cast<size_t>(M) * ldx, seed, -1.f, 1.f),
                   test::uniform_bf16(static_cast<size_t>(N) * K, seed + 1, -0.1f, 0.1f));
  }
  // x in sixteenths of -8..8, W in eighths of -4..4: every product a multiple of 1/128 and every
  // sum below 2^24 / 128 in size, so exact in f32 whatever the order.
  static Problem exact(int M, int N, int K, uint64_t seed) {
    std::vector<float> x(static_cast<size_t>(M) * K), W(static_cast<size_t>(N) * K);
    const auto ux = test::uniform(x.size(), seed, 0.f, 1.f), uw = test::uniform(W.size(), seed + 1, 0.f, 1.f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::floor(ux[i] * 17.f - 8.f) / 16.f;
    for (size_t i = 0; i < W.size(); ++i) W[i] = std::floor(uw[i] * 9.f - 4.f) / 8.f;
    return Problem(M, N, K, K, std::move(x), std::move(W));
  }
  // The reference y [M, N] in double, and sum |x||w| per output.
  void reference(std::vector<double>& ref, std::vector<double>& mag) const {
    ref.assign(static_cast<size_t>(M) * N, 0.0);
    mag.assign(ref.size(), 0.0);
    for (int t = 0; t < M; ++t) {
      for (int o = 0; o < N; ++o) {
        double s = 0, m = 0;
        for (int i = 0; i < K; ++i) {
          const double p = static_cast<double>(x[static_cast<size_t>(t) * ldx + i]) * W[static_cast<size_t>(o) * K + i];
          s += p;
          m += std::fabs(p);
        }
        ref[static_cast<size_t>(t) * N + o] = s;
        mag[static_cast<size_t>(t) * N + o] = m;
      }
    }
  }
  GemmWgmmaParams params(const DevBuf& y, int64_t ldy, int sms = 0) const {
    GemmWgmmaParams p;
    p.x = dx.data();
    p.ldx = ldx;
    p.W = dW.data();
    p.y = y.data();
    p.ldy = ldy;
    p.M = M;
    p.N = N;
    p.K = K;
    p.sms = sms;
    return p;
  }
};

// Bytes of row t, columns [from, to) of a [rows, ld] bf16 buffer that differ from `poison`.
size_t touched(const std::vector<uint8_t>& b, int rows, int64_t ld, int64_t from, int64_t to, uint8_t poison) {
  size_t n = 0;
  for (int t = 0; t < rows; ++t)
    for (int64_t i = (t * ld + from) * 2; i < (t * ld + to) * 2; ++i) n += b[static_cast<size_t>(i)] != poison;
  return n;
}

}  // namespace

TEST_CASE("gemm_wgmma matches the reference linear for tails of every tile, strided rows and any pair count",
          "[gpu][gemm][gemm_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  struct Case {
    int M, N, K, ldx, ldy;
  };
  for (Case c : {Case{1, 8, 8, 8, 8}, Case{130, 264, 72, 72, 264}, Case{300, 520, 640, 648, 528},
                 Case{257, 1032, 200, 200, 1040}, Case{513, 256, 2560, 2560, 256}, Case{128, 128, 64, 64, 136}}) {
    const Problem pr = Problem::random(c.M, c.N, c.K, c.ldx, 40 + c.M + c.N);
    std::vector<double> ref, mag;
    pr.reference(ref, mag);
    for (int sms : {0, 2, 6}) {  // the device's SMs, one pair walking every tile, three pairs
      CAPTURE(c.M, c.N, c.K, c.ldx, c.ldy, sms);
      DevBuf y(static_cast<size_t>(c.M) * c.ldy * 2, 0x5A);
      check(gemm_wgmma(pr.params(y, c.ldy, sms), nullptr));
      check(cudaDeviceSynchronize());
      const auto got = y.download_f32(DType::bf16);
      size_t bad = 0;
      for (int t = 0; t < c.M; ++t) {
        for (int o = 0; o < c.N; ++o) {
          const double r = ref[static_cast<size_t>(t) * c.N + o];
          const double tol = 1e-5 * mag[static_cast<size_t>(t) * c.N + o] + std::ldexp(1.0, -8) * std::fabs(r) + 1e-7;
          bad += !(std::fabs(got[static_cast<size_t>(t) * c.ldy + o] - r) <= tol);
        }
      }
      CHECK(bad == 0);
      CHECK(touched(y.download(), c.M, c.ldy, c.N, c.ldy, 0x5A) == 0);  // columns past N keep their poison
    }
  }
}

TEST_CASE("gemm_wgmma: on sums exact in f32 the bytes of the exact result rounded once", "[gpu][gemm][gemm_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  struct Case {
    int M, N, K;
  };
  for (Case c : {Case{384, 776, 2560}, Case{200, 2048, 1024}, Case{1, 264, 9216}}) {
    CAPTURE(c.M, c.N, c.K);
    const Problem pr = Problem::exact(c.M, c.N, c.K, 77 + c.K);
    std::vector<double> ref, mag;
    pr.reference(ref, mag);
    const std::vector<float> want(ref.begin(), ref.end());  // exact in f32, rounded once to bf16 below
    DevBuf y(static_cast<size_t>(c.M) * c.N * 2);
    check(gemm_wgmma(pr.params(y, c.N), nullptr));
    check(cudaDeviceSynchronize());
    CHECK(test::byte_diff(y.download(), test::to_bytes(want, DType::bf16), DType::bf16) == "");
  }
}

TEST_CASE("gemm_wgmma: the SwiGLU epilogue gives the bytes of the GEMM followed by the swiglu kernel",
          "[gpu][gemm][gemm_wgmma][swiglu]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  struct Case {
    int M, N, K;
  };
  for (Case c : {Case{1, 16, 64}, Case{300, 1040, 640}, Case{257, 2048, 2560}, Case{640, 528, 128}}) {
    const int I = c.N / 2;
    const Problem pr = Problem::random(c.M, c.N, c.K, c.K, 900 + c.M);
    for (int live : {c.M, c.M > 3 ? c.M - 3 : 0}) {
      for (int sms : {0, 4}) {
        CAPTURE(c.M, c.N, c.K, live, sms);
        const DevBuf dlive = DevBuf::from_i32({live});
        // The unfused pair: gu = x W^T (this GEMM, bf16), then act = swiglu(gu) in groups of 8.
        DevBuf gu(static_cast<size_t>(c.M) * c.N * 2), want(static_cast<size_t>(c.M) * I * 2);
        check(gemm_wgmma(pr.params(gu, c.N, sms), nullptr));
        SwigluParams sw;
        sw.gu = gu.data();
        sw.y = want.data();
        sw.T = c.M;
        sw.I = I;
        sw.interleave = 8;
        sw.live_rows = dlive.as<int32_t>();
        check(swiglu(sw, nullptr));
        // The epilogue, into rows of I + 8 (the 8 past I keep their poison).
        const int64_t ld = I + 8;
        DevBuf got(static_cast<size_t>(c.M) * ld * 2, 0x5A);
        GemmWgmmaParams p = pr.params(got, ld, sms);
        p.swiglu_group = 8;
        p.live_rows = dlive.as<int32_t>();
        check(gemm_wgmma(p, nullptr));
        check(cudaDeviceSynchronize());
        const auto g = got.download(), w = want.download();
        size_t diff = 0;
        for (int t = 0; t < c.M; ++t)
          for (int b = 0; b < I * 2; ++b)
            diff += g[static_cast<size_t>(t) * ld * 2 + b] != w[static_cast<size_t>(t) * I * 2 + b];
        CHECK(diff == 0);
        CHECK(touched(g, c.M, ld, I, ld, 0x5A) == 0);
      }
    }
  }
}

TEST_CASE("gemm_wgmma: graph replay, eager and a rerun give the same bytes", "[gpu][gemm][gemm_wgmma][graphs]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  const Problem pr = Problem::random(1000, 2304, 1024, 1024, 31);
  for (int sw : {0, 8}) {
    CAPTURE(sw);
    const int64_t cols = sw ? 1152 : 2304;
    const size_t bytes = static_cast<size_t>(1000) * cols * 2;
    DevBuf eager(bytes, 1), again(bytes, 2), graphed(bytes, 3);
    const DevBuf dlive = DevBuf::from_i32({990});
    const auto params = [&](const DevBuf& y) {
      GemmWgmmaParams p = pr.params(y, cols);
      p.swiglu_group = sw;
      if (sw) p.live_rows = dlive.as<int32_t>();
      return p;
    };
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    check(cudaDeviceSynchronize());  // the buffers' poison (the legacy stream) lands before s writes them
    check(gemm_wgmma(params(eager), s));
    check(gemm_wgmma(params(again), s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const cudaError_t launched = gemm_wgmma(params(graphed), s);
    check(cudaStreamEndCapture(s, &g));
    check(launched);
    check(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(ge, s));
    check(cudaStreamSynchronize(s));
    const auto e = eager.download();
    CHECK(test::byte_diff(again.download(), e, DType::bf16) == "");
    CHECK(test::byte_diff(graphed.download(), e, DType::bf16) == "");
    check(cudaGraphExecDestroy(ge));
    check(cudaGraphDestroy(g));
    check(cudaStreamDestroy(s));
  }
}

TEST_CASE("gemm_wgmma: 200 launches beside another GEMM on a second stream give the first launch's bytes",
          "[gpu][gemm][gemm_wgmma][stress]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  const Problem a = Problem::random(1024, 2048, 1024, 1024, 5), b = Problem::random(512, 4096, 2048, 2048, 6);
  DevBuf ya(static_cast<size_t>(1024) * 2048 * 2), first(ya.bytes()), yb(static_cast<size_t>(512) * 4096 * 2);
  check(gemm_wgmma(a.params(first, 2048), nullptr));
  check(cudaDeviceSynchronize());
  const auto want = first.download();
  cudaStream_t s1 = nullptr, s2 = nullptr;
  check(cudaDeviceSynchronize());
  check(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  check(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    check(cudaMemsetAsync(ya.data(), 0xA5, ya.bytes(), s1));  // poisoned in the GEMM's stream, before it
    check(gemm_wgmma(b.params(yb, 4096), s2));
    check(gemm_wgmma(a.params(ya, 2048), s1));
    check(cudaStreamSynchronize(s1));
    differ += ya.download() != want;
  }
  check(cudaStreamSynchronize(s2));
  CHECK(differ == 0);
  check(cudaStreamDestroy(s1));
  check(cudaStreamDestroy(s2));
}

TEST_CASE("gemm_wgmma: bad params are refused with the field named", "[gpu][gemm][gemm_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: gemm_wgmma needs compute capability 9.0");
    return;
  }
  const Problem pr = Problem::random(64, 64, 64, 64, 1);
  DevBuf y(64 * 72 * 2), live = DevBuf::from_i32({64});
  const GemmWgmmaParams good = pr.params(y, 64);
  // The good params changed by `edit` are refused, the reason holding `field`.
  const auto refused = [&](const auto& edit, const char* field) {
    CAPTURE(field);
    GemmWgmmaParams q = good;
    edit(q);
    CHECK(gemm_wgmma(q, nullptr) == cudaErrorInvalidValue);
    CHECK(take_launch_refusal().find(field) != std::string::npos);
  };
  using P = GemmWgmmaParams;
  refused([](P& q) { q.N = 60; }, "N must be a multiple of 8");
  refused([](P& q) { q.swiglu_group = 8, q.N = 40; }, "multiple of 16 with SwiGLU");
  refused([](P& q) { q.swiglu_group = 4; }, "swiglu_group");
  refused([](P& q) { q.K = 60, q.ldx = 64; }, "K must be a multiple of 8");
  refused([](P& q) { q.ldx = 32; }, "ldx");
  refused([](P& q) { q.ldy = 56; }, "ldy");
  refused([](P& q) { q.M = -1; }, "M");
  refused([](P& q) { q.W = nullptr; }, "W is null");
  refused([&](P& q) { q.y = static_cast<char*>(y.data()) + 2; }, "16-byte aligned");
  refused([&](P& q) { q.live_rows = live.as<int32_t>(); }, "live_rows");
  // M == 0 launches nothing and needs no pointers.
  GemmWgmmaParams none = good;
  none.M = 0;
  none.x = none.W = none.y = nullptr;
  CHECK(gemm_wgmma(none, nullptr) == cudaSuccess);
}
