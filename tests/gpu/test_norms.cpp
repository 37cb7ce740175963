// GPU tests of the norm kernels of the model step against their CPU references: rmsnorm (plain,
// fused residual add, summed split planes, per-head strided rows) and gated_rmsnorm (embedding and
// argmax: test_embedding_argmax.cpp; swiglu: test_swiglu.cpp). Poisoned outputs, guards and
// tolerances: norm_fixture.h.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/rmsnorm.h"
#include "tests/gpu/norm_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;

using namespace sg::test::norms;  // NOLINT: the shared checks

TEST_CASE("rmsnorm: matches the reference for awkward sizes, dtypes and padded tokens", "[gpu][norms]") {
  struct Types {
    DType x, w, y;
  };
  // bf16 x and y with n % 256 == 0 run the 16-byte row kernel (bf16 or f32 weights); the rest the strided loop.
  for (Types ty : {Types{DType::bf16, DType::f32, DType::bf16}, Types{DType::f32, DType::f32, DType::f32},
                   Types{DType::bf16, DType::bf16, DType::f32}, Types{DType::bf16, DType::bf16, DType::bf16}}) {
    for (int n : {1, 127, 129, 256, 2560, 5120}) {
      for (int T : {1, 17, 300}) {
        const int live = T > 1 ? T - T / 3 : T;  // T = 1: no live_rows pointer
        const uint64_t seed = 7000 + 31 * n + T + 1000 * static_cast<int>(ty.x) + 100 * static_cast<int>(ty.y);
        CAPTURE(dtype_name(ty.x), dtype_name(ty.w), dtype_name(ty.y), n, T, live, seed);
        const size_t N = static_cast<size_t>(T) * n;
        auto x = rnd(N, seed, ty.x, -2.f, 2.f);
        if (T > 1) std::fill(x.begin() + n, x.begin() + 2 * n, 0.0f);  // an all-zero row: y = 0
        auto w = rnd(n, seed + 1, ty.w, -0.5f, 0.5f);
        std::vector<float> want(N);
        ref::rmsnorm(x.data(), w.data(), want.data(), T, n, kEps, store_of(ty.y));
        auto dx = test::DevBuf::from(x, ty.x), dw = test::DevBuf::from(w, ty.w);
        auto dlive = test::DevBuf::from_i32({live});
        auto y = out_buf(N, ty.y);
        RmsNormParams p;
        p.x = dx.data();
        p.x_dtype = ty.x;
        p.w = dw.data();
        p.w_dtype = ty.w;
        p.y = y.data();
        p.y_dtype = ty.y;
        p.T = T;
        p.n = n;
        p.eps = kEps;
        p.live_rows = T > 1 ? dlive.as<int32_t>() : nullptr;
        check(rmsnorm(p, nullptr));
        auto g = fetch(y, N, ty.y);
        CHECK(g.guard_ok);
        CHECK(compare(g.v, want, ty.y, 1, static_cast<size_t>(live) * n) == "");
      }
    }
  }
}

TEST_CASE("rmsnorm: a row gives the same bytes in every bucket size and in place", "[gpu][norms]") {
  // 1025 rows: the 16-byte kernel's two rows a block (kVecRowsMin; n <= 5120), the last block's second
  // row past the end, and one a block above 5120; 300 and 17 rows: one a block.
  for (int n : {129, 2560, 5120, 8192}) {
    CAPTURE(n);
    const int T_small = 17, T_mid = 300, T_big = 1025;
    auto x = test::uniform_bf16(static_cast<size_t>(T_big) * n, 42 + n, -3.f, 3.f);
    auto w = test::uniform(n, 43 + n, -0.5f, 0.5f);
    auto dx = test::DevBuf::from(x, DType::bf16), dw = test::DevBuf::from(w, DType::f32);
    auto run = [&](int T, void* y) {
      RmsNormParams p;
      p.x = dx.data();
      p.x_dtype = DType::bf16;
      p.w = dw.data();
      p.y = y;
      p.y_dtype = DType::bf16;
      p.T = T;
      p.n = n;
      check(rmsnorm(p, nullptr));
    };
    auto y_small = out_buf(static_cast<size_t>(T_small) * n, DType::bf16);
    auto y_mid = out_buf(static_cast<size_t>(T_mid) * n, DType::bf16);
    auto y_big = out_buf(static_cast<size_t>(T_big) * n, DType::bf16);
    run(T_small, y_small.data());
    run(T_mid, y_mid.data());
    run(T_big, y_big.data());
    auto gs = fetch(y_small, static_cast<size_t>(T_small) * n, DType::bf16);
    auto gm = fetch(y_mid, static_cast<size_t>(T_mid) * n, DType::bf16);
    auto gb = fetch(y_big, static_cast<size_t>(T_big) * n, DType::bf16);
    CHECK(gs.guard_ok);
    CHECK(gm.guard_ok);
    CHECK(gb.guard_ok);
    gb.bytes.resize(gs.bytes.size());
    gm.bytes.resize(gs.bytes.size());
    CHECK(test::byte_diff(gs.bytes, gb.bytes, DType::bf16) == "");
    CHECK(test::byte_diff(gs.bytes, gm.bytes, DType::bf16) == "");
    // In place (y == x) gives the same bytes.
    run(T_small, dx.data());
    auto gi = dx.download();
    gi.resize(gs.bytes.size());
    CHECK(test::byte_diff(gi, gs.bytes, DType::bf16) == "");
  }
}

