// GPU tests of the cuBLAS projection y = x W^T (cublasGemmEx, and cuBLASLt with the algorithm
// chosen per shape, engine/gemm_lt.h): against the CPU reference linear, through strided views,
// and captured into a CUDA graph (replay byte-identical to the eager call); cuBLASLt's choices kept
// as JSON (models/lt_choices.h) and added back.
#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/gemm.h"
#include "engine/gemm_lt.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/fill.h"
#include "kernels/ref/mlp_ref.h"
#include "models/lt_choices.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;

namespace {

// y = x W^T at one shape: x [T, in] (bf16 in [-1, 1), seed) and W [out, in] (bf16 in [-0.05, 0.05),
// seed + 1) on the device, two poisoned bf16 outputs y1, y2 [T, out], and their views. The uploads
// and the poison (legacy stream) have finished when the constructor returns, before any GEMM's
// stream runs.
struct XwProblem {
  int T, in, out;
  test::DevBuf dx, dW, y1, y2;
  TensorView vx, vW, v1, v2;
  XwProblem(int T_, int in_, int out_, uint64_t seed)
      : T(T_),
        in(in_),
        out(out_),
        dx(test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(T_) * in_, seed), DType::bf16)),
        dW(test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(out_) * in_, seed + 1, -0.05f, 0.05f),
                              DType::bf16)),
        y1(static_cast<size_t>(T_) * out_ * 2),
        y2(static_cast<size_t>(T_) * out_ * 2) {
    check(cudaDeviceSynchronize());
    vx = TensorView::contiguous(dx.data(), DType::bf16, {T, in});
    vW = TensorView::contiguous(dW.data(), DType::bf16, {out, in});
    v1 = TensorView::contiguous(y1.data(), DType::bf16, {T, out});
    v2 = TensorView::contiguous(y2.data(), DType::bf16, {T, out});
  }
};

}  // namespace

TEST_CASE("gemm x W^T matches the reference linear, also through strided rows (cublasGemmEx and cuBLASLt)",
          "[gpu][gemm]") {
  Stream s;
  CublasHandle h(s.get());
  LtGemm lt(s.get(), h.workspace(), h.workspace_bytes());
  for (bool use_lt : {false, true}) {
    struct Case {
      int T, in, out, x_stride, y_stride;
    };
    for (Case c : {Case{1, 64, 32, 64, 32}, Case{17, 2560, 384, 2560, 384}, Case{33, 129, 127, 200, 131},
                   Case{300, 512, 1000, 512, 1000}}) {
      for (DType yt : {DType::bf16, DType::f32}) {
        CAPTURE(use_lt, c.T, c.in, c.out, c.x_stride, c.y_stride, dtype_name(yt));
        auto x = test::uniform_bf16(static_cast<size_t>(c.T) * c.x_stride, 11 + c.T, -1.f, 1.f);
        auto W = test::uniform_bf16(static_cast<size_t>(c.out) * c.in, 12 + c.in, -0.1f, 0.1f);
        auto dx = test::DevBuf::from(x, DType::bf16), dW = test::DevBuf::from(W, DType::bf16);
        test::DevBuf dy(static_cast<size_t>(c.T) * c.y_stride * dtype_size(yt));  // poisoned
        check(cudaDeviceSynchronize());  // uploads and poison (legacy stream) before the GEMM's stream
        TensorView vx = TensorView::contiguous(dx.data(), DType::bf16, {c.T, c.in});
        vx.stride[0] = c.x_stride;
        TensorView vW = TensorView::contiguous(dW.data(), DType::bf16, {c.out, c.in});
        TensorView vy = TensorView::contiguous(dy.data(), yt, {c.T, c.out});
        vy.stride[0] = c.y_stride;
        if (use_lt) {
          check(cudaMemsetAsync(dy.data(), 0x7F, dy.bytes(), s.get()));  // the columns past `out` too
          lt.tune(vx, vW, vy);  // times the candidates, leaves the chosen one's result
          s.sync();
          const auto tuned = dy.download();
          check(cudaMemsetAsync(dy.data(), 0x7F, dy.bytes(), s.get()));
          lt.run(vx, vW, vy);
          s.sync();
          CHECK(test::byte_diff(dy.download(), tuned, yt) == "");  // one choice, the same bytes
          CHECK(lt.describe(lt_shape(vx, vW, vy)).rfind("lt algo=", 0) == 0);
        } else {
          gemm_xwt(h, vx, vW, vy);
        }
        s.sync();
        auto got = dy.download_f32(yt);
        // Reference on the dense x rows.
        std::vector<float> xd(static_cast<size_t>(c.T) * c.in), ref(static_cast<size_t>(c.T) * c.out);
        for (int t = 0; t < c.T; ++t) {
          for (int i = 0; i < c.in; ++i)
            xd[static_cast<size_t>(t) * c.in + i] = x[static_cast<size_t>(t) * c.x_stride + i];
        }
        ref::linear(xd.data(), W.data(), ref.data(), c.T, c.in, c.out);
        // f32 accumulation in another order: |err| <= 1e-5 * sum |x||w| (+ one bf16 rounding of y).
        size_t bad = 0;
        for (int t = 0; t < c.T; ++t) {
          for (int o = 0; o < c.out; ++o) {
            double mag = 0;
            for (int i = 0; i < c.in; ++i) {
              mag += std::fabs(xd[static_cast<size_t>(t) * c.in + i] * W[static_cast<size_t>(o) * c.in + i]);
            }
            const double r = ref[static_cast<size_t>(t) * c.out + o];
            const double tol = 1e-5 * mag + (yt == DType::bf16 ? std::ldexp(1.0, -8) * std::fabs(r) : 0.0) + 1e-7;
            bad += !(std::fabs(got[static_cast<size_t>(t) * c.y_stride + o] - r) <= tol);
          }
        }
        CHECK(bad == 0);
      }
    }
  }
  CHECK(lt.shapes() == 8);  // 4 shapes x 2 output dtypes
}

