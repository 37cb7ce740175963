// GPU tests of the bf16 recurrent (SSM) state in the decode kernels (DeltaRuleDecodeParams::
// state_dtype, GdnDecodeFusedParams::ssm_state_dtype). The state is read widened to f32 and written
// rounded to nearest even; the arithmetic is the f32 kernel's. So, from a bf16-representable start:
// - delta_rule.decode, every split and column-block count, the fused gated norm off and on, column
//   pairs and one column a thread group: the outputs are the f32-state kernel's bytes and the state
//   is the f32-state kernel's state rounded to bf16, byte for byte; slots of padding rows and unused
//   slots keep their bytes;
// - with g = 0 (decay exp(0) = 1 on both sides, so no expf / std::exp ulp) the kernel's output and
//   bf16 state are the bytes of ref::delta_rule_decode with Store::bf16 state; with random g, within
//   the f32 decode test's tolerances (state: one bf16 ulp more, for a rounding boundary);
// - gdn.decode: the fused arm with a bf16 state gives the unfused path's bytes (conv.update, postconv,
//   delta_rule.decode with a bf16 state): outputs, conv state and SSM state, bf16 and f32 activations;
//   padding rows leave every state byte alone;
// - a state dtype other than f32 / bf16 is refused with a message naming the field.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/gdn_decode_fused.h"
#include "kernels/launch_check.h"
#include "kernels/ref/delta_rule_ref.h"
#include "models/gdn_mixer.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

using test::bf16_ulp;
const auto& rounded_state = test::rounded_to_bf16;

struct DecodeShape {
  int Hk, Hv, Dk, Dv;
};

// Inputs of one decode step over 7 rows (two padding) and 9 slots, or the given slots (-1:
// padding) over n_slots; the state bf16-representable.
struct DecodeInputs {
  DecodeShape sh;
  DType t;
  int rows = 7, slots_n = 9;
  std::vector<float> q, k, v, g, beta, state0, z, w;
  std::vector<int32_t> slots = {4, -1, 0, 8, 2, -1, 6};  // slots 1, 3, 5, 7 unused
  DevBuf dq, dk, dv, dg, db, ds, dz, dw;
  DecodeInputs(DecodeShape s, DType dt, uint64_t seed, bool zero_g, std::vector<int32_t> slot_list = {},
               int n_slots = 0)
      : sh(s), t(dt) {
    if (!slot_list.empty()) {
      slots = std::move(slot_list);
      rows = static_cast<int>(slots.size());
      slots_n = n_slots;
    }
    auto rnd = [&](size_t n, uint64_t sd, float lo, float hi) {
      return t == DType::bf16 ? test::uniform_bf16(n, sd, lo, hi) : test::uniform(n, sd, lo, hi);
    };
    q = rnd(static_cast<size_t>(rows) * sh.Hk * sh.Dk, seed, -0.3f, 0.3f);
    k = rnd(q.size(), seed + 1, -0.3f, 0.3f);
    v = rnd(static_cast<size_t>(rows) * sh.Hv * sh.Dv, seed + 2, -1.f, 1.f);
    g = test::uniform(static_cast<size_t>(rows) * sh.Hv, seed + 3, -2.f, 0.f);
    if (zero_g) std::fill(g.begin(), g.end(), 0.0f);
    beta = test::uniform(g.size(), seed + 4, 0.f, 1.f);
    state0 = test::uniform_bf16(static_cast<size_t>(slots_n) * sh.Hv * sh.Dk * sh.Dv, seed + 5, -0.2f, 0.2f);
    z = test::uniform_bf16(v.size(), seed + 6, -3.f, 3.f);
    w = test::uniform(static_cast<size_t>(sh.Dv), seed + 7, -1.5f, 1.5f);
    dq = DevBuf::from(q, t);
    dk = DevBuf::from(k, t);
    dv = DevBuf::from(v, t);
    dg = DevBuf::from(g, DType::f32);
    db = DevBuf::from(beta, DType::f32);
    ds = DevBuf::from_i32(slots);
    dz = DevBuf::from(z, DType::bf16);
    dw = DevBuf::from(w, DType::f32);
  }
  // Runs the decode kernel on a fresh state of dtype st (from state0); returns {out, state} bytes.
  std::pair<std::vector<uint8_t>, std::vector<uint8_t>> run(DType st, int split, int col_blocks, bool norm,
                                                            bool pairs = true, bool misaligned = false,
                                                            bool staged = false) const {
    // misaligned: the state starts one bf16 element into its buffer (2 bytes past a 4-byte boundary)
    auto start = state0;
    if (misaligned) start.insert(start.begin(), 0.0f);
    auto state = DevBuf::from(start, st);
    DevBuf out(v.size() * dtype_size(t));  // poisoned
    DeltaRuleDecodeParams p;
    p.q = dq.data();
    p.k = dk.data();
    p.v = dv.data();
    p.qkv_dtype = t;
    p.g = dg.as<float>();
    p.beta = db.as<float>();
    p.slots = ds.as<int32_t>();
    p.state = static_cast<uint8_t*>(state.data()) + (misaligned ? dtype_size(st) : 0);
    p.state_dtype = st;
    p.out = out.data();
    p.out_dtype = t;
    p.rows = rows;
    p.Hk = sh.Hk;
    p.Hv = sh.Hv;
    p.Dk = sh.Dk;
    p.Dv = sh.Dv;
    p.split = split;
    p.col_blocks = col_blocks;
    p.pair_columns = pairs;
    p.staged = staged;
    if (norm) {
      p.norm_z = dz.data();
      p.norm_w = dw.data();
      p.norm_w_dtype = DType::f32;
    }
    check(delta_rule_decode(p, nullptr));
    check(cudaDeviceSynchronize());
    auto sb = state.download();
    if (misaligned) sb.erase(sb.begin(), sb.begin() + static_cast<std::ptrdiff_t>(dtype_size(st)));
    return {out.download(), sb};
  }
  // The CPU reference's outputs and state (Store::bf16 state).
  std::pair<std::vector<float>, std::vector<float>> reference() const {
    auto s = state0;
    std::vector<float> r(v.size());
    ref::delta_rule_decode(ref::DeltaShape{sh.Hk, sh.Hv, sh.Dk, sh.Dv,
                                           t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32, ref::Store::bf16},
                           rows, q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), s.data(), r.data());
    return {r, s};
  }
  size_t slot_bytes(DType st) const { return static_cast<size_t>(sh.Hv) * sh.Dk * sh.Dv * dtype_size(st); }
};

}  // namespace