TEST_CASE("rmsnorm: summed split planes give the host's residual bytes and one set of norm bytes", "[gpu][norms]") {
  // x as P f32 planes (a skinny GEMM's deferred partials) summed in plane order from 0, rounded to bf16,
  // plus the residual, rounded: the one-row kernel (eight planes' loads in flight up to 5120, four at
  // 8192; nine planes take more than one such group), 300 rows with padding rows past live and 17 without.
  // residual_out is checked to the byte against that sum on the host, y against the reference norm
  // and between the two row counts to the byte.
  for (int n : {2560, 5120, 8192}) {
    for (int P : {3, 6, 9}) {
      const uint64_t seed = 12000 + n + P;
      CAPTURE(n, P, seed);
      const int T_small = 17, T_mid = 300, live = T_mid - 5;
      auto w = test::uniform_bf16(n, seed, -0.5f, 0.5f);
      auto res = test::uniform_bf16(static_cast<size_t>(T_mid) * n, seed + 1, -2.f, 2.f);
      auto planes = test::uniform(static_cast<size_t>(P) * T_mid * n, seed + 2, -1.f, 1.f);  // [P][T_mid][n]
      auto dw = test::DevBuf::from(w, DType::bf16);
      auto dlive = test::DevBuf::from_i32({live});
      std::vector<float> h(static_cast<size_t>(T_mid) * n);
      for (size_t i = 0; i < h.size(); ++i) {
        float x = 0.0f;
        for (int k = 0; k < P; ++k) x += planes[static_cast<size_t>(k) * h.size() + i];
        h[i] = round_bf16(round_bf16(x) + res[i]);
      }
      std::vector<float> want(h.size());
      ref::rmsnorm(h.data(), w.data(), want.data(), T_mid, n, kEps, ref::Store::bf16);
      auto run = [&](int T) {
        const size_t N = static_cast<size_t>(T) * n;
        std::vector<float> xp(static_cast<size_t>(P) * N);  // the first T rows of every plane, T rows apart
        for (int k = 0; k < P; ++k)
          std::copy_n(planes.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(k) * T_mid * n), N,
                      xp.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(k) * N));
        auto dx = test::DevBuf::from(xp, DType::f32);
        auto dres = test::DevBuf::from(std::vector<float>(res.begin(), res.begin() + static_cast<std::ptrdiff_t>(N)),
                                       DType::bf16);
        auto y = out_buf(N, DType::bf16);
        RmsNormParams p;
        p.x = dx.data();
        p.x_dtype = DType::f32;
        p.round_x = true;
        p.x_splits = P;
        p.x_split_stride = static_cast<int64_t>(N);
        p.residual = dres.data();
        p.residual_out = dres.data();
        p.residual_dtype = DType::bf16;
        p.w = dw.data();
        p.w_dtype = DType::bf16;
        p.y = y.data();
        p.y_dtype = DType::bf16;
        p.T = T;
        p.n = n;
        p.live_rows = T == T_mid ? dlive.as<int32_t>() : nullptr;
        check(rmsnorm(p, nullptr));
        auto g = fetch(y, N, DType::bf16);
        CHECK(g.guard_ok);
        const size_t L = static_cast<size_t>(T == T_mid ? live : T) * n;
        CHECK(compare(g.v, std::vector<float>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(N)), DType::bf16,
                      1, L) == "");
        std::vector<float> hw(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(N));
        zero_tail(hw, L);
        CHECK(test::byte_diff(dres.download(), test::to_bytes(hw, DType::bf16), DType::bf16) == "");
        return g.bytes;
      };
      auto small = run(T_small);
      auto mid = run(T_mid);
      mid.resize(small.size());
      CHECK(test::byte_diff(small, mid, DType::bf16) == "");
    }
  }
}