TEST_CASE("cuBLASLt gemm: replay equals eager, untuned shapes refused, tuning under capture refused",
          "[gpu][gemm][graphs]") {
  Stream s;
  CublasHandle h(s.get());
  LtGemm lt(s.get(), h.workspace(), h.workspace_bytes(), 4);
  const XwProblem pr(32, 2560, 1024, 15);
  const int T = pr.T, in = pr.in, out = pr.out;
  const test::DevBuf &dx = pr.dx, &dW = pr.dW, &eager = pr.y1, &replay = pr.y2;
  const TensorView &vx = pr.vx, &vW = pr.vW, &ve = pr.v1, &vr = pr.v2;
  CHECK_THROWS_AS(lt.run(vx, vW, ve), Error);  // not tuned
  CHECK_FALSE(lt.tuned(lt_shape(vx, vW, ve)));
  {  // tuning inside a capture is refused (and the capture ends cleanly)
    cudaGraph_t g = nullptr;
    check(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
    bool threw = false;
    try {
      lt.tune(vx, vW, ve);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("not tuned before the capture") != std::string::npos;
    }
    check(cudaStreamEndCapture(s.get(), &g));
    if (g) check(cudaGraphDestroy(g));
    CHECK(threw);
  }
  lt.tune(vx, vW, ve);
  REQUIRE(lt.tuned(lt_shape(vx, vW, ve)));
  CHECK(lt.tuned(lt_shape(vx, vW, vr)));  // same shape and alignment, other buffer
  s.sync();
  auto g = CapturedGraph::capture("lt gemm", s.get(), [&] { lt.run(vx, vW, vr); });
  g.replay(s.get());
  s.sync();
  CHECK(test::byte_diff(replay.download(), eager.download(), DType::bf16) == "");
  // The same shape with x 2 bytes off its alignment is another key: not tuned (an algorithm may
  // need aligned operands).
  auto vx2 = TensorView::contiguous(static_cast<char*>(dx.data()) + 2, DType::bf16, {T, in});
  const LtShape off = lt_shape(vx2, vW, ve);
  CHECK(off.align_x == 2);
  CHECK(lt_shape(vx, vW, ve).align_x == 256);
  CHECK_FALSE(lt.tuned(off));
  // A second LtGemm of the process takes the first one's choice: the same bytes.
  LtGemm other(s.get(), h.workspace(), h.workspace_bytes(), 4);
  test::DevBuf again(static_cast<size_t>(T) * out * 2);
  other.tune(vx, vW, TensorView::contiguous(again.data(), DType::bf16, {T, out}));
  s.sync();
  CHECK(other.describe(lt_shape(vx, vW, ve)) == lt.describe(lt_shape(vx, vW, ve)));
  CHECK(test::byte_diff(again.download(), eager.download(), DType::bf16) == "");
  CHECK_THROWS_AS(lt_shape(vx, TensorView::contiguous(dW.data(), DType::bf16, {out, in - 1}), ve), Error);
}

TEST_CASE("cuBLASLt choices: written out, forgotten and added back, they run again with the same bytes",
          "[gpu][gemm][lt_choices]") {
  Stream s;
  CublasHandle h(s.get());
  int device = 0;
  check(cudaGetDevice(&device));
  lt_clear_choices();
  const XwProblem pr(32, 512, 768, 25);
  const test::DevBuf &first = pr.y1, &again = pr.y2;
  const TensorView &vx = pr.vx, &vW = pr.vW, &v1 = pr.v1, &v2 = pr.v2;
  std::string text;
  {
    LtGemm lt(s.get(), h.workspace(), h.workspace_bytes(), 4);
    lt.tune(vx, vW, v1);
    text = lt.describe(lt_shape(vx, vW, v1));
  }
  const nlohmann::json doc = lt_choices_json(device, "this device");
  REQUIRE(doc["choices"].size() == 1);
  CHECK(doc["choices"][0]["text"] == text);
  lt_clear_choices();
  CHECK(add_lt_choices(doc, "doc", device, "this device") == 1);
  {
    LtGemm lt(s.get(), h.workspace(), h.workspace_bytes(), 4);
    lt.tune(vx, vW, v2);  // takes the added choice
    s.sync();
    CHECK(lt.describe(lt_shape(vx, vW, v2)) == text);
    CHECK(test::byte_diff(again.download(), first.download(), DType::bf16) == "");
  }
  // An added algorithm whose bytes do not launch: the shape is timed instead, and works.
  lt_clear_choices();
  nlohmann::json bad = doc;
  bad["choices"][0]["algo"] = std::string(128, 'f');
  CHECK(add_lt_choices(bad, "bad", device, "this device") == 1);
  {
    LtGemm lt(s.get(), h.workspace(), h.workspace_bytes(), 4);
    CHECK_NOTHROW(lt.tune(vx, vW, v2));
    CHECK(lt.tuned(lt_shape(vx, vW, v2)));
    s.sync();
    const auto got = again.download_f32(DType::bf16), want = first.download_f32(DType::bf16);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
    CHECK(worst < 0.05);  // another algorithm, another summation order: within a few bf16 ulps of |y| < 2
  }
  lt_clear_choices();
}

TEST_CASE("gemm runs inside a captured graph after a warm-up, byte-identical to eager", "[gpu][gemm][graphs]") {
  Stream s;
  CublasHandle h(s.get());
  const XwProblem pr(32, 2560, 1024, 5);
  gemm_xwt(h, pr.vx, pr.vW, pr.v1);  // warm-up + eager result
  s.sync();
  auto g = CapturedGraph::capture("gemm", s.get(), [&] { gemm_xwt(h, pr.vx, pr.vW, pr.v2); });
  g.replay(s.get());
  s.sync();
  CHECK(test::byte_diff(pr.y2.download(), pr.y1.download(), DType::bf16) == "");
}

TEST_CASE("gemm rejects mismatched shapes and dtypes with the views named", "[gpu][gemm]") {
  Stream s;
  CublasHandle h(s.get());
  test::DevBuf b(4096);
  auto x = TensorView::contiguous(b.data(), DType::bf16, {4, 8});
  auto W = TensorView::contiguous(b.data(), DType::bf16, {16, 9});
  auto y = TensorView::contiguous(b.data(), DType::f32, {4, 16});
  CHECK_THROWS_AS(gemm_xwt(h, x, W, y), Error);
  auto Wf = TensorView::contiguous(b.data(), DType::f32, {16, 8});
  CHECK_THROWS_AS(gemm_xwt(h, x, Wf, y), Error);
}

TEST_CASE("the recorder labels every kernel of a cuBLAS call and catches an unlabelled launch", "[gpu][gemm][graphs]") {
  Stream s;
  CublasHandle h(s.get());
  // The 4B preset's MLP down projection at decode b=32: the shape cuBLAS splits into a GEMM and a
  // reduction (two kernel nodes for one call) on the H200.
  const int T = 32, in = 9216, out = 2560;
  auto dx = test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(T) * in, 7), DType::bf16);
  auto dW = test::DevBuf::from(test::uniform_bf16(static_cast<size_t>(out) * in, 8, -0.02f, 0.02f), DType::bf16);
  test::DevBuf y(static_cast<size_t>(T) * out * 2);
  check(cudaDeviceSynchronize());
  auto vx = TensorView::contiguous(dx.data(), DType::bf16, {T, in});
  auto vW = TensorView::contiguous(dW.data(), DType::bf16, {out, in});
  auto vy = TensorView::contiguous(y.data(), DType::bf16, {T, out});
  gemm_xwt(h, vx, vW, vy);  // warm-up outside capture
  s.sync();
  NodeRecorder rec;
  auto g = CapturedGraph::capture("gemm labels", s.get(), [&] {
    gemm_xwt(h, vx, vW, vy);
    rec.launched(s.get(), {0, "mlp.down", "cublas", 1000.0}, NodeRecorder::kAnyKernels);
    check(fill_uniform(y.data(), DType::bf16, 16, 1, 0.f, 1.f, s.get()));
    rec.launched(s.get(), {0, "fill", "-", 0});
  });
  const Manifest m = build_manifest("gemm labels", "-", g.graph(), rec);
  INFO("kernel nodes: " << m.nodes.size());
  CHECK(m.nodes.size() >= 2);
  CHECK(m.unlabelled() == 0);
  CHECK(m.nodes.back().label.op == "fill");
  double gemm_bytes = 0;
  for (size_t i = 0; i + 1 < m.nodes.size(); ++i) {
    CHECK(m.nodes[i].label.op == "mlp.down");
    gemm_bytes += m.nodes[i].label.bytes;
  }
  CHECK(gemm_bytes == 1000.0);  // the launch's bytes counted once over its nodes

  // A launch without its label: the next label finds two kernel nodes and says so.
  NodeRecorder rec2;
  std::string msg;
  try {
    CapturedGraph::capture("missing label", s.get(), [&] {
      check(fill_uniform(y.data(), DType::bf16, 16, 1, 0.f, 1.f, s.get()));
      check(fill_uniform(y.data(), DType::bf16, 16, 2, 0.f, 1.f, s.get()));
      rec2.launched(s.get(), {0, "fill", "-", 0});
    });
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("added 2 kernel nodes") != std::string::npos);
  s.sync();
}