TEST_CASE("delta-rule decode, bf16 state: the f32-state kernel's outputs and its state rounded, every split",
          "[gpu][delta_rule][ssm_state]") {
  // Dv 20 in 4 blocks: 5 columns a block, too few to pair (the one-column kernel runs).
  for (DecodeShape sh :
       {DecodeShape{16, 32, 128, 128}, DecodeShape{2, 6, 128, 64}, DecodeShape{2, 4, 64, 96}, DecodeShape{1, 3, 32, 40},
        DecodeShape{2, 2, 8, 8}, DecodeShape{2, 4, 16, 24}, DecodeShape{1, 2, 16, 20}}) {
    for (DType t : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t));
      const DecodeInputs in(sh, t, 3000 + sh.Dk + sh.Dv, false);
      const auto start = test::to_bytes(in.state0, DType::bf16);
      std::vector<uint8_t> first_out, first_state;
      int ran = 0;
      const bool norm_built = t == DType::bf16 && (sh.Dv == 64 || sh.Dv == 128 || sh.Dv == 256);
      for (int norm = 0; norm < (norm_built ? 2 : 1); ++norm) {
        for (int variant = 0; variant < 4 * 3; ++variant) {
          const int split = 1 << (variant % 4), col_blocks = 1 << (variant / 4);  // 1 2 4 8 | 1 2 4
          if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split || sh.Dv % col_blocks != 0) continue;
          CAPTURE(norm, split, col_blocks);
          const auto [o32, s32] = in.run(DType::f32, split, col_blocks, norm != 0);
          const auto [o16, s16] = in.run(DType::bf16, split, col_blocks, norm != 0);
          CHECK(byte_diff(o16, o32, t) == "");
          if (norm == 0) {  // column pairs (the default) and one column a thread group: the same bytes
            const auto [o1, s1] = in.run(DType::bf16, split, col_blocks, false, false);
            CHECK(byte_diff(o1, o16, t) == "");
            CHECK(byte_diff(s1, s16, DType::bf16) == "");
            // The staged kernel (where it applies; elsewhere the flag is ignored): the same bytes.
            const auto [os16, ss16] = in.run(DType::bf16, split, col_blocks, false, true, false, true);
            CHECK(byte_diff(os16, o16, t) == "");
            CHECK(byte_diff(ss16, s16, DType::bf16) == "");
            const auto [os32, ss32] = in.run(DType::f32, split, col_blocks, false, true, false, true);
            CHECK(byte_diff(os32, o32, t) == "");
            CHECK(byte_diff(ss32, s32, DType::f32) == "");
          }
          CHECK(byte_diff(s16, rounded_state(s32), DType::bf16) == "");
          // The f32 kernel's state is not bf16 everywhere: the rounding above was not a no-op.
          CHECK(byte_diff(test::to_bytes(test::from_bytes(s16, DType::bf16), DType::f32), s32, DType::f32) != "");
          // Slots of padding rows and unused slots keep their bytes.
          const size_t sb = in.slot_bytes(DType::bf16);
          for (int s : {1, 3, 5, 7}) {
            CAPTURE(s);
            CHECK(std::memcmp(s16.data() + s * sb, start.data() + s * sb, sb) == 0);
          }
          if (norm == 0) {  // every split and block count: the same bytes
            if (ran++ == 0) {
              first_out = o16;
              first_state = s16;
            } else {
              CHECK(byte_diff(o16, first_out, t) == "");
              CHECK(byte_diff(s16, first_state, DType::bf16) == "");
            }
          } else {
            CHECK(byte_diff(s16, first_state, DType::bf16) == "");  // the norm changes the output only
          }
        }
      }
      CHECK(ran >= 2);
      // Against the CPU reference with a bf16 state (random g: expf against std::exp may differ by
      // an ulp): outputs as the f32-state test; the state within its f32 tolerance plus one bf16 ulp
      // (a rounding boundary between two f32 values that close).
      const auto [r, rs] = in.reference();
      const auto got = test::from_bytes(first_out, t);
      const auto got_s = test::from_bytes(first_state, DType::bf16);
      size_t bad = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        const double tol =
            t == DType::bf16 ? 2 * std::ldexp(1.0, -7) * std::fabs(r[i]) + 1e-4 : 1e-5 + 1e-4 * std::fabs(r[i]);
        bad += !(std::fabs(got[i] - r[i]) <= tol);
      }
      for (size_t i = 0; i < rs.size(); ++i) {
        const double m = std::max(std::fabs(got_s[i]), std::fabs(rs[i]));
        bad += !(std::fabs(got_s[i] - rs[i]) <= 1e-5 + 1e-4 * std::fabs(rs[i]) + bf16_ulp(m));
      }
      CHECK(bad == 0);
    }
  }
}

