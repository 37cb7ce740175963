// GPU tests of the skinny tensor-core GEMM (kernels/skinny_gemm.h): y = x W^T for 1..32 rows
// against the CPU reference linear with the tolerance of the cuBLAS GEMM test (f32 accumulation in
// another order: |err| <= 1e-5 sum |x||w|, plus one bf16 rounding of y), for every n8 tile count,
// N that is not a multiple of the 64-row block, strided x and y, bf16 and f32 outputs, every split
// count from 1 to the most K allows; the split counters come back to zero; graph replay == eager ==
// a rerun, byte for byte; the SwiGLU epilogue gives the bytes of the GEMM followed by the swiglu
// kernel; with defer_sum the RMSNorm after sums the partials into the bytes of the GEMM's bf16 y and
// the norm; bad params rejected, each refusal naming its field; 3000 launches beside a second GEMM on
// another stream give the first launch's bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/launch_check.h"
#include "kernels/ref/mlp_ref.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm.h"
#include "kernels/swiglu.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;

namespace {

// y [M, ldy] = x [M, ldx] W [N, K]^T at `splits` with `block_rows`-row blocks.
SkinnyGemmParams gemm_params(const test::DevBuf& x, int64_t ldx, const test::DevBuf& W, test::DevBuf& y, int64_t ldy,
                             DType yt, int M, int N, int K, int splits, test::DevBuf& ws, test::DevBuf& counters,
                             int block_rows) {
  SkinnyGemmParams p;
  p.x = x.data();
  p.ldx = ldx;
  p.W = W.data();
  p.y = y.data();
  p.ldy = ldy;
  p.y_dtype = yt;
  p.M = M;
  p.N = N;
  p.K = K;
  p.splits = splits;
  p.block_rows = block_rows;
  p.workspace = ws.as<float>();
  p.counters = counters.as<int32_t>();
  return p;
}

struct Problem {
  int M, N, K, ldx, ldy;
  std::vector<float> x, W;       // x [M, ldx], W [N, K] (bf16 values)
  std::vector<double> ref, mag;  // [M, N]: the reference y and sum |x||w|
  test::DevBuf dx, dW;
  Problem(int M_, int N_, int K_, int ldx_, int ldy_, uint64_t seed)
      : M(M_),
        N(N_),
        K(K_),
        ldx(ldx_),
        ldy(ldy_),
        x(test::uniform_bf16(static_cast<size_t>(M_) * ldx_, seed, -1.f, 1.f)),
        W(test::uniform_bf16(static_cast<size_t>(N_) * K_, seed + 1, -0.1f, 0.1f)),
        dx(test::DevBuf::from(x, DType::bf16)),
        dW(test::DevBuf::from(W, DType::bf16)) {
    std::vector<float> xd(static_cast<size_t>(M) * K), r(static_cast<size_t>(M) * N);
    for (int t = 0; t < M; ++t)
      for (int i = 0; i < K; ++i) xd[static_cast<size_t>(t) * K + i] = x[static_cast<size_t>(t) * ldx + i];
    ref::linear(xd.data(), W.data(), r.data(), M, K, N);
    ref.assign(r.begin(), r.end());
    mag.assign(r.size(), 0.0);
    for (int t = 0; t < M; ++t) {
      for (int o = 0; o < N; ++o) {
        double m = 0;
        for (int i = 0; i < K; ++i)
          m += std::fabs(xd[static_cast<size_t>(t) * K + i] * W[static_cast<size_t>(o) * K + i]);
        mag[static_cast<size_t>(t) * N + o] = m;
      }
    }
  }

  SkinnyGemmParams params(test::DevBuf& y, DType yt, int splits, test::DevBuf& ws, test::DevBuf& counters,
                          int block_rows = 0) const {
    return gemm_params(dx, ldx, dW, y, ldy, yt, M, N, K, splits, ws, counters, block_rows);
  }

