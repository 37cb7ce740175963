// GPU tests of the decode conv update (kernels/conv_update.h, ARMS.md's byte-exact matrix):
// - `fast` at every V (channels per thread: 2, 4, 8), at 128 threads per block and at 256 or 512,
//   gives `grid`'s raw bytes of the outputs and of the whole conv state, for K in {2, 3, 4, 5, 8}, C in {1, 127, 129,
//   385, 1024, 1028, 1030, 8192, 10240} (1028, 1030: C a multiple of 4 / 2 but not of 8 / 4), activations f32/bf16,
//   state bf16/f32, with and without bias and SiLU (x row strides C, C+5, C+8);
// - every fast launch runs inside a captured graph, so the test reads back which body ran: the vec
//   body (conv_update_fast_kernel<V, ...>) exactly when K <= 5, C % V == 0 and every buffer is
//   aligned to its access width (x's row stride included), else the scalar body
//   (conv_update_fast_scalar_kernel<V>); each (V, K <= 5) runs both bodies somewhere in the matrix;
// - padding rows (slot -1) get all-zero output bytes and no state is read or written for them; slots
//   no row uses keep their bytes; x is read through a row stride > C whose gap holds NaN that must
//   never be read; outputs start poisoned (0xA5);
// - against ref::conv_update: the state byte-exact (pure data movement and one rounding of x);
//   outputs f32 within 1e-6 + 1e-5 |ref|, bf16 within one bf16 ulp of |ref| (GPU expf vs
//   std::exp differ by an ulp, which can move a SiLU output across a rounding boundary);
// - structure: one captured launch per arm (and per V); the node names the contract's kernel, grid
//   and block; each base alone misaligned takes fast's scalar body at every V and gives the same
//   bytes; NaN payloads in the state roll bit for bit in both arms; the launcher refuses a contract
//   that is not the contract function's (a V that does not match the grid).
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "graphs/node_timer.h"
#include "kernels/contracts.h"
#include "kernels/conv_update.h"
#include "kernels/ref/conv_ref.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using sg::test::byte_diff;
using sg::test::DevBuf;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kNumSlots = 13;
// Nine rows: two padding rows, distinct slots in scrambled order; slots 1, 3, 6, 8, 9, 11 unused.
const std::vector<int32_t> kSlots = {4, -1, 0, 10, 7, -1, 2, 12, 5};

struct Case {
  int C, K;
  DType act, state;
  int x_pad;  // x_stride = C + x_pad (NaN in the gap)
  bool bias, silu;
  uint64_t seed;
  int rows() const { return static_cast<int>(kSlots.size()); }
  int64_t x_stride() const { return C + x_pad; }
};

std::vector<float> as_stored(std::vector<float> v, DType t) {
  if (t == DType::bf16) {
    for (auto& x : v) x = round_bf16(x);
  }
  return v;
}

struct Inputs {
  std::vector<float> x, state, w, bias;  // as stored on the device; x [rows, x_stride] with NaN gaps
  DevBuf d_x, d_slots, d_w, d_bias;
};

Inputs make_inputs(const Case& c) {
  Inputs in;
  const int rows = c.rows();
  const auto dense = as_stored(test::uniform(static_cast<size_t>(rows) * c.C, c.seed, -3.f, 3.f), c.act);
  in.x.assign(static_cast<size_t>(rows) * c.x_stride(), kNaN);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(in.x.data() + r * c.x_stride(), dense.data() + static_cast<size_t>(r) * c.C, sizeof(float) * c.C);
  }
  in.state = as_stored(test::uniform(static_cast<size_t>(kNumSlots) * c.C * (c.K - 1), c.seed + 1, -3.f, 3.f), c.state);
  in.w = test::uniform(static_cast<size_t>(c.C) * c.K, c.seed + 2, -1.f, 1.f);
  if (c.bias) in.bias = test::uniform(c.C, c.seed + 3, -0.5f, 0.5f);
  in.d_x = DevBuf::from(in.x, c.act);
  in.d_slots = DevBuf::from_i32(kSlots);
  in.d_w = DevBuf::from(in.w, DType::f32);
  if (c.bias) in.d_bias = DevBuf::from(in.bias, DType::f32);
  return in;
}

