// GPU tests of the delta-rule prefill scan (kernels/delta_rule_prefill.h):
// - byte equality, outputs and the whole state cache, with delta_rule_decode run token by token
//   (one launch per token, same split) over a varlen batch with lengths 0, 1, 5, 64, 300 and a
//   padding sequence, with history, without, and mixed; for every built split and the automatic one;
// - against ref::delta_rule_prefill_recurrent: f32 outputs and the final state within normalised
//   error 1e-5, bf16 outputs per element within 2 bf16 ulp + 1e-4, padding rows exactly 0;
// - invariants: poisoned outputs are fully written on every live row (two poisons, same bytes) and
//   left alone past the live tokens; padding and zero-length sequences and unused slots keep their
//   state bytes; programs beyond the live count (whose metadata is garbage) do nothing; inputs past
//   the live tokens hold NaN that must never be read;
// - shapes (Dk, Dv) = (128, 128), (64, 96), (32, 40) with Hv/Hk = 2 and 3, and the Hugging Face
//   fixtures' small heads (8, 8), (16, 24), (32, 16), bf16 and f32;
// - splitting a sequence into two prefills (the second with history) gives the bytes of one;
// - no live sequence / max_seqs = 0 / bad arguments.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/ref/delta_rule_ref.h"
#include "tests/gpu/delta_rule_prefill_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"
#include "tests/support/tolerance.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

using test::drp::DevProblem;
using test::drp::make_problem;
using test::drp::prefill_params;
using test::drp::Problem;
using test::drp::Result;
using test::drp::segment_problem;
using test::drp::Shape;

Result run_prefill(const Problem& P, const DevProblem& d, int split, uint8_t poison) {
  auto state = DevBuf::from(P.state0, DType::f32);
  DevBuf out(P.out_elems() * dtype_size(P.t), poison);
  check(delta_rule_prefill(prefill_params(P, d, state.as<float>(), out.data(), split), nullptr));
  check(cudaDeviceSynchronize());
  return {out.download(), state.download()};
}

// delta_rule_decode, one launch per token of each live sequence, in token order. A sequence
// without history (and at least one token) starts from a zeroed slot.
Result run_decode_by_token(const Problem& P, const DevProblem& d, int split, uint8_t poison) {
  const Shape& sh = P.sh;
  auto st0 = P.state0;
  for (int n = 0; n < P.n_live; ++n) {
    if (P.slots[n] >= 0 && !P.hist[n] && P.cu[n + 1] > P.cu[n]) {
      std::fill(st0.begin() + P.slots[n] * sh.Hv * P.head_size(),
                st0.begin() + (P.slots[n] + 1) * sh.Hv * P.head_size(), 0.0f);
    }
  }
  auto state = DevBuf::from(st0, DType::f32);
  DevBuf out(P.out_elems() * dtype_size(P.t), poison);
  const size_t es = dtype_size(P.t);
  for (int n = 0; n < P.n_live; ++n) {
    for (int64_t t = P.cu[n]; t < P.cu[n + 1]; ++t) {
      DeltaRuleDecodeParams p;
      p.q = d.q.as<uint8_t>() + t * sh.Hk * sh.Dk * es;
      p.k = d.k.as<uint8_t>() + t * sh.Hk * sh.Dk * es;
      p.v = d.v.as<uint8_t>() + t * sh.Hv * sh.Dv * es;
      p.qkv_dtype = P.t;
      p.g = d.g.as<float>() + t * sh.Hv;
      p.beta = d.beta.as<float>() + t * sh.Hv;
      p.slots = d.slots.as<int32_t>() + n;
      p.state = state.as<float>();
      p.out = out.as<uint8_t>() + t * sh.Hv * sh.Dv * es;
      p.out_dtype = P.t;
      p.rows = 1;
      p.Hk = sh.Hk;
      p.Hv = sh.Hv;
      p.Dk = sh.Dk;
      p.Dv = sh.Dv;
      p.split = split;
      check(delta_rule_decode(p, nullptr));
    }
  }
  check(cudaDeviceSynchronize());
  return {out.download(), state.download()};
}

// ||a - b|| / ||b|| (tests/support/tolerance.h).
double norm_err(const float* a, const float* b, size_t n) { return test::l2_normalised_error(a, b, n); }