  // Elements of y (rows < M, columns < N) outside the cuBLAS test's tolerance (f32 accumulation
  // in another order: 1e-5 sum |x||w|, plus one bf16 rounding of y).
  size_t bad(const std::vector<float>& got, DType yt) const {
    size_t n = 0;
    for (int t = 0; t < M; ++t) {
      for (int o = 0; o < N; ++o) {
        const double r = ref[static_cast<size_t>(t) * N + o];
        const double tol = 1e-5 * mag[static_cast<size_t>(t) * N + o] +
                           (yt == DType::bf16 ? std::ldexp(1.0, -8) * std::fabs(r) : 0.0) + 1e-7;
        n += !(std::fabs(got[static_cast<size_t>(t) * ldy + o] - r) <= tol);
      }
    }
    return n;
  }
};

}  // namespace

TEST_CASE("skinny gemm matches the reference linear for every row count, split count and output dtype",
          "[gpu][gemm][skinny]") {
  struct Case {
    int M, N, K, ldx, ldy;
  };
  for (Case c : {Case{1, 64, 64, 64, 64}, Case{5, 100, 128, 136, 101}, Case{8, 2560, 4096, 4096, 2560},
                 Case{9, 192, 2560, 2560, 200}, Case{17, 1000, 512, 520, 1000}, Case{32, 2560, 9216, 9216, 2560},
                 Case{32, 12352, 2560, 2560, 12352}, Case{24, 130, 640, 640, 130}, Case{32, 16448, 128, 128, 16448},
                 Case{20, 8200, 192, 200, 8201}}) {  // 256- and 128-row blocks
    const Problem pr(c.M, c.N, c.K, c.ldx, c.ldy, 500 + c.M + c.N);
    const int most = c.K / 64;
    std::vector<int> splits = {1, 2, 3, most, skinny_gemm_pick_splits(c.M, c.N, c.K, 132)};
    if (most > 7) splits.push_back(7);
    for (DType yt : {DType::bf16, DType::f32}) {
      for (int sp : splits) {
        // Every block width at every row count (the model picks 128 and 256 above 16 rows only).
        for (int bn : {0, 128, 256, 272}) {
          if (sp > most) continue;
          CAPTURE(c.M, c.N, c.K, c.ldx, c.ldy, dtype_name(yt), sp, bn);
          test::DevBuf y(static_cast<size_t>(c.M) * c.ldy * dtype_size(yt));  // poisoned: every element must be written
          test::DevBuf ws(std::max<size_t>(16, skinny_gemm_workspace_bytes(c.M, c.N, sp)));
          test::DevBuf counters(static_cast<size_t>((c.N + 63) / 64) * 4, 0);
          check(skinny_gemm(pr.params(y, yt, sp, ws, counters, bn), nullptr));
          check(cudaDeviceSynchronize());
          const auto got = y.download_f32(yt);
          CHECK(pr.bad(got, yt) == 0);
          const auto cb = counters.download();
          CHECK(std::all_of(cb.begin(), cb.end(), [](uint8_t b) { return b == 0; }));
        }
      }
    }
  }
}