struct Result {
  std::vector<uint8_t> out, state;
  std::string kernel;  // short name of the kernel that ran (node_timer.h's short_kernel_name)
};

constexpr int kVs[] = {2, 4, 8};  // the fast arm's channels per thread (kConvUpdateFastChannelChoices)

ConvUpdateParams params(const Case& c, const Inputs& in, const DevBuf& out, const DevBuf& state) {
  ConvUpdateParams p;
  p.x = in.d_x.data();
  p.x_stride = c.x_stride();
  p.x_dtype = c.act;
  p.out = out.data();
  p.out_dtype = c.act;
  p.state = state.data();
  p.state_dtype = c.state;
  p.slots = in.d_slots.as<int32_t>();
  p.w = in.d_w.as<float>();
  p.bias = c.bias ? in.d_bias.as<float>() : nullptr;
  p.rows = c.rows();
  p.C = c.C;
  p.K = c.K;
  p.silu = c.silu;
  return p;
}

// The contract of `arm` for the case; v = the fast arm's channels per thread (0: the pick), b its
// threads per block (0: the default, 128).
LaunchContract<ConvUpdateArm> contract_of(const Case& c, ConvUpdateArm arm, int v, int b = 0) {
  const auto k = conv_update_contract(arm, ConvUpdateShape{c.rows(), c.C, c.K, v, b});
  REQUIRE(k.arm == arm);
  if (arm == ConvUpdateArm::fast && v != 0) REQUIRE(k.per_thread == v);
  if (arm == ConvUpdateArm::fast) REQUIRE(k.block.x == static_cast<unsigned>(b != 0 ? b : 128));
  return k;
}

// Launches once inside a captured graph and replays it once: the graph says which kernel ran.
std::string launch_captured(const ConvUpdateParams& p, const LaunchContract<ConvUpdateArm>& k) {
  Stream s;
  check(cudaDeviceSynchronize());  // the buffers' uploads and poison fills, on the legacy stream
  CapturedGraph g = CapturedGraph::capture("conv.update", s.get(), [&] { check(conv_update(p, k, s.get())); });
  const Manifest m = build_manifest("conv.update", "", g.graph(), NodeRecorder{});
  REQUIRE(m.nodes.size() == 1);
  CHECK(m.nodes[0].grid == k.grid);
  CHECK(m.nodes[0].block == k.block);
  g.replay(s.get());
  s.sync();
  return short_kernel_name(m.nodes[0].kernel);
}

Result run_arm(const Case& c, const Inputs& in, ConvUpdateArm arm, int v = 0, int b = 0) {
  DevBuf out(static_cast<size_t>(c.rows()) * c.C * dtype_size(c.act));  // poisoned 0xA5
  DevBuf state = DevBuf::from(in.state, c.state);
  const std::string kernel = launch_captured(params(c, in, out, state), contract_of(c, arm, v, b));
  return {out.download(), state.download(), kernel};
}

// The fast arm's body rule (conv_update.cu), restated: the vec body runs when K is 2..5, x and out
// share a dtype, C % V == 0 and each buffer is aligned to its access width, the largest of 16, 8, 4
// bytes dividing one thread's slice (V x or out elements, V (K-1) state elements, V K weights, V
// bias values). Bases here come from cudaMalloc (256-byte aligned) unless a test shifts them, so
// only x's row stride can break it.
int access_width(size_t bytes) { return bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : 4; }
bool expect_vec(const Case& c, int v) {
  const size_t ea = dtype_size(c.act);
  return c.K >= 2 && c.K <= 5 && c.C % v == 0 && (c.x_stride() * ea) % access_width(v * ea) == 0;
}
std::string vec_name(int v) { return fmt::format("conv_update_fast_kernel<{}, ", v); }
std::string scalar_name(int v) { return fmt::format("conv_update_fast_scalar_kernel<{}>", v); }