// With g = 0 every operation of the step is a correctly rounded f32 operation on both sides (fmaf,
// *, -, sqrtf, /), so the kernel gives the reference's bytes exactly.
TEST_CASE("delta-rule decode, bf16 state: the bytes of ref::delta_rule_decode with Store::bf16 (g = 0)",
          "[gpu][delta_rule][ssm_state]") {
  for (DecodeShape sh : {DecodeShape{16, 32, 128, 128}, DecodeShape{2, 6, 128, 64}, DecodeShape{1, 3, 32, 40},
                         DecodeShape{2, 4, 16, 24}}) {
    for (DType t : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(t));
      const DecodeInputs in(sh, t, 3100 + sh.Dk + sh.Dv, true);
      const auto [r, rs] = in.reference();
      int ran = 0;
      for (int split : {1, 2, 4, 8}) {
        if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split) continue;
        for (int col_blocks : {1, 2}) {
          if (sh.Dv % col_blocks != 0) continue;
          CAPTURE(split, col_blocks);
          const auto [o16, s16] = in.run(DType::bf16, split, col_blocks, false);
          CHECK(byte_diff(o16, test::to_bytes(r, t), t) == "");
          CHECK(byte_diff(s16, test::to_bytes(rs, DType::bf16), DType::bf16) == "");
          ++ran;
        }
      }
      CHECK(ran >= 2);
    }
  }
}

