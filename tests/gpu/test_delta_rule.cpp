// GPU tests of the delta-rule decode kernel on its own: every split of a state column over Q lanes
// (1, 2, 4, 8), with the columns of a head in 1, 2 or 4 blocks, gives the same bytes (output and
// state), and matches the CPU reference; Dk from 8 (the smallest tile) to 128. A column-block count
// that is not 1, 2 or 4 or does not divide Dv is refused.
#include <cmath>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/launch_check.h"
#include "kernels/ref/delta_rule_ref.h"
#include "kernels/rmsnorm.h"
#include "tests/gpu/gated_norm_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;

TEST_CASE("delta-rule decode: every column split gives the same bytes and matches the reference", "[gpu][delta_rule]") {
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  // The last three: the Hugging Face fixtures' small heads (Dk 8, 16 and 32; tiles Q = 1 and 4).
  for (Shape sh : {Shape{16, 32, 128, 128}, Shape{2, 6, 128, 64}, Shape{2, 4, 64, 96}, Shape{1, 3, 32, 40},
                   Shape{2, 2, 8, 8}, Shape{2, 4, 16, 24}, Shape{1, 3, 32, 16}}) {
    for (DType t : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t));
      const int rows = 7, slots_n = 9;
      const uint64_t seed = 1000 + sh.Dk + sh.Dv;
      INFO("seed " << seed);
      auto rnd = [&](size_t n, uint64_t s, float lo, float hi) {
        return t == DType::bf16 ? test::uniform_bf16(n, s, lo, hi) : test::uniform(n, s, lo, hi);
      };
      auto q = rnd(static_cast<size_t>(rows) * sh.Hk * sh.Dk, seed, -0.3f, 0.3f);
      auto k = rnd(q.size(), seed + 1, -0.3f, 0.3f);
      auto v = rnd(static_cast<size_t>(rows) * sh.Hv * sh.Dv, seed + 2, -1.f, 1.f);
      auto g = test::uniform(static_cast<size_t>(rows) * sh.Hv, seed + 3, -2.f, 0.f);
      auto beta = test::uniform(g.size(), seed + 4, 0.f, 1.f);
      auto state0 = test::uniform(static_cast<size_t>(slots_n) * sh.Hv * sh.Dk * sh.Dv, seed + 5, -0.2f, 0.2f);
      std::vector<int32_t> slots = {4, -1, 0, 8, 2, -1, 6};  // two padding rows
      auto dq = test::DevBuf::from(q, t), dk = test::DevBuf::from(k, t), dv = test::DevBuf::from(v, t);
      auto dg = test::DevBuf::from(g, DType::f32), db = test::DevBuf::from(beta, DType::f32);
      auto ds = test::DevBuf::from_i32(slots);
      std::vector<uint8_t> ref_out, ref_state;
      int ran = 0;
      for (int variant = 0; variant < 4 * 3; ++variant) {
        const int split = 1 << (variant % 4), col_blocks = 1 << (variant / 4);  // 1 2 4 8 | 1 2 4
        if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split || sh.Dv % col_blocks != 0) continue;
        CAPTURE(split, col_blocks);
        auto state = test::DevBuf::from(state0, DType::f32);
        test::DevBuf out(v.size() * dtype_size(t));  // poisoned
        DeltaRuleDecodeParams p;
        p.q = dq.data();
        p.k = dk.data();
        p.v = dv.data();
        p.qkv_dtype = t;
        p.g = dg.as<float>();
        p.beta = db.as<float>();
        p.slots = ds.as<int32_t>();
        p.state = state.as<float>();
        p.out = out.data();
        p.out_dtype = t;
        p.rows = rows;
        p.Hk = sh.Hk;
        p.Hv = sh.Hv;
        p.Dk = sh.Dk;
        p.Dv = sh.Dv;
        p.split = split;
        p.col_blocks = col_blocks;
        check(delta_rule_decode(p, nullptr));
        auto o = out.download(), st = state.download();
        if (ran++ == 0) {
          ref_out = o;
          ref_state = st;
          // Against the CPU reference (same fmaf order; expf may differ by an ulp).
          auto ref_s = state0;
          std::vector<float> r(v.size());
          ref::delta_rule_decode(
              ref::DeltaShape{sh.Hk, sh.Hv, sh.Dk, sh.Dv, t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32}, rows,
              q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), ref_s.data(), r.data());
          auto got = test::from_bytes(o, t);
          auto got_s = test::from_bytes(st, DType::f32);
          size_t bad = 0;
          for (size_t i = 0; i < r.size(); ++i) {
            const double tol =
                t == DType::bf16 ? 2 * std::ldexp(1.0, -7) * std::fabs(r[i]) + 1e-4 : 1e-5 + 1e-4 * std::fabs(r[i]);
            bad += !(std::fabs(got[i] - r[i]) <= tol);
          }
          for (size_t i = 0; i < ref_s.size(); ++i)
            bad += !(std::fabs(got_s[i] - ref_s[i]) <= 1e-5 + 1e-4 * std::fabs(ref_s[i]));
          CHECK(bad == 0);
        } else {
          CHECK(test::byte_diff(o, ref_out, t) == "");
          CHECK(test::byte_diff(st, ref_state, DType::f32) == "");
        }
      }
      CHECK(ran >= 4);  // two splits at least, each with at least two column blocks
      DeltaRuleDecodeParams bad;
      bad.Hk = sh.Hk;
      bad.Hv = sh.Hv;
      bad.Dk = sh.Dk;
      bad.Dv = sh.Dv;
      bad.rows = rows;
      for (int cb : {3, 8, -1}) {
        bad.col_blocks = cb;
        CHECK(delta_rule_decode(bad, nullptr) == cudaErrorInvalidValue);
      }
    }
  }
}