// Against the CPU reference (same fmaf chains; only expf vs std::exp differ).
void check_against_ref(const Problem& P, const Result& r) {
  const Shape& sh = P.sh;
  const bool bf = P.t == DType::bf16;
  auto ref_state = P.state0;
  std::vector<float> ref_out(P.live_out_elems(), 0.0f);
  ref::delta_rule_prefill_recurrent(
      ref::DeltaShape{sh.Hk, sh.Hv, sh.Dk, sh.Dv, bf ? ref::Store::bf16 : ref::Store::f32}, P.n_live, P.cu.data(),
      P.q.data(), P.k.data(), P.v.data(), P.g.data(), P.beta.data(), P.slots.data(), P.hist.data(), ref_state.data(),
      ref_out.data());
  const auto got = test::from_bytes(r.out, P.t);
  const auto got_s = test::from_bytes(r.state, DType::f32);
  const int64_t row = static_cast<int64_t>(sh.Hv) * sh.Dv;
  for (int n = 0; n < P.n_live; ++n) {
    const int64_t b = P.cu[n], e = P.cu[n + 1];
    if (e == b) continue;
    CAPTURE(n, P.slots[n], static_cast<int>(P.hist[n]), e - b);
    if (P.slots[n] < 0) {
      size_t nonzero = 0;
      for (int64_t i = b * row; i < e * row; ++i) nonzero += got[i] != 0.0f || std::signbit(got[i]);
      CHECK(nonzero == 0);
      continue;
    }
    if (bf) {
      size_t bad = 0;
      for (int64_t i = b * row; i < e * row; ++i) {
        const double tol = 2 * std::ldexp(1.0, -7) * std::fabs(ref_out[i]) + 1e-4;
        bad += !(std::fabs(got[i] - ref_out[i]) <= tol);
      }
      CHECK(bad == 0);
    } else {
      const double err = norm_err(got.data() + b * row, ref_out.data() + b * row, (e - b) * row);
      CAPTURE(err);
      CHECK(err <= 1e-5);
    }
    const int64_t s0 = static_cast<int64_t>(P.slots[n]) * sh.Hv * P.head_size();
    const double serr = norm_err(got_s.data() + s0, ref_state.data() + s0, sh.Hv * P.head_size());
    CAPTURE(serr);
    CHECK(serr <= 1e-5);
  }
}

// Slots that no live, non-empty, non-padding sequence owns keep their bytes.
void check_untouched_state(const Problem& P, const Result& r) {
  std::vector<bool> owned(P.num_slots, false);
  for (int n = 0; n < P.n_live; ++n) {
    if (P.slots[n] >= 0 && P.cu[n + 1] > P.cu[n]) owned[P.slots[n]] = true;
  }
  const auto s0 = test::to_bytes(P.state0, DType::f32);
  const size_t slot_bytes = static_cast<size_t>(P.sh.Hv) * P.head_size() * sizeof(float);
  for (int s = 0; s < P.num_slots; ++s) {
    if (owned[s]) continue;
    CAPTURE(s);
    CHECK(std::memcmp(r.state.data() + s * slot_bytes, s0.data() + s * slot_bytes, slot_bytes) == 0);
  }
}

}  // namespace

TEST_CASE("delta-rule prefill: byte-equal to decode token by token, matches the reference, keeps the invariants",
          "[gpu][delta_rule]") {
  // (Dk, Dv) = (128, 128), (64, 96), (32, 40), each with Hv/Hk = 2 and 3; then the fixtures' small
  // heads (8, 8), (16, 24), (32, 16) (Dk 8 and 16 run the tiles Q = 1 and 4).
  const std::vector<Shape> shapes = {{2, 4, 128, 128}, {1, 3, 128, 128}, {1, 2, 64, 96}, {2, 6, 64, 96}, {2, 4, 32, 40},
                                     {1, 3, 32, 40},   {2, 2, 8, 8},     {2, 4, 16, 24}, {1, 3, 32, 16}};
  // Lengths 0, 1, 5, 64, 300 and a padding sequence (slot -1, 7 tokens); slot 7 belongs to the
  // zero-length sequence and must keep its bytes even without history.
  const std::vector<int32_t> lens = {5, 0, 300, 7, 1, 64};
  const std::vector<int32_t> slots = {3, 7, 0, -1, 8, 5};
  const std::vector<std::vector<uint8_t>> hists = {{1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0}, {1, 0, 0, 1, 1, 0}};
  const char* hist_names[] = {"all history", "no history", "mixed"};
  for (const Shape& sh : shapes) {
    for (DType t : {DType::bf16, DType::f32}) {
      for (int h = 0; h < 3; ++h) {
        CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t), hist_names[h]);
        const uint64_t seed = 7000 + 10 * sh.Dk + sh.Dv + sh.Hv + h;
        INFO("seed " << seed);
        const Problem P = make_problem(sh, t, lens, slots, hists[h], seed);
        const DevProblem d(P);
        const size_t row_bytes = static_cast<size_t>(sh.Hv) * sh.Dv * dtype_size(t);
        const size_t live_bytes = static_cast<size_t>(P.T) * row_bytes;
        std::vector<uint8_t> first_out, first_state;
        int ran = 0;
        for (int split : {1, 2, 4, 8}) {
          if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split) continue;
          CAPTURE(split);
          const Result pre = run_prefill(P, d, split, 0xA5);
          const Result dec = run_decode_by_token(P, d, split, 0xA5);
          CHECK(byte_diff(pre.out, dec.out, t) == "");
          CHECK(byte_diff(pre.state, dec.state, DType::f32) == "");
          // Every live row written (a second poison gives the same live bytes), the rest untouched.
          const Result pre2 = run_prefill(P, d, split, 0x5A);
          CHECK(std::memcmp(pre.out.data(), pre2.out.data(), live_bytes) == 0);
          size_t tail_changed = 0;
          for (size_t i = live_bytes; i < pre2.out.size(); ++i) tail_changed += pre2.out[i] != 0x5A;
          CHECK(tail_changed == 0);
          CHECK(byte_diff(pre2.state, pre.state, DType::f32) == "");
          check_untouched_state(P, pre);
          if (ran++ == 0) {
            first_out = pre.out;
            first_state = pre.state;
            check_against_ref(P, pre);
          } else {
            // Every split gives the same bytes.
            CHECK(byte_diff(pre.out, first_out, t) == "");
            CHECK(byte_diff(pre.state, first_state, DType::f32) == "");
          }
        }
        CHECK(ran >= 2);
        // The automatic split is one of them.
        const Result a = run_prefill(P, d, 0, 0xA5);
        CHECK(byte_diff(a.out, first_out, t) == "");
        CHECK(byte_diff(a.state, first_state, DType::f32) == "");
      }
    }
  }
}