TEST_CASE("rmsnorm: fused residual add stores the rounded sum and normalises it", "[gpu][norms]") {
  enum Mode { kSeparate, kInPlace, kNoResidual };
  for (DType rt : {DType::bf16, DType::f32}) {
    for (int n : {127, 2560}) {
      for (int T : {1, 17, 1025}) {  // 1025: two rows a block, a live row beside a padding row in one
        for (Mode mode : {kSeparate, kInPlace, kNoResidual}) {
          const int live = T > 1 ? T - 6 : T;
          const uint64_t seed = 9000 + n + T + 10 * static_cast<int>(mode) + 100 * static_cast<int>(rt);
          CAPTURE(dtype_name(rt), n, T, static_cast<int>(mode), live, seed);
          const size_t N = static_cast<size_t>(T) * n;
          auto x = test::uniform_bf16(N, seed, -1.f, 1.f);
          auto res = rnd(N, seed + 1, rt, -4.f, 4.f);
          auto w = test::uniform(n, seed + 2, -0.5f, 0.5f);
          std::vector<float> h(N);
          for (size_t i = 0; i < N; ++i) h[i] = ref::store(mode == kNoResidual ? x[i] : x[i] + res[i], store_of(rt));
          std::vector<float> want(N);
          ref::rmsnorm(h.data(), w.data(), want.data(), T, n, kEps, ref::Store::bf16);
          zero_tail(h, static_cast<size_t>(live) * n);
          auto dx = test::DevBuf::from(x, DType::bf16), dw = test::DevBuf::from(w, DType::f32);
          auto dres = test::DevBuf::from(res, rt);
          auto dres_out = out_buf(N, rt);
          auto dlive = test::DevBuf::from_i32({live});
          auto y = out_buf(N, DType::bf16);
          RmsNormParams p;
          p.x = dx.data();
          p.x_dtype = DType::bf16;
          p.residual = mode == kNoResidual ? nullptr : dres.data();
          p.residual_out = mode == kInPlace ? dres.data() : dres_out.data();
          p.residual_dtype = rt;
          p.w = dw.data();
          p.w_dtype = DType::f32;
          p.y = y.data();
          p.y_dtype = DType::bf16;
          p.T = T;
          p.n = n;
          p.live_rows = T > 1 ? dlive.as<int32_t>() : nullptr;
          check(rmsnorm(p, nullptr));
          auto g = fetch(y, N, DType::bf16);
          CHECK(g.guard_ok);
          CHECK(compare(g.v, want, DType::bf16, 1, static_cast<size_t>(live) * n) == "");
          if (mode == kInPlace) {
            CHECK(test::byte_diff(dres.download(), test::to_bytes(h, rt), rt) == "");
          } else {
            auto r = fetch(dres_out, N, rt);
            CHECK(r.guard_ok);
            CHECK(test::byte_diff(r.bytes, test::to_bytes(h, rt), rt) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("rmsnorm: an f32 x rounded first (round_x) gives the bytes of that x stored in bf16", "[gpu][norms]") {
  // The mix-round norm setting: a projection's f32 output, rounded by the norm, must give what the
  // same output stored in bf16 by the GEMM gives (2560: the 16-byte kernel; 1000 and 127 the loops).
  for (int n : {127, 1000, 2560}) {
    for (bool with_res : {true, false}) {
      const int T = 9, live = 7;
      const uint64_t seed = 9500 + n + (with_res ? 1 : 0);
      CAPTURE(n, with_res);
      const size_t N = static_cast<size_t>(T) * n;
      auto x = test::uniform(N, seed, -3.f, 3.f);  // f32 values, most not bf16-exact
      std::vector<float> xr(N);
      for (size_t i = 0; i < N; ++i) xr[i] = ref::store(x[i], ref::Store::bf16);
      auto res = test::uniform_bf16(N, seed + 1, -4.f, 4.f);
      auto w = test::uniform(n, seed + 2, -0.5f, 0.5f);
      auto dx = test::DevBuf::from(x, DType::f32), dxr = test::DevBuf::from(xr, DType::bf16);
      auto dres = test::DevBuf::from(res, DType::bf16), dw = test::DevBuf::from(w, DType::f32);
      auto dlive = test::DevBuf::from_i32({live});
      // (y, residual_out) bytes of the norm of x (dtype xt), rounded first when `round`.
      auto run = [&](const test::DevBuf& x_buf, DType xt, bool round) {
        auto y = out_buf(N, DType::bf16), r = out_buf(N, DType::bf16);
        RmsNormParams p;
        p.x = x_buf.data();
        p.x_dtype = xt;
        p.round_x = round;
        p.residual = with_res ? dres.data() : nullptr;
        p.residual_out = r.data();
        p.w = dw.data();
        p.w_dtype = DType::f32;
        p.y = y.data();
        p.T = T;
        p.n = n;
        p.live_rows = dlive.as<int32_t>();
        check(rmsnorm(p, nullptr));
        auto gy = fetch(y, N, DType::bf16), gr = fetch(r, N, DType::bf16);
        CHECK(gy.guard_ok);
        CHECK(gr.guard_ok);
        return std::make_pair(gy.bytes, gr.bytes);
      };
      const auto want = run(dxr, DType::bf16, false), got = run(dx, DType::f32, true);
      CHECK(got.first == want.first);
      CHECK(got.second == want.second);
      // Without round_x the f32 x is added unrounded: other bytes (the setting's rounding is real).
      if (with_res) CHECK(run(dx, DType::f32, false).second != want.second);
    }
  }
}

TEST_CASE("rmsnorm: per-head rows read in place from strided projections", "[gpu][norms]") {
  // q_norm: q_proj rows are, per head, D query values then D gate values: head stride 2D.
  // k_norm: contiguous [T, Hkv, D].
  struct Case {
    int heads, D, head_stride;
  };
  for (Case c : {Case{16, 256, 512}, Case{4, 256, 256}, Case{3, 129, 300}}) {
    for (int T : {1, 17}) {
      const uint64_t seed = 500 + c.heads + c.D + T;
      CAPTURE(c.heads, c.D, c.head_stride, T, seed);
      const int64_t ts = static_cast<int64_t>(c.heads) * c.head_stride + (c.D == 129 ? 7 : 0);
      auto src = test::uniform_bf16(static_cast<size_t>(T) * ts, seed, -2.f, 2.f);
      auto w = test::uniform(c.D, seed + 1, -0.5f, 0.5f);
      const size_t N = static_cast<size_t>(T) * c.heads * c.D;
      std::vector<float> rows(N), want(N);
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < c.heads; ++h) {
          for (int i = 0; i < c.D; ++i)
            rows[(static_cast<size_t>(t) * c.heads + h) * c.D + i] = src[t * ts + h * c.head_stride + i];
        }
      }
      ref::rmsnorm(rows.data(), w.data(), want.data(), static_cast<int64_t>(T) * c.heads, c.D, kEps, ref::Store::bf16);
      auto dsrc = test::DevBuf::from(src, DType::bf16), dw = test::DevBuf::from(w, DType::f32);
      auto y = out_buf(N, DType::bf16);
      RmsNormParams p;
      p.x = dsrc.data();
      p.x_dtype = DType::bf16;
      p.x_head_stride = c.head_stride;
      p.x_token_stride = ts;
      p.w = dw.data();
      p.y = y.data();
      p.y_dtype = DType::bf16;
      p.T = T;
      p.heads = c.heads;
      p.n = c.D;
      check(rmsnorm(p, nullptr));
      auto g = fetch(y, N, DType::bf16);
      CHECK(g.guard_ok);
      CHECK(compare(g.v, want, DType::bf16, 1, N) == "");
    }
  }
}

TEST_CASE("rmsnorm: bad params are rejected without a launch", "[gpu][norms]") {
  test::DevBuf b(1024);
  RmsNormParams p;
  p.x = b.data();
  p.w = b.data();
  p.y = b.data();
  p.T = 1;
  p.n = 0;
  CHECK(rmsnorm(p, nullptr) == cudaErrorInvalidValue);
  p.n = 4;
  p.residual = b.data();  // residual without residual_out
  CHECK(rmsnorm(p, nullptr) == cudaErrorInvalidValue);
  p.residual = nullptr;
  p.x_head_stride = 2;  // < n
  CHECK(rmsnorm(p, nullptr) == cudaErrorInvalidValue);
  GatedRmsNormParams g;
  g.x = b.data();
  g.w = b.data();
  g.y = b.data();
  g.T = 1;
  g.heads = 1;
  g.n = 4;  // z missing
  CHECK(gated_rmsnorm(g, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("gated rmsnorm: matches the reference for GDN shapes, strided gates and padded tokens", "[gpu][norms]") {
  struct Types {
    DType x, z, w, y;
  };
  struct Shape {
    int heads, n;
  };
  // bf16 x, z and y with n 64 / 128 / 256 run the 16-byte kernel (bf16 or f32 weights); the rest the strided loop.
  for (Types ty :
       {Types{DType::bf16, DType::bf16, DType::f32, DType::bf16}, Types{DType::f32, DType::f32, DType::f32, DType::f32},
        Types{DType::bf16, DType::bf16, DType::bf16, DType::f32},
        Types{DType::bf16, DType::bf16, DType::bf16, DType::bf16}}) {
    for (Shape sh : {Shape{32, 128}, Shape{48, 128}, Shape{5, 64}, Shape{3, 256}, Shape{3, 1}, Shape{2, 127},
                     Shape{2, 129}, Shape{1, 2560}}) {
      // T = 4100 at 32 x 128 and 3 x 256 with bf16 x (the 16-byte kernel where y is bf16 too, the
      // strided loop for an f32 y): a prefill-sized grid, z strided inside a wider row (16-byte aligned).
      const bool wide_shape = (sh.heads == 32 && sh.n == 128) || (sh.heads == 3 && sh.n == 256);
      for (int T : {1, 17, 300, 4100}) {
        if (T == 4100 && !(wide_shape && ty.x == DType::bf16)) continue;
        const int live = T > 1 ? T - 7 : T;
        const uint64_t seed =
            3000 + sh.heads * 7 + sh.n + T + 100 * static_cast<int>(ty.x) + 10 * static_cast<int>(ty.w);
        CAPTURE(dtype_name(ty.x), dtype_name(ty.w), dtype_name(ty.y), sh.heads, sh.n, T, live, seed);
        const int64_t row = static_cast<int64_t>(sh.heads) * sh.n;
        const int64_t zts = T == 17 ? row + 5 : T == 4100 ? row + 8 : row;  // z inside a wider projection output
        const size_t N = static_cast<size_t>(T) * row;
        auto x = rnd(N, seed, ty.x, -2.f, 2.f);
        auto zsrc = rnd(static_cast<size_t>(T) * zts, seed + 1, ty.z, -4.f, 4.f);
        auto w = rnd(sh.n, seed + 2, ty.w, 0.5f, 1.5f);
        std::vector<float> z(N), want(N);
        for (int t = 0; t < T; ++t) std::copy_n(zsrc.begin() + t * zts, row, z.begin() + t * row);
        ref::gated_rmsnorm(x.data(), z.data(), w.data(), want.data(), static_cast<int64_t>(T) * sh.heads, sh.n, kEps,
                           store_of(ty.y));
        auto dx = test::DevBuf::from(x, ty.x), dz = test::DevBuf::from(zsrc, ty.z), dw = test::DevBuf::from(w, ty.w);
        auto dlive = test::DevBuf::from_i32({live});
        auto y = out_buf(N, ty.y);
        GatedRmsNormParams p;
        p.x = dx.data();
        p.x_dtype = ty.x;
        p.z = dz.data();
        p.z_dtype = ty.z;
        p.z_token_stride = zts;
        p.w = dw.data();
        p.w_dtype = ty.w;
        p.y = y.data();
        p.y_dtype = ty.y;
        p.T = T;
        p.heads = sh.heads;
        p.n = sh.n;
        p.eps = kEps;
        p.live_rows = T > 1 ? dlive.as<int32_t>() : nullptr;
        check(gated_rmsnorm(p, nullptr));
        auto g = fetch(y, N, ty.y);
        CHECK(g.guard_ok);
        CHECK(compare(g.v, want, ty.y, 1, static_cast<size_t>(live) * row) == "");
      }
    }
  }
}