// The staged kernel's persistent blocks take several (row, v-head) items each when there are more
// items than resident blocks (40 rows x 32 v-heads at Dk = Dv = 128), padding rows among them: the
// bytes of the kernels that give each item its own block, f32 and bf16 states.
TEST_CASE("delta-rule decode, staged: several items a block give the plain kernels' bytes",
          "[gpu][delta_rule][ssm_state]") {
  std::vector<int32_t> slots;
  for (int r = 0; r < 40; ++r) slots.push_back(r % 7 == 3 ? -1 : 45 - r);  // reversed slots, 6 padding rows
  const DecodeInputs in(DecodeShape{16, 32, 128, 128}, DType::bf16, 3300, false, slots, 48);
  for (DType st : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(st));
    // Fewer persistent blocks than the 1280 items (at most the resident ones), and none where the
    // staged kernel does not run (split 4, the fused norm).
    DeltaRuleDecodeParams gp;
    gp.rows = in.rows, gp.Hk = 16, gp.Hv = 32, gp.Dk = 128, gp.Dv = 128, gp.split = 2, gp.staged = true;
    gp.state_dtype = st;
    gp.state = reinterpret_cast<void*>(uintptr_t{1} << 20);  // 16-byte aligned (the grid reads no memory)
    const int blocks = delta_rule_decode_staged_grid(gp);
    CHECK(blocks > 0);
    CHECK(blocks < in.rows * 32);
    gp.split = 4;
    CHECK(delta_rule_decode_staged_grid(gp) == 0);
    gp.split = 2;
    gp.norm_w = gp.state;
    CHECK(delta_rule_decode_staged_grid(gp) == 0);
    const auto [o, s] = in.run(st, 2, 0, false);
    const auto [os, ss] = in.run(st, 2, 0, false, true, false, true);
    CHECK(byte_diff(os, o, DType::bf16) == "");
    CHECK(byte_diff(ss, s, st) == "");
    CHECK(byte_diff(s, test::to_bytes(in.state0, st), st) != "");  // the step wrote the state
  }
}

// A bf16 state 2 bytes past a 4-byte boundary cannot be read in bf16x2 words: the one-column
// kernel runs and gives the bytes of the aligned state's column pairs.
TEST_CASE("delta-rule decode, bf16 state: a misaligned state gives the column pairs' bytes",
          "[gpu][delta_rule][ssm_state]") {
  for (DecodeShape sh : {DecodeShape{16, 32, 128, 128}, DecodeShape{2, 4, 16, 24}}) {
    CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv);
    const DecodeInputs in(sh, DType::bf16, 3200 + sh.Dv, false);
    for (int split : {1, 2, 4}) {
      if (delta_rule_decode_split(sh.Dk, sh.Dv, split) != split) continue;
      CAPTURE(split);
      const auto [o, s] = in.run(DType::bf16, split, 1, false);
      const auto [om, sm] = in.run(DType::bf16, split, 1, false, true, true);
      CHECK(byte_diff(om, o, DType::bf16) == "");
      CHECK(byte_diff(sm, s, DType::bf16) == "");
      CHECK(byte_diff(s, test::to_bytes(in.state0, DType::bf16), DType::bf16) != "");  // the step wrote it
    }
  }
}

TEST_CASE("delta-rule decode: a state dtype other than f32 or bf16 is refused", "[gpu][delta_rule][ssm_state]") {
  DeltaRuleDecodeParams p;
  p.Hk = 2;
  p.Hv = 4;
  p.Dk = 64;
  p.Dv = 64;
  p.rows = 1;
  for (DType st : {DType::f16, DType::i32}) {
    p.state_dtype = st;
    CHECK(delta_rule_decode(p, nullptr) == cudaErrorInvalidValue);
    CHECK(take_launch_refusal() == "delta_rule.decode: state_dtype must be f32 or bf16");
  }
}

