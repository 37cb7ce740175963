// GPU tests of the bf16 recurrent (SSM) state in the three delta-rule prefill forms (the scan,
// delta_rule_prefill; the chunked WY form on CUDA cores, delta_rule_prefill_chunked; and on the
// tensor cores, delta_rule_prefill_mma), DeltaRulePrefillParams::state_dtype = bf16: the initial
// state read widened once, the final state rounded to nearest even once. From a bf16-representable
// start, over the fixture's varlen batch (lengths 63, 0, 1024, 70 (padding), 1, 64, 200, 65; with
// history and mixed):
// - every form, split and Dv tile: the outputs are the f32-state run's bytes and the final state is
//   the f32-state run's final state rounded to bf16, byte for byte; every slot that no live
//   non-padding sequence owns (padding, zero-length, unused) keeps its bytes;
// - the scan with g = 0 (exp(0) = 1 on both sides, so no expf / std::exp ulp): the bytes of
//   ref::delta_rule_prefill_recurrent with Store::bf16 state, outputs and state;
// - the chunked and mma forms against ref::delta_rule_prefill_chunked (double) with Store::bf16
//   state (and the scan against the recurrent reference): the f32-state run within the form's
//   tolerance (normalised, per slot: 1e-5 chunked and scan, 1e-4 mma; delta_rule_ref.h), and so the
//   two bf16 states: rounding is monotone and moves a value by at most half a bf16 ulp, so two f32
//   values a and b round to values at most |a - b| + 1 ulp apart (the ulp of the larger rounded
//   value). Per element: |got - want| <= tol * ||want slot (f32)|| + ulp, since the normalised f32
//   bound caps every element's error by tol * ||want||; per slot, normalised: ||rnd(a) - rnd(b)|| <=
//   ||a - b|| + u (||a|| + ||b||) with u = 2^-8, so <= (tol + u (2 + tol)) / (1 - u) of ||rnd(b)||;
// - misaligned bf16 state pointers (2 and 8 bytes past a 16-byte boundary) take the element-wise path
//   of the chunked forms and give the vectorised path's bytes;
// - a state dtype other than f32 or bf16 is refused by all three launchers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/launch_check.h"
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
using test::drp::Expected;
using test::drp::kHists;
using test::drp::kLens;
using test::drp::kSlots;
using test::drp::make_problem;
using test::drp::norm_err;
using test::drp::Problem;
using test::drp::Result;
using test::drp::Shape;

enum class Form { scan, chunked, mma };
const char* form_name(Form f) { return f == Form::scan ? "scan" : f == Form::chunked ? "chunked" : "mma"; }

// The problem with its starting state rounded to bf16 (so the f32 and bf16 runs start alike).
Problem bf16_start(Problem P) {
  P.state0 = test::from_bytes(test::to_bytes(P.state0, DType::bf16), DType::bf16);
  return P;
}

using test::bf16_ulp;
const auto& rounded_state = test::rounded_to_bf16;

// One launch of `form` with the state stored as `st`, `offset` bytes into its buffer; returns the
// output bytes and the state cache's bytes (without the offset). split: the scan's; tile: the
// chunked forms' Dv tile.
Result run(const Problem& P, const DevProblem& d, Form form, DType st, int split_or_tile = 0, size_t offset = 0,
           uint8_t poison = 0xA5) {
  const auto s0 = test::to_bytes(P.state0, st);
  DevBuf state(s0.size() + offset);
  void* sp = static_cast<uint8_t*>(state.data()) + offset;
  check(cudaMemcpy(sp, s0.data(), s0.size(), cudaMemcpyHostToDevice));
  DevBuf out(P.out_bytes(), poison);
  DeltaRulePrefillParams p = test::drp::prefill_params(P, d, sp, out.data(), form == Form::scan ? split_or_tile : 0);
  p.state_dtype = st;
  check(cudaDeviceSynchronize());
  switch (form) {
    case Form::scan: check(delta_rule_prefill(p, nullptr)); break;
    case Form::chunked: check(delta_rule_prefill_chunked(p, nullptr, split_or_tile)); break;
    case Form::mma: check(delta_rule_prefill_mma(p, nullptr, split_or_tile)); break;
  }
  check(cudaDeviceSynchronize());
  auto all = state.download();
  return {out.download(), std::vector<uint8_t>(all.begin() + static_cast<int64_t>(offset), all.end())};
}