// The GDN gated RMSNorm in the delta rule's epilogue: for every split and column-block count (the
// blocks of a head in a cluster of 1, 2 or 4), the output equals delta_rule_decode followed by
// gated_rmsnorm's 16-byte kernel byte for byte, the state equals the plain kernel's, and padding rows
// (past the live count) are zeros. z is read at a token stride wider than Hv x Dv, as in the model.
TEST_CASE("delta-rule decode: the fused gated norm gives the bytes of the norm kernel",
          "[gpu][delta_rule][gated_norm]") {
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  for (Shape sh : {Shape{16, 32, 128, 128}, Shape{2, 6, 128, 64}, Shape{1, 2, 128, 256}, Shape{2, 4, 64, 64}}) {
    for (DType wt : {DType::f32, DType::bf16}) {
      CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(wt));
      const int rows = 7, slots_n = 9, live = 5;
      const int64_t zts = static_cast<int64_t>(sh.Hv) * sh.Dv + 24;  // a wider row, 16-byte aligned
      const uint64_t seed = 2000 + sh.Hv + sh.Dv;
      auto q = test::uniform_bf16(static_cast<size_t>(rows) * sh.Hk * sh.Dk, seed, -0.3f, 0.3f);
      auto k = test::uniform_bf16(q.size(), seed + 1, -0.3f, 0.3f);
      auto v = test::uniform_bf16(static_cast<size_t>(rows) * sh.Hv * sh.Dv, seed + 2, -1.f, 1.f);
      auto g = test::uniform(static_cast<size_t>(rows) * sh.Hv, seed + 3, -2.f, 0.f);
      auto beta = test::uniform(g.size(), seed + 4, 0.f, 1.f);
      auto state0 = test::uniform(static_cast<size_t>(slots_n) * sh.Hv * sh.Dk * sh.Dv, seed + 5, -0.2f, 0.2f);
      auto z = test::uniform_bf16(static_cast<size_t>(rows) * zts, seed + 6, -3.f, 3.f);
      auto w = test::uniform(static_cast<size_t>(sh.Dv), seed + 7, -1.5f, 1.5f);
      std::vector<int32_t> slots = {4, 0, 8, 2, 6, -1, -1};  // live rows first, as a decode step has them
      auto dq = test::DevBuf::from(q, DType::bf16), dk = test::DevBuf::from(k, DType::bf16);
      auto dv = test::DevBuf::from(v, DType::bf16), dz = test::DevBuf::from(z, DType::bf16);
      auto dw = test::DevBuf::from(w, wt);
      auto dg = test::DevBuf::from(g, DType::f32), db = test::DevBuf::from(beta, DType::f32);
      auto ds = test::DevBuf::from_i32(slots), dlive = test::DevBuf::from_i32({live});
      auto params = [&](test::DevBuf& state, test::DevBuf& out) {
        DeltaRuleDecodeParams p;
        p.q = dq.data();
        p.k = dk.data();
        p.v = dv.data();
        p.qkv_dtype = DType::bf16;
        p.g = dg.as<float>();
        p.beta = db.as<float>();
        p.slots = ds.as<int32_t>();
        p.state = state.as<float>();
        p.out = out.data();
        p.out_dtype = DType::bf16;
        p.rows = rows;
        p.Hk = sh.Hk;
        p.Hv = sh.Hv;
        p.Dk = sh.Dk;
        p.Dv = sh.Dv;
        return p;
      };
      // The reference: the plain kernel, then the norm kernel in place (its 16-byte path).
      auto ref_state = test::DevBuf::from(state0, DType::f32);
      test::DevBuf ref_out(v.size() * 2);
      check(delta_rule_decode(params(ref_state, ref_out), nullptr));
      const GatedRmsNormParams np = test::inplace_gated_norm(ref_out.data(), dz.data(), zts, dw.data(), wt, rows, sh.Hv,
                                                             sh.Dv, dlive.as<int32_t>());
      REQUIRE(gated_rmsnorm_vector_path(np));
      check(gated_rmsnorm(np, nullptr));
      const auto want = ref_out.download(), want_state = ref_state.download();
      int ran = 0;
      for (int variant = 0; variant < 4 * 3; ++variant) {
        const int split = 1 << (variant % 4), col_blocks = 1 << (variant / 4);
        if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split || sh.Dv % col_blocks != 0) continue;
        CAPTURE(split, col_blocks);
        auto state = test::DevBuf::from(state0, DType::f32);
        test::DevBuf out(v.size() * 2);  // poisoned
        DeltaRuleDecodeParams p = params(state, out);
        p.split = split;
        p.col_blocks = col_blocks;
        p.norm_z = dz.data();
        p.norm_z_stride = zts;
        p.norm_w = dw.data();
        p.norm_w_dtype = wt;
        p.norm_eps = 1e-6f;
        check(delta_rule_decode(p, nullptr));
        CHECK(test::byte_diff(out.download(), want, DType::bf16) == "");
        CHECK(test::byte_diff(state.download(), want_state, DType::f32) == "");
        ++ran;
      }
      CHECK(ran >= 4);
      {  // z contiguous (norm_z_stride 0 = Hv x Dv), against the norm kernel on the same z
        std::vector<float> zc;
        for (int r = 0; r < rows; ++r) {
          const auto row = z.begin() + static_cast<std::ptrdiff_t>(r * zts);
          zc.insert(zc.end(), row, row + static_cast<std::ptrdiff_t>(sh.Hv) * sh.Dv);
        }
        auto dzc = test::DevBuf::from(zc, DType::bf16);
        auto s_ref = test::DevBuf::from(state0, DType::f32), s_fused = test::DevBuf::from(state0, DType::f32);
        test::DevBuf o_ref(v.size() * 2), o_fused(v.size() * 2);
        check(delta_rule_decode(params(s_ref, o_ref), nullptr));
        GatedRmsNormParams n0 = np;
        n0.x = n0.y = o_ref.data();
        n0.z = dzc.data();
        n0.z_token_stride = 0;
        check(gated_rmsnorm(n0, nullptr));
        DeltaRuleDecodeParams p = params(s_fused, o_fused);
        p.norm_z = dzc.data();
        p.norm_w = dw.data();
        p.norm_w_dtype = wt;
        check(delta_rule_decode(p, nullptr));
        CHECK(test::byte_diff(o_fused.download(), o_ref.download(), DType::bf16) == "");
      }
      // Not built: Dv outside 64/128/256, an f32 out, no z.
      auto state = test::DevBuf::from(state0, DType::f32);
      test::DevBuf out(v.size() * 4);
      DeltaRuleDecodeParams bad = params(state, out);
      bad.norm_z = dz.data();
      bad.norm_w = dw.data();
      bad.out_dtype = DType::f32;
      CHECK(delta_rule_decode(bad, nullptr) == cudaErrorInvalidValue);
      CHECK(take_launch_refusal() == "delta_rule.decode: the fused norm needs a bf16 out");
      bad.out_dtype = DType::bf16;
      bad.norm_z = nullptr;
      CHECK(delta_rule_decode(bad, nullptr) == cudaErrorInvalidValue);
      CHECK(take_launch_refusal().find("norm_z") != std::string::npos);
    }
  }
  // Dv = 96 has a built split but no fused norm.
  DeltaRuleDecodeParams odd;
  odd.Hk = 2;
  odd.Hv = 4;
  odd.Dk = 64;
  odd.Dv = 96;
  odd.rows = 1;
  odd.norm_w = odd.norm_z = reinterpret_cast<const void*>(16);
  CHECK(delta_rule_decode(odd, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "delta_rule.decode: the fused norm needs Dv 64, 128 or 256");
}