namespace {

// One GDN layer's decode buffers (gdn_mixer.h's GdnIo) over `rows` rows, of which the last two are
// padding, and 24 slots; the SSM state in `ssm` dtype.
struct GdnRig {
  GdnDims d;
  DType act, ssm;
  int rows = 9, num_slots = 24;
  std::vector<int32_t> slots;
  std::vector<uint8_t> conv0, ssm0;  // starting states, as stored
  DevBuf x, a, b, dslots, conv_w, A_log, dt_bias, conv_state, ssm_state, conv_out, q, k, v, g, beta, out;
  GdnRig(GdnDims dims, DType act_, DType ssm_, uint64_t seed) : d(dims), act(act_), ssm(ssm_) {
    const int C = d.C();
    for (int r = 0; r < rows; ++r) slots.push_back(r < rows - 2 ? (r * 7 + 3) % num_slots : -1);
    x = DevBuf::from(test::uniform(static_cast<size_t>(rows) * C, seed, -2.f, 2.f), act);
    a = DevBuf::from(test::uniform(static_cast<size_t>(rows) * d.Hv, seed + 1, -3.f, 3.f), act);
    b = DevBuf::from(test::uniform(static_cast<size_t>(rows) * d.Hv, seed + 2, -3.f, 3.f), act);
    dslots = DevBuf::from_i32(slots);
    conv_w = DevBuf::from(test::uniform(static_cast<size_t>(C) * d.K, seed + 3, -0.4f, 0.4f), DType::f32);
    A_log = DevBuf::from(test::uniform(static_cast<size_t>(d.Hv), seed + 4, 0.f, 2.7f), DType::f32);
    dt_bias = DevBuf::from(test::uniform(static_cast<size_t>(d.Hv), seed + 5, -1.f, 1.f), DType::f32);
    conv0 =
        test::to_bytes(test::uniform(static_cast<size_t>(num_slots) * C * (d.K - 1), seed + 6, -2.f, 2.f), DType::bf16);
    // bf16 values, stored as `ssm`: the f32 and bf16 runs start from the same state.
    ssm0 = test::to_bytes(
        test::uniform_bf16(static_cast<size_t>(num_slots) * d.Hv * d.Dk * d.Dv, seed + 7, -0.2f, 0.2f), ssm);
    conv_state = DevBuf::from_bytes(conv0);
    ssm_state = DevBuf::from_bytes(ssm0);
    conv_out = DevBuf(static_cast<size_t>(rows) * C * dtype_size(act));
    q = DevBuf(static_cast<size_t>(rows) * d.Hk * d.Dk * dtype_size(act));
    k = DevBuf(q.bytes());
    v = DevBuf(static_cast<size_t>(rows) * d.Hv * d.Dv * dtype_size(act));
    g = DevBuf(static_cast<size_t>(rows) * d.Hv * 4);
    beta = DevBuf(g.bytes());
    out = DevBuf(v.bytes());
  }
  // The layer's decode through `arm` from the starting states; {out, conv state, ssm state, q, k, v,
  // g, beta} bytes (the last five poisoned first, so that a buffer an arm leaves unwritten shows).
  std::vector<std::vector<uint8_t>> run(GdnDecodeArm arm) {
    check(cudaMemcpy(conv_state.data(), conv0.data(), conv0.size(), cudaMemcpyHostToDevice));
    check(cudaMemcpy(ssm_state.data(), ssm0.data(), ssm0.size(), cudaMemcpyHostToDevice));
    out.fill(0xA5);
    for (DevBuf* b : {&q, &k, &v, &g, &beta}) b->fill(static_cast<uint8_t>(0x3C + static_cast<int>(arm)));
    GdnIo io;
    io.x = x.data();
    io.x_stride = d.C();
    io.a = a.data();
    io.b = b.data();
    io.ab_stride = d.Hv;
    io.slots = dslots.as<int32_t>();
    io.conv_w = conv_w.as<float>();
    io.A_log = A_log.as<float>();
    io.dt_bias = dt_bias.as<float>();
    io.conv_state = conv_state.data();
    io.conv_state_dtype = DType::bf16;
    io.conv_out = conv_out.data();
    io.q = q.data();
    io.k = k.data();
    io.v = v.data();
    io.g = g.as<float>();
    io.beta = beta.as<float>();
    io.out = out.data();
    ArmSelection arms;
    arms.gdn_decode = arm;
    GdnDecodePath path = gdn_decode_path(d, act, arms, rows, io);
    REQUIRE(path.is_fused() == (arm == GdnDecodeArm::fused));
    REQUIRE(path.is_prep() == (arm == GdnDecodeArm::prep));  // no fallback: the arm runs as itself
    // The SSM state and its dtype, on the kernels' params themselves.
    path.fused.ssm_state = ssm_state.data();
    path.fused.ssm_state_dtype = ssm;
    path.delta.state = ssm_state.data();
    path.delta.state_dtype = ssm;
    check(cudaDeviceSynchronize());  // the copies and the fill are on the legacy stream
    path.launch(nullptr, nullptr, -1);
    check(cudaDeviceSynchronize());
    return {out.download(), conv_state.download(), ssm_state.download(), q.download(),
            k.download(),   v.download(),          g.download(),         beta.download()};
  }
};

}  // namespace