// Slots that no live, non-empty, non-padding sequence owns keep their (bf16) bytes.
void check_unowned_slots(const Problem& P, const std::vector<uint8_t>& state16) {
  const auto s0 = test::to_bytes(P.state0, DType::bf16);
  const size_t slot_bytes = static_cast<size_t>(P.sh.Hv * P.head_size()) * 2;
  for (int s = 0; s < P.num_slots; ++s) {
    bool owned = false;
    for (int n = 0; n < P.n_live; ++n) owned |= P.slots[n] == s && P.cu[n + 1] > P.cu[n];
    if (owned) continue;
    CAPTURE(s);
    CHECK(std::memcmp(state16.data() + s * slot_bytes, s0.data() + s * slot_bytes, slot_bytes) == 0);
  }
}

// The bf16 run against the f32 run: the same output bytes, the final state rounded.
void check_bf16_is_rounded_f32(const Problem& P, const Result& r16, const Result& r32) {
  CHECK(byte_diff(r16.out, r32.out, P.t) == "");
  CHECK(byte_diff(r16.state, rounded_state(r32.state), DType::bf16) == "");
  check_unowned_slots(P, r16.state);
}

// The references with an f32 and a bf16 state: recurrent (the scan's) or chunked (double).
std::pair<Expected, Expected> references(const Problem& P, bool recurrent) {
  Expected x32{std::vector<float>(P.live_out_elems(), 0.0f), P.state0, "the reference, f32 state"};
  Expected x16{std::vector<float>(P.live_out_elems(), 0.0f), P.state0, "the reference, bf16 state"};
  for (Expected* x : {&x32, &x16}) {
    const ref::DeltaShape s{P.sh.Hk,
                            P.sh.Hv,
                            P.sh.Dk,
                            P.sh.Dv,
                            P.t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32,
                            x == &x16 ? ref::Store::bf16 : ref::Store::f32};
    if (recurrent) {
      ref::delta_rule_prefill_recurrent(s, P.n_live, P.cu.data(), P.q.data(), P.k.data(), P.v.data(), P.g.data(),
                                        P.beta.data(), P.slots.data(), P.hist.data(), x->state.data(), x->out.data());
    } else {
      ref::delta_rule_prefill_chunked(s, P.n_live, P.cu.data(), P.q.data(), P.k.data(), P.v.data(), P.g.data(),
                                      P.beta.data(), P.slots.data(), P.hist.data(), x->state.data(), x->out.data());
    }
  }
  return {x32, x16};
}

// The f32-state run within `tol` of the f32-state reference (test::drp::check_close: outputs per
// sequence, final state per slot, padding rows +0), then the bf16 final states per live slot by
// the bounds in the header.
void check_against_reference(const Problem& P, const Result& r32, const Result& r16, const Expected& ref32,
                             const Expected& ref16, double tol) {
  test::drp::check_close(P, r32, ref32, tol);
  const auto got32 = test::from_bytes(r32.state, DType::f32);
  const auto got16 = test::from_bytes(r16.state, DType::bf16);
  const size_t n = static_cast<size_t>(P.sh.Hv * P.head_size());
  const double u = std::ldexp(1.0, -8), norm_tol = (tol + u * (2 + tol)) / (1 - u);
  for (int s = 0; s < P.n_live; ++s) {
    if (P.slots[s] < 0 || P.cu[s + 1] == P.cu[s]) continue;
    CAPTURE(s, P.slots[s]);
    const size_t s0 = static_cast<size_t>(P.slots[s]) * n;
    double nb = 0;
    for (size_t i = 0; i < n; ++i) nb += static_cast<double>(ref32.state[s0 + i]) * ref32.state[s0 + i];
    nb = std::sqrt(nb);
    size_t bad = 0, differ = 0;
    for (size_t i = s0; i < s0 + n; ++i) {
      const double g = got16[i], w = ref16.state[i];
      differ += g != w;
      bad += !(std::fabs(g - w) <= tol * nb + bf16_ulp(std::max(std::fabs(g), std::fabs(w))));
    }
    const double err = norm_err(got16.data() + s0, ref16.state.data() + s0, n);
    INFO(differ << " of " << n << " bf16 state elements differ from the reference; normalised " << err);
    CHECK(bad == 0);
    CHECK(err <= norm_tol);
    // The f32 final state's distance (checked by check_close) is what the bounds above rest on.
    CHECK(norm_err(got32.data() + s0, ref32.state.data() + s0, n) <= tol);
  }
}

}  // namespace