std::string describe(const Case& c) {
  return fmt::format("C={} K={} act={} state={} x_stride={} bias={} silu={} seed={}", c.C, c.K, dtype_name(c.act),
                     dtype_name(c.state), c.x_stride(), c.bias, c.silu, c.seed);
}

// One bf16 ulp at |r| (the spacing of bf16 values in r's binade); the smallest normal's for 0.
double bf16_ulp(double r) {
  const double a = std::fabs(r);
  if (a < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

// Bodies seen per (V, K): {vec runs, scalar runs}.
using BodyCount = std::map<std::pair<int, int>, std::pair<int, int>>;

void check_case(const Case& c, BodyCount& seen) {
  INFO(describe(c));
  const Inputs in = make_inputs(c);
  const int rows = c.rows(), C = c.C;
  const size_t es = dtype_size(c.act);

  const Result grid = run_arm(c, in, ConvUpdateArm::grid);
  CHECK(grid.kernel == "conv_update_grid_kernel");
  std::vector<Result> fast;
  // Every V at the default block (128 threads) and at 256 or 512 (alternating with the seed).
  for (int v : kVs) {
    for (int b : {128, c.seed % 2 == 0 ? 256 : 512}) {
      INFO("fast V=" << v << " block " << b << " vs grid");
      fast.push_back(run_arm(c, in, ConvUpdateArm::fast, v, b));
      const Result& f = fast.back();
      CHECK(byte_diff(f.out, grid.out, c.act) == "");
      CHECK(byte_diff(f.state, grid.state, c.state) == "");
      const bool vec = expect_vec(c, v);
      INFO("kernel " << f.kernel << ", expected the " << (vec ? "vec" : "scalar") << " body");
      CHECK(f.kernel.rfind(vec ? vec_name(v) : scalar_name(v), 0) == 0);
      auto& n = seen[{v, c.K}];
      (vec ? n.first : n.second) += 1;
    }
  }

  // Reference on the same stored values.
  std::vector<float> state = in.state, out(static_cast<size_t>(rows) * C);
  const ref::Store out_st = c.act == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
  const ref::Store state_st = c.state == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
  ref::conv_update(ref::ConvShape{C, c.K, c.silu, out_st, state_st}, rows, in.x.data(), c.x_stride(), kSlots.data(),
                   state.data(), in.w.data(), c.bias ? in.bias.data() : nullptr, out.data());
  {
    INFO("grid vs ref::conv_update");
    CHECK(byte_diff(grid.state, test::to_bytes(state, c.state), c.state) == "");
    const auto got = test::from_bytes(grid.out, c.act);
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double r = out[i];
      const double tol = c.act == DType::bf16 ? bf16_ulp(r) : 1e-6 + 1e-5 * std::fabs(r);
      const double err = std::fabs(static_cast<double>(got[i]) - r);
      if (!(err <= tol)) ++bad;  // NaN (poison left, or a NaN sentinel read) fails
      worst = std::max(worst, err / tol);
    }
    INFO("worst |d| / tol " << worst);
    CHECK(bad == 0);
  }

  // Padding rows: all-zero output bytes. Unused slots (and so the padding rows' nonexistent ones):
  // state bytes unchanged. Live slots changed (a test that cannot fail is a defect). The fast runs
  // equal grid's bytes (checked above), so grid's state speaks for them.
  const size_t row_bytes = static_cast<size_t>(C) * es;
  const size_t slot_bytes = static_cast<size_t>(C) * (c.K - 1) * dtype_size(c.state);
  const auto state0 = test::to_bytes(in.state, c.state);
  std::set<int> live;
  for (int r = 0; r < rows; ++r) {
    if (kSlots[r] < 0) {
      bool zero = true;
      for (size_t i = 0; i < row_bytes; ++i) {
        zero = zero && grid.out[r * row_bytes + i] == 0;
        for (const Result& f : fast) zero = zero && f.out[r * row_bytes + i] == 0;
      }
      CAPTURE(r);
      CHECK(zero);
    } else {
      live.insert(kSlots[r]);
    }
  }
  size_t unused_changed = 0, live_unchanged = 0;
  for (int s = 0; s < kNumSlots; ++s) {
    const bool same = std::memcmp(grid.state.data() + s * slot_bytes, state0.data() + s * slot_bytes, slot_bytes) == 0;
    if (live.count(s)) {
      live_unchanged += same;
    } else {
      unused_changed += !same;
    }
  }
  CHECK(unused_changed == 0);
  CHECK(live_unchanged == 0);
}

}  // namespace