TEST_CASE("gdn.decode fused and prep arms, bf16 SSM state: the unfused path's bytes, padding rows touch no state",
          "[gpu][skeleton][arms][ssm_state]") {
  // The 4B heads, the 27B heads (Hv/Hk = 3), Dk 64 with K = 3, one block a v-head with idle lanes
  // (Dv = 72), and clusters of one block (Hv = Hk).
  for (GdnDims dims : {GdnDims{16, 32, 128, 128, 4}, GdnDims{2, 6, 128, 128, 4}, GdnDims{2, 6, 64, 64, 3},
                       GdnDims{1, 6, 128, 72, 4}, GdnDims{2, 2, 64, 64, 4}}) {
    for (DType act : {DType::bf16, DType::f32}) {
      CAPTURE(dims.Hk, dims.Hv, dims.Dk, dims.Dv, dims.K, dtype_name(act));
      const uint64_t seed = 4000 + dims.Hv + dims.Dk + dims.Dv;
      GdnRig r16(dims, act, DType::bf16, seed), r32(dims, act, DType::f32, seed);
      const auto unfused = r16.run(GdnDecodeArm::unfused);
      const auto fused = r16.run(GdnDecodeArm::fused);
      CHECK(byte_diff(fused[0], unfused[0], act) == "");
      CHECK(byte_diff(fused[1], unfused[1], DType::bf16) == "");
      CHECK(byte_diff(fused[2], unfused[2], DType::bf16) == "");
      // prep: conv + post-conv in one kernel; q, k, v, g, beta too (padding rows included), each
      // poisoned with other bytes before each run.
      const auto prep = r16.run(GdnDecodeArm::prep);
      CHECK(byte_diff(prep[0], unfused[0], act) == "");
      CHECK(byte_diff(prep[1], unfused[1], DType::bf16) == "");
      CHECK(byte_diff(prep[2], unfused[2], DType::bf16) == "");
      for (size_t i = 3; i < 6; ++i) CHECK(byte_diff(prep[i], unfused[i], act) == "");
      for (size_t i = 6; i < 8; ++i) CHECK(byte_diff(prep[i], unfused[i], DType::f32) == "");
      // Against the f32 SSM state from the same values: the same outputs and conv state, the SSM
      // state rounded.
      const auto f32 = r32.run(GdnDecodeArm::unfused);
      CHECK(byte_diff(unfused[0], f32[0], act) == "");
      CHECK(byte_diff(unfused[1], f32[1], DType::bf16) == "");
      CHECK(byte_diff(unfused[2], rounded_state(f32[2]), DType::bf16) == "");
      CHECK(byte_diff(f32[2], r32.ssm0, DType::f32) != "");  // the step changed the state
      // Only the live rows' slots changed (padding rows and unused slots keep every state byte).
      std::vector<bool> live(static_cast<size_t>(r16.num_slots), false);
      for (int32_t s : r16.slots)
        if (s >= 0) live[static_cast<size_t>(s)] = true;
      const size_t ssm_slot = static_cast<size_t>(dims.Hv) * dims.Dk * dims.Dv * 2;
      const size_t conv_slot = static_cast<size_t>(dims.C()) * (dims.K - 1) * 2;
      for (const auto* res : {&unfused, &fused}) {
        size_t wrong = 0, live_changed = 0;
        for (int s = 0; s < r16.num_slots; ++s) {
          const bool ssm_same =
              std::memcmp((*res)[2].data() + s * ssm_slot, r16.ssm0.data() + s * ssm_slot, ssm_slot) == 0;
          const bool conv_same =
              std::memcmp((*res)[1].data() + s * conv_slot, r16.conv0.data() + s * conv_slot, conv_slot) == 0;
          if (live[static_cast<size_t>(s)]) {
            live_changed += !ssm_same && !conv_same;
          } else {
            wrong += !ssm_same || !conv_same;
          }
        }
        CHECK(wrong == 0);
        CHECK(live_changed == static_cast<size_t>(r16.rows - 2));
      }
    }
  }
}

TEST_CASE("gdn.decode fused: an SSM state dtype other than f32 or bf16 is refused", "[gpu][skeleton][ssm_state]") {
  const GdnDims d{2, 6, 64, 64, 3};
  GdnRig rig(d, DType::bf16, DType::bf16, 77);
  GdnDecodeFusedParams p;
  p.rows = 4;
  p.Hk = d.Hk;
  p.Hv = d.Hv;
  p.Dk = d.Dk;
  p.Dv = d.Dv;
  p.K = d.K;
  p.ssm_state = rig.ssm_state.data();
  p.ssm_state_dtype = DType::f16;
  const auto c = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{p.rows, d.Hk, d.Hv, d.Dk, d.Dv, d.K});
  REQUIRE(c.arm == GdnDecodeArm::fused);
  CHECK(gdn_decode_fused(p, c, nullptr) == cudaErrorInvalidValue);
  CHECK(take_launch_refusal() == "gdn.decode (fused): ssm_state_dtype must be f32 or bf16");
}