TEST_CASE("delta-rule prefill scan, bf16 state: the f32 run's bytes with its final state rounded, every split",
          "[gpu][delta_rule][ssm_state]") {
  const std::vector<Shape> shapes = {{2, 4, 128, 128}, {1, 3, 64, 96}, {2, 4, 32, 40}, {2, 2, 8, 8}};
  for (const Shape& sh : shapes) {
    for (DType t : {DType::bf16, DType::f32}) {
      for (int h : {0, 2}) {
        CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t), h);
        const Problem P =
            bf16_start(make_problem(sh, t, kLens, kSlots, kHists[static_cast<size_t>(h)], 5100 + sh.Dk + sh.Dv + h));
        const DevProblem d(P);
        Result first;
        int ran = 0;
        for (int split : {0, 1, 2, 4, 8}) {
          if (split != 0 && delta_rule_decode_split(sh.Dk, sh.Dv, split) != split) continue;
          CAPTURE(split);
          const Result r32 = run(P, d, Form::scan, DType::f32, split), r16 = run(P, d, Form::scan, DType::bf16, split);
          check_bf16_is_rounded_f32(P, r16, r32);
          if (ran++ == 0) {
            first = r16;
            const auto [ref32, ref16] = references(P, true);
            check_against_reference(P, r32, r16, ref32, ref16, 1e-5);
          } else {
            CHECK(byte_diff(r16.out, first.out, t) == "");
            CHECK(byte_diff(r16.state, first.state, DType::bf16) == "");
          }
        }
        CHECK(ran >= 2);
      }
    }
  }
}

// With g = 0 every operation of the scan is a correctly rounded f32 operation on both sides.
TEST_CASE("delta-rule prefill scan, bf16 state: the bytes of ref::delta_rule_prefill_recurrent (g = 0)",
          "[gpu][delta_rule][ssm_state]") {
  for (const Shape& sh : std::vector<Shape>{{2, 4, 128, 128}, {2, 4, 32, 40}, {2, 4, 16, 24}}) {
    for (DType t : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t));
      Problem P = bf16_start(make_problem(sh, t, kLens, kSlots, kHists[2], 5200 + sh.Dk + sh.Dv));
      std::fill(P.g.begin(), P.g.begin() + P.T * sh.Hv, 0.0f);  // the rows past T keep their NaN
      const DevProblem d(P);
      const auto [ref32, ref16] = references(P, true);
      for (int split : {0, 1}) {
        if (split != 0 && delta_rule_decode_split(sh.Dk, sh.Dv, split) != split) continue;
        CAPTURE(split);
        const Result r16 = run(P, d, Form::scan, DType::bf16, split);
        const size_t live = P.live_out_elems() * dtype_size(t);
        CHECK(byte_diff(std::vector<uint8_t>(r16.out.begin(), r16.out.begin() + static_cast<int64_t>(live)),
                        test::to_bytes(ref16.out, t), t) == "");
        CHECK(byte_diff(r16.state, test::to_bytes(ref16.state, DType::bf16), DType::bf16) == "");
      }
    }
  }
}