TEST_CASE("conv.update: fast at every V gives grid's bytes, grid matches the reference", "[gpu][conv_update]") {
  const DType acts[] = {DType::f32, DType::bf16};
  const DType states[] = {DType::bf16, DType::f32};
  const int pads[] = {0, 5, 8};
  uint64_t seed = 500;
  int n = 0, j = 0;
  BodyCount seen;
  for (int K : {2, 3, 4, 5, 8}) {  // K <= 5: the fast arm's vec body where aligned; 8: its scalar body
    for (int C : {1, 127, 129, 385, 1024, 1028, 1030, 8192, 10240}) {
      int i = 0;
      for (DType act : acts) {
        for (DType st : states) {
          // (j + i) mod 4 walks every (bias, SiLU) pair for each (act, state) pair as (K, C) varies.
          const int m = (j + i) % 4;
          const Case c{C, K, act, st, pads[n % 3], m % 2 == 0, m / 2 == 0, seed++};
          ++n;
          ++i;
          check_case(c, seen);
        }
      }
      ++j;
    }
  }
  // Both bodies ran at every V for K <= 5; only the scalar one for K = 8.
  for (int v : kVs) {
    for (int K : {2, 3, 4, 5, 8}) {
      CAPTURE(v, K);
      const auto [vec, scalar] = seen[{v, K}];
      CHECK((K <= 5 ? vec > 0 : vec == 0));
      CHECK(scalar > 0);
    }
  }
}

TEST_CASE("conv.update: each arm's captured node is the contract's kernel, grid and block",
          "[gpu][conv_update][manifest]") {
  Stream s;
  const Case c{1024, 4, DType::bf16, DType::bf16, 0, false, true, 77};
  const Inputs in = make_inputs(c);
  DevBuf out(static_cast<size_t>(c.rows()) * c.C * 2);
  DevBuf state = DevBuf::from(in.state, c.state);
  const ConvUpdateParams p = params(c, in, out, state);
  check(cudaDeviceSynchronize());
  struct Run {
    ConvUpdateArm arm;
    int v;  // fast: channels per thread (0: the contract's pick)
  };
  for (const Run run : {Run{ConvUpdateArm::grid, 0}, Run{ConvUpdateArm::fast, 0}, Run{ConvUpdateArm::fast, 2},
                        Run{ConvUpdateArm::fast, 4}, Run{ConvUpdateArm::fast, 8}}) {
    CAPTURE(arm_name(run.arm), run.v);
    const auto contract = contract_of(c, run.arm, run.v);
    NodeRecorder rec;
    const std::string name = fmt::format("conv.update {}", arm_name(run.arm));
    CapturedGraph g = CapturedGraph::capture(name, s.get(), [&] {
      check(conv_update(p, contract, s.get()));
      rec.launched(s.get(), {-1, "conv.update", std::string(arm_name(contract.arm)), 0});
    });
    const Manifest m = build_manifest(name, "", g.graph(), rec);
    REQUIRE(m.nodes.size() == 1);
    const ManifestNode& node = m.nodes[0];
    INFO("kernel " << node.kernel << ", contract kernel " << contract.kernel);
    CHECK(node.kernel.find(std::string(contract.kernel)) != std::string::npos);
    if (run.arm == ConvUpdateArm::fast) {
      // The aligned bf16 case runs the vec body (conv_update.cu) of the contract's V, not the scalar one.
      const int v = run.v != 0 ? run.v : conv_update_fast_channels(c.rows(), c.C);
      CHECK(contract.per_thread == v);
      CHECK(short_kernel_name(node.kernel).rfind("conv_update_fast_kernel<", 0) == 0);
      CHECK(short_kernel_name(node.kernel).rfind(vec_name(v), 0) == 0);
      CHECK(node.kernel.find("scalar") == std::string::npos);
      CHECK(node.grid.x == static_cast<unsigned>((c.C + 128 * v - 1) / (128 * v)));
    }
    CHECK(node.grid == contract.grid);
    CHECK(node.block == contract.block);
    CHECK(node.smem_bytes == contract.smem_bytes);
    CHECK(node.label.op == "conv.update");
    g.replay(s.get());
    s.sync();
  }
}