TEST_CASE("delta-rule prefill: two segments with history give the bytes of one prefill", "[gpu][delta_rule]") {
  const Shape sh{2, 4, 128, 128};
  for (DType t : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(t));
    // Whole: sequences of 70 and 9 tokens (no history). Split: the first 33 + 4 tokens, then the
    // remaining 37 + 5 with history; the second batch's inputs are the same token rows.
    const Problem whole = make_problem(sh, t, {70, 9}, {2, 6}, {0, 0}, 99);
    const DevProblem dw(whole);
    const Result rw = run_prefill(whole, dw, 0, 0xA5);

    auto segment = [&](const std::vector<int64_t>& begin, const std::vector<int32_t>& lens, uint8_t hist,
                       const std::vector<float>& state) {
      const Problem P = segment_problem(whole, begin, lens, hist, state);
      const DevProblem d(P);
      return run_prefill(P, d, 0, 0xA5);
    };
    const Result r1 = segment({0, 70}, {33, 4}, 0, whole.state0);
    const Result r2 = segment({33, 74}, {37, 5}, 1, test::from_bytes(r1.state, DType::f32));
    CHECK(byte_diff(r2.state, rw.state, DType::f32) == "");
    // Outputs: whole rows [0,33) = r1 [0,33), [33,70) = r2 [0,37), [70,74) = r1 [33,37), [74,79) = r2 [37,42).
    const size_t rb = static_cast<size_t>(sh.Hv) * sh.Dv * dtype_size(t);
    std::vector<uint8_t> joined;
    auto append = [&](const std::vector<uint8_t>& src, size_t r0, size_t r1_) {
      joined.insert(joined.end(), src.begin() + r0 * rb, src.begin() + r1_ * rb);
    };
    append(r1.out, 0, 33);
    append(r2.out, 0, 37);
    append(r1.out, 33, 37);
    append(r2.out, 37, 42);
    CHECK(byte_diff(joined, std::vector<uint8_t>(rw.out.begin(), rw.out.begin() + 79 * rb), t) == "");
  }
}

TEST_CASE("delta-rule prefill: no live sequence touches nothing, bad arguments are refused", "[gpu][delta_rule]") {
  const Shape sh{1, 2, 64, 96};
  Problem P = make_problem(sh, DType::bf16, {4, 3}, {1, 2}, {1, 0}, 5);
  P.n_live = 0;  // two sequences in the buffers, none live: every program exits
  const DevProblem d(P);
  const Result r = run_prefill(P, d, 0, 0xA5);
  CHECK(byte_diff(r.state, test::to_bytes(P.state0, DType::f32), DType::f32) == "");
  size_t changed = 0;
  for (uint8_t x : r.out) changed += x != 0xA5;
  CHECK(changed == 0);

  DevBuf state = DevBuf::from(P.state0, DType::f32);
  DevBuf out(P.out_elems() * 2);
  auto p = prefill_params(P, d, state.as<float>(), out.data(), 0);
  SECTION("max_seqs 0 launches nothing") {
    p.max_seqs = 0;
    CHECK(delta_rule_prefill(p, nullptr) == cudaSuccess);
  }
  SECTION("unsupported Dk") {
    p.Dk = 48;
    CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  SECTION("Hv not a multiple of Hk") {
    p.Hk = 3;
    CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  SECTION("split not built") {
    p.split = 2;  // only Dk = 128 builds split 2
    CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  SECTION("missing metadata") {
    p.n_seqs = nullptr;
    CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  SECTION("grid too tall") {
    p.max_seqs = 70000;
    CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  check(cudaDeviceSynchronize());
  CHECK(byte_diff(state.download(), test::to_bytes(P.state0, DType::f32), DType::f32) == "");
}
