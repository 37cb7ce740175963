// GPU tests of the swiglu kernel (kernels/swiglu.h) against ref::swiglu_mlp's elementwise step:
// both layouts of the fused gate-up buffer, every dtype combination, padded tokens, rows wider than
// 2I, the 16-byte kernel's one- and four-groups-a-thread forms against the element kernel byte for
// byte (also for gates outside the exact range of the 16-byte kernel's fast SiLU: zeros, tiny and
// huge values, infinities, NaN), and the launcher's refusals. Poisoned outputs, guards and
// tolerances: norm_fixture.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/launch_check.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/swiglu.h"
#include "tests/gpu/norm_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"

using namespace sg;
using namespace sg::test::norms;  // NOLINT: the shared checks

TEST_CASE("swiglu: silu(gate) times up from a fused gate-up buffer matches the reference", "[gpu][norms]") {
  struct Types {
    DType gu, act, y;
    double ulps;
  };
  for (Types ty : {Types{DType::bf16, DType::bf16, DType::bf16, 2}, Types{DType::bf16, DType::f32, DType::bf16, 1},
                   Types{DType::f32, DType::f32, DType::f32, 0}}) {
    for (int I : {1, 127, 129, 2560, 17408}) {
      for (int T : {1, 17, 130, 300}) {
        for (int il : {0, 8}) {
          if (I == 17408 && T == 300) continue;  // host time; T = 17 and 130 cover this width
          if (T == 130 && I != 17408) continue;  // 130 x 2176 groups of 8: the kernel's four-a-thread form
          if (il != 0 && I % il != 0) continue;
          const int live = T > 1 ? T - 3 : T;
          // Rows wider than 2I: by 3 at T = 17 (the element kernel: not 16-byte aligned), by 8 at
          // T = 130 and 300 (the 16-byte kernel, four groups a thread at 130, one at 300).
          const int64_t stride = 2 * static_cast<int64_t>(I) + (T == 17 ? 3 : T >= 130 ? 8 : 0);
          const uint64_t seed = 6000 + I + T + 10 * static_cast<int>(ty.gu) + static_cast<int>(ty.act);
          CAPTURE(dtype_name(ty.gu), dtype_name(ty.act), dtype_name(ty.y), I, T, il, live, stride, seed);
          auto gu = rnd(static_cast<size_t>(T) * stride, seed, ty.gu, -6.f, 6.f);
          const size_t N = static_cast<size_t>(T) * I;
          std::vector<float> want(N);
          // ref::swiglu_mlp's elementwise step: a = store(silu(g), act), h = store(a * u, out).
          for (int t = 0; t < T; ++t) {
            for (int i = 0; i < I; ++i) {
              // Halves (gate i at i, up at I + i) or groups of 8 (gate at 16 (i / 8) + i % 8, up 8 on).
              const int64_t gi = il ? (i / 8) * 16 + i % 8 : i, ui = il ? gi + 8 : I + i;
              const float g = gu[t * stride + gi], u = gu[t * stride + ui];
              const float a = ref::store(g / (1.0f + std::exp(-g)), store_of(ty.act));
              want[static_cast<size_t>(t) * I + i] = ref::store(a * u, store_of(ty.y));
            }
          }
          auto dgu = test::DevBuf::from(gu, ty.gu), dlive = test::DevBuf::from_i32({live});
          auto y = out_buf(N, ty.y);
          SwigluParams p;
          p.gu = dgu.data();
          p.gu_dtype = ty.gu;
          p.gu_stride = stride;
          p.y = y.data();
          p.y_dtype = ty.y;
          p.act_dtype = ty.act;
          p.T = T;
          p.I = I;
          p.interleave = il;
          p.live_rows = T > 1 ? dlive.as<int32_t>() : nullptr;
          check(swiglu(p, nullptr));
          auto g = fetch(y, N, ty.y);
          CHECK(g.guard_ok);
          CHECK(compare(g.v, want, ty.y, ty.ulps, static_cast<size_t>(live) * I) == "");
          if (swiglu_vector_path(p)) {
            // The element kernel on the same inputs (y one element past a 16-byte boundary, so
            // the 16-byte kernel does not apply): the same bytes as the 16-byte kernel's form.
            auto y2 = out_buf(N + 1, ty.y);
            p.y = static_cast<uint8_t*>(y2.data()) + dtype_size(ty.y);
            REQUIRE_FALSE(swiglu_vector_path(p));
            check(swiglu(p, nullptr));
            auto g2 = y2.download();
            g2.erase(g2.begin(), g2.begin() + static_cast<std::ptrdiff_t>(dtype_size(ty.y)));
            g2.resize(g.bytes.size());
            CHECK(g2 == g.bytes);
          }
        }
      }
    }
  }
  SwigluParams bad;  // groups of 8 need I % 8 == 0; no other group size
  test::DevBuf gu(4 * 24 * 4), y(4 * 12 * 4);
  bad.gu = gu.data();
  bad.y = y.data();
  bad.T = 4;
  bad.I = 12;
  bad.interleave = 8;
  CHECK(swiglu(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "swiglu: interleave 8 needs I % 8 == 0");
  bad.I = 8;
  bad.interleave = 4;
  CHECK(swiglu(bad, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "swiglu: interleave must be 0 or 8");
  bad.interleave = 8;
  check(swiglu(bad, nullptr));
  check(cudaDeviceSynchronize());
}

TEST_CASE("swiglu: gates outside the fast SiLU's exact range give the element kernel's bytes", "[gpu][norms]") {
  // dev::silu_fast is exact for 2^-60 <= |g| <= FLT_MAX with 1 + exp(-g) <= 2^64; a group of 8 with a
  // gate outside that range takes dev::silu. Every edge value lands in groups of both forms of the
  // 16-byte kernel (four groups a thread at T = 130, I = 17408; one at T = 5, I = 2560), beside
  // ordinary gates in the same group, in both layouts; the element kernel (dev::silu everywhere) on
  // the same inputs must give the same bytes.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {0.0f,   -0.0f,  1e-30f, -1e-30f, 0x1p-61f, -0x1p-61f, 0x1p-60f, 44.0f,
                                    -44.0f, -45.0f, 100.0f, -100.0f, 1e30f,    -1e30f,    3e38f,    -3e38f,
                                    inf,    -inf,   nan,    -88.0f,  -89.0f,   0.5f};
  for (const auto& [T, I] : {std::pair{130, 17408}, std::pair{5, 2560}}) {
    for (int il : {0, 8}) {
      const int64_t stride = 2 * static_cast<int64_t>(I);
      auto gu = rnd(static_cast<size_t>(T) * stride, 7000 + T + il, DType::bf16, -6.f, 6.f);
      // Gate i of token t at t stride + (il ? 16 (i / 8) + i % 8 : i): edge values at a spread of
      // tokens and columns, one to a few a group.
      size_t k = 0;
      for (int t = 0; t < T; t += std::max(1, T / 7)) {
        for (int i = t % 8; i < I; i += I / 9 + 5, ++k) {
          const int64_t gi = il ? (i / 8) * 16 + i % 8 : i;
          gu[static_cast<size_t>(t * stride + gi)] = edges[k % edges.size()];
        }
      }
      CAPTURE(T, I, il, k);
      auto dgu = test::DevBuf::from(gu, DType::bf16);
      const size_t N = static_cast<size_t>(T) * I;
      SwigluParams p;
      p.gu = dgu.data();
      p.gu_dtype = DType::bf16;
      p.y_dtype = DType::bf16;
      p.act_dtype = DType::bf16;
      p.T = T;
      p.I = I;
      p.interleave = il;
      auto y = out_buf(N, DType::bf16);
      p.y = y.data();
      REQUIRE(swiglu_vector_path(p));
      check(swiglu(p, nullptr));
      auto g = fetch(y, N, DType::bf16);
      CHECK(g.guard_ok);
      auto y2 = out_buf(N + 1, DType::bf16);
      p.y = static_cast<uint8_t*>(y2.data()) + 2;
      REQUIRE_FALSE(swiglu_vector_path(p));
      check(swiglu(p, nullptr));
      auto g2 = y2.download();
      g2.erase(g2.begin(), g2.begin() + 2);
      g2.resize(g.bytes.size());
      CHECK(g2 == g.bytes);
    }
  }
}