TEST_CASE("skinny gemm: graph replay, eager and a rerun give the same bytes, columns past N untouched",
          "[gpu][gemm][skinny][graphs]") {
  const Problem pr(32, 2560, 4096, 4096, 2600, 900);
  for (auto [sp, bn] : {std::pair{1, 0}, std::pair{6, 0}, std::pair{1, 256}, std::pair{3, 128}}) {
    CAPTURE(sp, bn);
    test::DevBuf ws(std::max<size_t>(16, skinny_gemm_workspace_bytes(32, 2560, sp)));
    test::DevBuf counters(40 * 4, 0);
    const size_t bytes = static_cast<size_t>(32) * 2600 * 2;
    test::DevBuf eager(bytes, 0x5A), again(bytes, 0x5A), graphed(bytes, 0x5A);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    check(skinny_gemm(pr.params(eager, DType::bf16, sp, ws, counters, bn), s));
    check(skinny_gemm(pr.params(again, DType::bf16, sp, ws, counters, bn), s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const cudaError_t launched = skinny_gemm(pr.params(graphed, DType::bf16, sp, ws, counters, bn), s);
    check(cudaStreamEndCapture(s, &g));
    check(launched);
    check(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(ge, s));
    check(cudaStreamSynchronize(s));
    const auto e = eager.download();
    CHECK(test::byte_diff(again.download(), e, DType::bf16) == "");
    CHECK(test::byte_diff(graphed.download(), e, DType::bf16) == "");
    size_t touched = 0;  // columns [N, ldy) of every row keep their poison
    for (int t = 0; t < 32; ++t)
      for (size_t i = (static_cast<size_t>(t) * 2600 + 2560) * 2; i < static_cast<size_t>(t + 1) * 2600 * 2; ++i)
        touched += e[i] != 0x5A;
    CHECK(touched == 0);
    CHECK(pr.bad(eager.download_f32(DType::bf16), DType::bf16) == 0);
    check(cudaGraphExecDestroy(ge));
    check(cudaGraphDestroy(g));
    check(cudaStreamDestroy(s));
  }
}

TEST_CASE("skinny gemm: bad params are refused with the field named", "[gpu][gemm][skinny]") {
  const Problem pr(4, 128, 128, 128, 128, 77);
  test::DevBuf y(4 * 128 * 2), ws(6 * 4 * 128 * 4), counters(8, 0);
  const SkinnyGemmParams ok = pr.params(y, DType::bf16, 2, ws, counters);
  check(skinny_gemm(ok, nullptr));
  SkinnyGemmParams bad = ok;
  bad.workspace = nullptr;  // splits > 1 without a workspace
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: splits > 1 needs workspace and counters");
  bad = ok;
  bad.splits = 3;  // more splits than 64-wide K tiles
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: splits = 3, must be 1..2");
  bad = ok;
  bad.M = 33;
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: M = 33, must be 1..32");
  bad = ok;
  bad.ldx = 130;  // not a multiple of 8 (16-byte rows)
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: ldx must be >= K and a multiple of 8");
  bad = ok;
  bad.y_dtype = DType::f16;
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  bad = ok;
  bad.block_rows = 96;
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: block_rows must be 0, 64, 128, 256 or 272");
  bad = ok;
  bad.swiglu_group = 4;  // groups of 8 only
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: swiglu_group must be 0 or 8");
  bad = ok;
  bad.swiglu_group = 8;
  bad.y_dtype = DType::f32;  // act is bf16
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  bad = ok;
  bad.swiglu_group = 8;
  bad.ldy = 63;  // act rows are N / 2 = 64 wide
  CHECK(skinny_gemm(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "skinny_gemm: ldy must be >= N / 2");
  bad = ok;
  bad.M = 0;
  CHECK(skinny_gemm(bad, nullptr) == cudaSuccess);
  check(cudaDeviceSynchronize());
}

TEST_CASE("skinny gemm: the SwiGLU epilogue gives the bytes of the GEMM followed by the swiglu kernel",
          "[gpu][gemm][skinny][swiglu]") {
  struct Case {
    int M, N, K;
  };
  for (Case c : {Case{1, 64, 64}, Case{5, 1040, 640}, Case{8, 2048, 2560}, Case{17, 12288, 512}, Case{32, 4096, 1024},
                 Case{32, 18432, 256}, Case{32, 34816, 128}}) {
    const int I = c.N / 2, most = c.K / 64;
    // W's rows as the model lays gate_up out (gate and up in groups of 8); any bytes will do here.
    const auto x = test::uniform_bf16(static_cast<size_t>(c.M) * c.K, 700 + c.M, -1.f, 1.f);
    const auto W = test::uniform_bf16(static_cast<size_t>(c.N) * c.K, 701 + c.N, -0.1f, 0.1f);
    auto dx = test::DevBuf::from(x, DType::bf16), dW = test::DevBuf::from(W, DType::bf16);
    for (int sp : {1, 2, std::min(most, 5), skinny_gemm_pick_splits(c.M, c.N, c.K, 132)}) {
      for (int bn : {0, 128, 256, 272, skinny_gemm_block_rows(c.M, c.N, 132)}) {
        for (DType act : {DType::bf16, DType::f32}) {
          if (sp > most) continue;
          const int live = c.M > 2 ? c.M - 2 : c.M;
          CAPTURE(c.M, c.N, c.K, sp, bn, dtype_name(act), live);
          auto dlive = test::DevBuf::from_i32({live});
          test::DevBuf ws(std::max<size_t>(16, skinny_gemm_workspace_bytes(c.M, c.N, sp)));
          test::DevBuf counters(static_cast<size_t>((c.N + 63) / 64) * 4, 0);
          SkinnyGemmParams p;
          p.x = dx.data();
          p.W = dW.data();
          p.M = c.M;
          p.N = c.N;
          p.K = c.K;
          p.splits = sp;
          p.block_rows = bn;
          p.workspace = ws.as<float>();
          p.counters = counters.as<int32_t>();
          // The unfused pair: gu = x W^T (bf16), then act = swiglu(gu) with groups of 8.
          test::DevBuf gu(static_cast<size_t>(c.M) * c.N * 2), want(static_cast<size_t>(c.M) * I * 2);
          SkinnyGemmParams pg = p;
          pg.y = gu.data();
          check(skinny_gemm(pg, nullptr));
          SwigluParams sw;
          sw.gu = gu.data();
          sw.y = want.data();
          sw.act_dtype = act;
          sw.T = c.M;
          sw.I = I;
          sw.interleave = 8;
          sw.live_rows = dlive.as<int32_t>();
          check(swiglu(sw, nullptr));
          // The epilogue, into rows of I + 8 (the 8 past I keep their poison).
          const int ld = I + 8;
          test::DevBuf got(static_cast<size_t>(c.M) * ld * 2, 0x5A);
          SkinnyGemmParams pf = p;
          pf.y = got.data();
          pf.ldy = ld;
          pf.swiglu_group = 8;
          pf.act_dtype = act;
          pf.live_rows = dlive.as<int32_t>();
          check(skinny_gemm(pf, nullptr));
          check(cudaDeviceSynchronize());
          const auto g = got.download(), w = want.download();
          size_t diff = 0, touched = 0;
          for (int t = 0; t < c.M; ++t) {
            for (int b = 0; b < ld * 2; ++b) {
              const uint8_t v = g[static_cast<size_t>(t) * ld * 2 + b];
              if (b < I * 2) {
                diff += v != w[static_cast<size_t>(t) * I * 2 + b];
              } else {
                touched += v != 0x5A;
              }
            }
          }
          CHECK(diff == 0);
          CHECK(touched == 0);
          const auto cb = counters.download();
          CHECK(std::all_of(cb.begin(), cb.end(), [](uint8_t b) { return b == 0; }));
        }
      }
    }
  }
}

// The residual projections' deferred split-K sum: the skinny GEMM writes only its partials
// (defer_sum) and the RMSNorm after sums them (x_splits, round_x): h and the residual stream come out
// with the bytes of the GEMM's own bf16 y followed by the norm, padded tokens included; the counters
// are not touched; the norm refuses the shapes and dtypes it cannot sum.
TEST_CASE("skinny gemm: partials summed by the RMSNorm after (defer_sum, x_splits) give the bytes of its bf16 y",
          "[gpu][gemm][skinny][norms]") {
  struct Case {
    int M, N, K;
  };
  // N = 8192: the norm's one-row kernel of 1024 threads, four planes' loads in flight (eight up to 5120).
  for (Case c : {Case{32, 2560, 9216}, Case{32, 2560, 4096}, Case{8, 2560, 9216}, Case{1, 1024, 2048},
                 Case{17, 5120, 6144}, Case{4, 8192, 2048}}) {
    const int most = std::min(c.K / 64, 32);
    const auto x = test::uniform_bf16(static_cast<size_t>(c.M) * c.K, 900 + c.M, -1.f, 1.f);
    const auto W = test::uniform_bf16(static_cast<size_t>(c.N) * c.K, 901 + c.K, -0.1f, 0.1f);
    const auto r0 = test::uniform_bf16(static_cast<size_t>(c.M) * c.N, 902, -2.f, 2.f);
    const auto wn = test::uniform_bf16(static_cast<size_t>(c.N), 903, -0.5f, 0.5f);
    auto dx = test::DevBuf::from(x, DType::bf16), dW = test::DevBuf::from(W, DType::bf16);
    auto dwn = test::DevBuf::from(wn, DType::bf16);
    for (int sp : {2, 3, skinny_gemm_pick_splits(c.M, c.N, c.K, 132), most}) {
      if (sp < 2 || sp > most) continue;
      const int live = c.M > 2 ? c.M - 2 : c.M;
      CAPTURE(c.M, c.N, c.K, sp, live);
      auto dlive = test::DevBuf::from_i32({live});
      test::DevBuf ws(skinny_gemm_workspace_bytes(c.M, c.N, sp));
      test::DevBuf counters(static_cast<size_t>((c.N + 63) / 64) * 4, 0);
      test::DevBuf y(static_cast<size_t>(c.M) * c.N * 2);
      const SkinnyGemmParams p = gemm_params(dx, 0, dW, y, 0, DType::bf16, c.M, c.N, c.K, sp, ws, counters, 0);
      RmsNormParams np;  // x = round(round(y) + res) into res, h = rmsnorm(x), as the model step's norm
      np.residual_dtype = DType::bf16;
      np.w = dwn.data();
      np.w_dtype = DType::bf16;
      np.T = c.M;
      np.n = c.N;
      np.live_rows = dlive.as<int32_t>();
      // The GEMM's own sum into bf16 y, then the norm reading y.
      auto res_a = test::DevBuf::from(r0, DType::bf16);
      test::DevBuf h_a(static_cast<size_t>(c.M) * c.N * 2);
      check(skinny_gemm(p, nullptr));
      RmsNormParams na = np;
      na.x = y.data();
      na.x_dtype = DType::bf16;
      na.residual = res_a.data();
      na.residual_out = res_a.data();
      na.y = h_a.data();
      check(rmsnorm(na, nullptr));
      // The partials only (y and the counters poisoned and checked untouched), summed by the norm.
      auto res_b = test::DevBuf::from(r0, DType::bf16);
      test::DevBuf h_b(static_cast<size_t>(c.M) * c.N * 2), y_b(static_cast<size_t>(c.M) * c.N * 2, 0x5A);
      test::DevBuf counters_b(static_cast<size_t>((c.N + 63) / 64) * 4, 0x11);
      SkinnyGemmParams pd = p;
      pd.y = y_b.data();
      pd.counters = counters_b.as<int32_t>();
      pd.defer_sum = true;
      check(skinny_gemm(pd, nullptr));
      RmsNormParams nb = np;
      nb.x = ws.data();
      nb.x_dtype = DType::f32;
      nb.round_x = true;
      nb.x_splits = sp;
      nb.x_split_stride = static_cast<int64_t>(c.M) * c.N;
      nb.residual = res_b.data();
      nb.residual_out = res_b.data();
      nb.y = h_b.data();
      check(rmsnorm(nb, nullptr));
      check(cudaDeviceSynchronize());
      CHECK(h_b.download() == h_a.download());
      CHECK(res_b.download() == res_a.download());
      const auto yb = y_b.download(), cb = counters_b.download();
      CHECK(std::all_of(yb.begin(), yb.end(), [](uint8_t b) { return b == 0x5A; }));
      CHECK(std::all_of(cb.begin(), cb.end(), [](uint8_t b) { return b == 0x11; }));
      // Refusals, each before a launch: a bf16 x, no round_x, a plane stride short of T rows, a row
      // the 16-byte kernel does not take, a SwiGLU epilogue with defer_sum.
      RmsNormParams bad = nb;
      bad.x_dtype = DType::bf16;
      CHECK(rmsnorm(bad, nullptr) == cudaErrorInvalidValue);
      CHECK(take_launch_refusal().find("x_splits > 1 needs an f32 x") != std::string::npos);
      bad = nb;
      bad.round_x = false;
      CHECK(rmsnorm(bad, nullptr) == cudaErrorInvalidValue);
      bad = nb;
      bad.x_split_stride = static_cast<int64_t>(c.M) * c.N - 1;
      CHECK(rmsnorm(bad, nullptr) == cudaErrorInvalidValue);
      CHECK(take_launch_refusal().find("x_split_stride") != std::string::npos);
      bad = nb;
      bad.n = 256;
      bad.T = 1;
      CHECK(rmsnorm(bad, nullptr) == cudaErrorInvalidValue);
      CHECK(take_launch_refusal().find("16-byte kernel") != std::string::npos);
      SkinnyGemmParams bg = pd;
      bg.swiglu_group = 8;
      CHECK(skinny_gemm(bg, nullptr) == cudaErrorInvalidValue);
    }
  }
}

// A race in the TMA ring (a stage read before its copy landed or overwritten while a warp still
// reads it) or in the split-K sum (a partial read before it is visible) would make some launch's
// bytes differ from another's. Two GEMMs run at once on two streams, so which blocks share an SM
// changes from launch to launch; y is poisoned before every launch, so an output left unwritten
// shows too. Shapes: the 4B in_proj at 32 rows with 7 splits and 128-row blocks, and the 4B down
// projection with the model's split pick (f32 out). It found one: without the cross-proxy fence
// before a stage's refill (kernels/tma_util.cuh, release_reads) 9 to 25 of 3000 down launches
// gave wrong partials for single W rows of a split, all 32 tokens (the jitter probe never did).
TEST_CASE("skinny gemm: 3000 launches beside another GEMM on a second stream give the first launch's bytes",
          "[gpu][stress]") {  // not [skinny] or [gemm]: 6000 launches are too many for the sanitizers' filters
  struct Job {
    int M, N, K, splits, bn;
    DType yt;
    test::DevBuf dx, dW, y, ws, counters;
    cudaStream_t s = nullptr;
    std::vector<uint8_t> first;
    size_t bad_launches = 0;
    std::string first_diff;
    Job(int M_, int N_, int K_, int splits_, int bn_, DType yt_, uint64_t seed)
        : M(M_),
          N(N_),
          K(K_),
          splits(splits_),
          bn(bn_),
          yt(yt_),
          dx(test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(M_) * K_, seed, -1.f, 1.f), DType::bf16)),
          dW(test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(N_) * K_, seed + 1, -0.1f, 0.1f), DType::bf16)),
          y(static_cast<size_t>(M_) * N_ * dtype_size(yt_)),
          ws(std::max<size_t>(16, skinny_gemm_workspace_bytes(M_, N_, splits_))),
          counters(static_cast<size_t>((N_ + 63) / 64) * 4, 0) {
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    ~Job() { cudaStreamDestroy(s); }
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;
    void launch() {
      check(cudaMemsetAsync(y.data(), 0xA5, y.bytes(), s));
      check(skinny_gemm(gemm_params(dx, K, dW, y, N, yt, M, N, K, splits, ws, counters, bn), s));
    }
    void compare() {
      check(cudaStreamSynchronize(s));
      auto got = y.download();
      if (first.empty()) {
        first = std::move(got);
        return;
      }
      const std::string d = test::byte_diff(got, first, yt);
      if (!d.empty() && bad_launches++ == 0) first_diff = d;
    }
  };
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Job in_proj(32, 12352, 2560, 7, 128, DType::bf16, 4242);
  Job down(32, 2560, 9216, skinny_gemm_pick_splits(32, 2560, 9216, sms), 0, DType::f32, 4343);
  constexpr int kLaunches = 3000;
  for (int i = 0; i < kLaunches; ++i) {
    in_proj.launch();
    down.launch();
    in_proj.compare();
    down.compare();
  }
  INFO("in_proj: " << in_proj.bad_launches << " of " << kLaunches - 1
                   << " launches differ; first: " << in_proj.first_diff);
  INFO("down: " << down.bad_launches << " of " << kLaunches - 1 << " launches differ; first: " << down.first_diff);
  CHECK(in_proj.bad_launches == 0);
  CHECK(down.bad_launches == 0);
  const auto cb = in_proj.counters.download();
  CHECK(std::all_of(cb.begin(), cb.end(), [](uint8_t b) { return b == 0; }));
}