TEST_CASE("conv.update: the launcher refuses a contract the contract function would not give", "[gpu][conv_update]") {
  const Case c{1024, 4, DType::bf16, DType::bf16, 0, false, true, 78};
  const Inputs in = make_inputs(c);
  DevBuf out(static_cast<size_t>(c.rows()) * c.C * 2);
  DevBuf state = DevBuf::from(in.state, c.state);
  const ConvUpdateParams p = params(c, in, out, state);
  auto k = contract_of(c, ConvUpdateArm::fast, 4);
  k.per_thread = 8;  // V = 8 on V = 4's grid would leave half the channels undone
  CHECK(conv_update(p, k, nullptr) == cudaErrorInvalidValue);
  k.per_thread = 3;  // no such kernel
  CHECK(conv_update(p, k, nullptr) == cudaErrorInvalidValue);
  k.per_thread = 0;  // a fast contract always names its V
  CHECK(conv_update(p, k, nullptr) == cudaErrorInvalidValue);
  auto g = contract_of(c, ConvUpdateArm::grid, 0);
  g.per_thread = 2;  // the grid arm has none
  CHECK(conv_update(p, g, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);  // nothing was launched
  CHECK(state.download() == test::to_bytes(in.state, c.state));
}

namespace {

// Which base of the params is moved one element off its alignment (none: all aligned).
enum class Shift { none, x, out, state, w, bias };

// Runs `arm` (fast: V = v) with one base (or none) moved by one element: the same values, another
// address. One element breaks every access width of the vec body (each is at least twice the
// element size: 4 bytes for bf16 x/out/state at V = 2, 8 bytes for f32 ones and the bias).
Result run_shifted(const Case& c, const Inputs& in, ConvUpdateArm arm, int v, Shift sh) {
  const auto lead = [](std::vector<float> vals, bool on) {
    if (on) vals.insert(vals.begin(), 0.0f);
    return vals;
  };
  const size_t ea = dtype_size(c.act), es = dtype_size(c.state);
  const size_t out_bytes = static_cast<size_t>(c.rows()) * c.C * ea;
  DevBuf x = DevBuf::from(lead(in.x, sh == Shift::x), c.act);
  DevBuf w = DevBuf::from(lead(in.w, sh == Shift::w), DType::f32);
  DevBuf b = DevBuf::from(lead(in.bias, sh == Shift::bias), DType::f32);
  DevBuf st = DevBuf::from(lead(in.state, sh == Shift::state), c.state);
  DevBuf out(out_bytes + ea);  // poisoned
  ConvUpdateParams p = params(c, in, out, st);
  p.x = static_cast<const char*>(x.data()) + (sh == Shift::x ? ea : 0);
  p.w = reinterpret_cast<const float*>(static_cast<const char*>(w.data()) + (sh == Shift::w ? 4 : 0));
  p.bias = reinterpret_cast<const float*>(static_cast<const char*>(b.data()) + (sh == Shift::bias ? 4 : 0));
  p.state = static_cast<char*>(st.data()) + (sh == Shift::state ? es : 0);
  p.out = static_cast<char*>(out.data()) + (sh == Shift::out ? ea : 0);
  const std::string kernel = launch_captured(p, contract_of(c, arm, v));
  auto o = out.download();
  auto sb = st.download();
  const size_t o0 = sh == Shift::out ? ea : 0, s0 = sh == Shift::state ? es : 0;
  return {std::vector<uint8_t>(o.begin() + o0, o.begin() + o0 + out_bytes),
          std::vector<uint8_t>(sb.begin() + s0, sb.end()), kernel};
}

}  // namespace

TEST_CASE("conv.update: fast falls back to its scalar body at every V when any base is misaligned",
          "[gpu][conv_update]") {
  // Each base alone one element off: the vec body would fault or read the wrong elements, so fast
  // must take its scalar body and still give grid's bytes of the aligned run.
  for (int K : {2, 4}) {  // K = 2: the smallest state slices (4 bytes for bf16 at V = 2)
    for (DType act : {DType::bf16, DType::f32}) {
      for (DType st : {DType::bf16, DType::f32}) {
        const Case c{1024, K, act, st, 0, true, true, 901};
        INFO(describe(c));
        const Inputs in = make_inputs(c);
        const Result ref = run_shifted(c, in, ConvUpdateArm::grid, 0, Shift::none);
        for (int v : kVs) {
          for (Shift sh : {Shift::none, Shift::x, Shift::out, Shift::state, Shift::w, Shift::bias}) {
            CAPTURE(v, static_cast<int>(sh));
            const Result f = run_shifted(c, in, ConvUpdateArm::fast, v, sh);
            CHECK(byte_diff(f.out, ref.out, c.act) == "");
            CHECK(byte_diff(f.state, ref.state, c.state) == "");
            INFO("kernel " << f.kernel);
            CHECK(f.kernel.rfind(sh == Shift::none ? vec_name(v) : scalar_name(v), 0) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("conv.update: NaN payloads in the state roll bit for bit in both arms", "[gpu][conv_update]") {
  // Taps are data movement: a NaN with a payload moves one tap down unchanged (no canonical NaN).
  for (DType st : {DType::bf16, DType::f32}) {
    const Case c{1024, 4, DType::bf16, st, 0, false, true, 902};
    INFO(describe(c));
    Inputs in = make_inputs(c);
    const size_t es = dtype_size(st);
    const int slot = kSlots[0], km1 = c.K - 1, ch = 37;
    const int64_t tap1 = (static_cast<int64_t>(slot) * c.C + ch) * km1 + 1;  // moves to tap 0
    auto bytes = test::to_bytes(in.state, st);
    const uint32_t payload = st == DType::bf16 ? 0xFFC1u : 0x7F800001u;
    std::memcpy(bytes.data() + tap1 * es, &payload, es);
    std::vector<Result> res;
    // grid, then fast at each V.
    for (int a = 0; a < 4; ++a) {
      DevBuf state = DevBuf::from_bytes(bytes);
      DevBuf out(static_cast<size_t>(c.rows()) * c.C * 2);
      const ConvUpdateArm arm = a == 0 ? ConvUpdateArm::grid : ConvUpdateArm::fast;
      const int v = a == 0 ? 0 : kVs[a - 1];
      check(conv_update(params(c, in, out, state), contract_of(c, arm, v), nullptr));
      check(cudaDeviceSynchronize());
      res.push_back({out.download(), state.download(), ""});
      uint32_t got = 0;
      std::memcpy(&got, res.back().state.data() + (tap1 - 1) * es, es);
      CAPTURE(a);
      CHECK(got == payload);
      CHECK(res.back().out == res[0].out);
      CHECK(res.back().state == res[0].state);
    }
  }
}