TEST_CASE("chunked and mma delta-rule prefill, bf16 state: the f32 run's bytes rounded, within the reference's bounds",
          "[gpu][delta_rule_chunked][delta_rule_mma][ssm_state]") {
  // (32, 22): Dv % 4 != 0, the element-wise loads and stores.
  const std::vector<Shape> shapes = {{2, 4, 128, 128}, {1, 2, 128, 64}, {1, 3, 64, 96}, {1, 2, 32, 22}};
  for (const Shape& sh : shapes) {
    REQUIRE(delta_rule_prefill_chunked_supports(sh.Dk, sh.Dv));
    REQUIRE(delta_rule_prefill_mma_supports(sh.Dk, sh.Dv));
    for (DType t : {DType::f32, DType::bf16}) {
      for (int h : {0, 2}) {
        CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t), h);
        const Problem P =
            bf16_start(make_problem(sh, t, kLens, kSlots, kHists[static_cast<size_t>(h)], 5300 + sh.Dk + sh.Dv + h));
        const DevProblem d(P);
        const auto [ref32, ref16] = references(P, false);
        for (Form form : {Form::chunked, Form::mma}) {
          for (int tile : {0, 32, 64, 128}) {
            CAPTURE(form_name(form), tile);
            const Result r32 = run(P, d, form, DType::f32, tile), r16 = run(P, d, form, DType::bf16, tile);
            check_bf16_is_rounded_f32(P, r16, r32);
            if (tile == 0) check_against_reference(P, r32, r16, ref32, ref16, form == Form::mma ? 1e-4 : 1e-5);
          }
        }
      }
    }
  }
}

TEST_CASE("chunked and mma delta-rule prefill, bf16 state: a misaligned state gives the vectorised path's bytes",
          "[gpu][delta_rule_chunked][delta_rule_mma][ssm_state]") {
  const Shape sh{2, 4, 64, 64};
  for (DType t : {DType::bf16, DType::f32}) {
    const Problem P = bf16_start(make_problem(sh, t, {70, 0, 129, 5, 33}, {3, 7, -1, 1, 8}, {1, 0, 1, 0, 1}, 5400));
    const DevProblem d(P);
    for (Form form : {Form::chunked, Form::mma}) {
      CAPTURE(dtype_name(t), form_name(form));
      const Result aligned = run(P, d, form, DType::bf16, 0, 0);
      for (size_t offset : {size_t{2}, size_t{8}}) {  // one and four bf16 elements: never 16-byte aligned
        CAPTURE(offset);
        const Result r = run(P, d, form, DType::bf16, 0, offset);
        CHECK(byte_diff(r.out, aligned.out, t) == "");
        CHECK(byte_diff(r.state, aligned.state, DType::bf16) == "");
      }
      CHECK(byte_diff(aligned.state, rounded_state(run(P, d, form, DType::f32).state), DType::bf16) == "");
    }
  }
}

TEST_CASE("delta-rule prefill: a state dtype other than f32 or bf16 is refused", "[gpu][delta_rule][ssm_state]") {
  const Problem P = make_problem(Shape{1, 2, 64, 64}, DType::bf16, {5, 3}, {0, 1}, {1, 0}, 5500);
  const DevProblem d(P);
  DevBuf state(static_cast<size_t>(P.num_slots * P.sh.Hv * P.head_size()) * 4), out(P.out_bytes());
  DeltaRulePrefillParams p = test::drp::prefill_params(P, d, state.data(), out.data());
  p.state_dtype = DType::f16;
  CHECK(delta_rule_prefill(p, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "delta_rule.prefill: state_dtype must be f32 or bf16");
  CHECK(delta_rule_prefill_chunked(p, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "delta_rule.prefill (chunked): state_dtype must be f32 or bf16");
  CHECK(delta_rule_prefill_mma(p, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "delta_rule.prefill (mma): state_dtype must be f32 or bf16");
}
