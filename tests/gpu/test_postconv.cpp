// GPU tests of the post-conv arms (kernels/postconv.h, ARMS.md's byte-exact matrix):
// - every arm (megablock, fast, split, token_tile) gives megablock's raw bytes of q, k, v, g and
//   beta, for conv f32/bf16 in and q/k/v f32/bf16 out, T in {1, 15, 16, 17, 128, 2048},
//   Hk/Hv in {4/8, 16/32, 16/48} with Dk = Dv = 128, and a few other head sizes (Dk = 64 and
//   others) where token_tile falls back to fast by contract;
// - the inputs are read through strided views (conv_stride > C, a_stride and b_stride > Hv) whose
//   gaps hold NaN that must never be read; both 16-byte-aligned and unaligned conv row pitches
//   (token_tile's vector and element paths); outputs start poisoned (0xA5) and must be fully written;
// - against the CPU reference ref::postconv: q, k, v byte-exact (the tree order is the contract's,
//   and sqrt and division are correctly rounded on both sides); g and beta within
//   1e-6 + 4e-7 |ref| (expf / log1pf on the GPU vs std::exp / std::log1p: a few ulps, "2 ulp-ish");
// - structure: one captured launch per arm; the graph's kernel node names the contract's kernel and
//   has its grid and block.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/contracts.h"
#include "kernels/postconv.h"
#include "kernels/ref/postconv_ref.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using sg::test::byte_diff;
using sg::test::DevBuf;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr PostconvArm kArms[] = {PostconvArm::megablock, PostconvArm::fast, PostconvArm::split,
                                 PostconvArm::token_tile};

struct Case {
  int T, Hk, Hv, Dk, Dv;
  DType in, out;  // conv (and a, b) dtype; q, k, v dtype
  int conv_pad;   // conv_stride = C + conv_pad (NaN in the gap)
  int ab_pad;     // a_stride = Hv + ab_pad, b_stride = Hv + ab_pad + 2
  uint64_t seed;
  int C() const { return 2 * Hk * Dk + Hv * Dv; }
  int64_t conv_stride() const { return C() + conv_pad; }
  int64_t a_stride() const { return Hv + ab_pad; }
  int64_t b_stride() const { return Hv + ab_pad + 2; }
  PostconvShape shape() const { return PostconvShape{T, Hk, Hv, Dk, Dv}; }
};

// Host values exactly as stored on the device (rounded to the input dtype), NaN in every gap.
struct Inputs {
  std::vector<float> conv, a, b, A_log, dt_bias;
  DevBuf d_conv, d_a, d_b, d_A_log, d_dt_bias;
};

std::vector<float> as_stored(std::vector<float> v, DType t) {
  if (t == DType::bf16) {
    for (auto& x : v) x = round_bf16(x);
  }
  return v;
}

// rows x cols values in a [rows, stride] layout, NaN beyond cols.
std::vector<float> strided(const std::vector<float>& dense, int rows, int cols, int64_t stride) {
  std::vector<float> out(static_cast<size_t>(rows) * stride, kNaN);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * stride, dense.data() + static_cast<size_t>(r) * cols, sizeof(float) * cols);
  }
  return out;
}

Inputs make_inputs(const Case& c) {
  Inputs in;
  const int C = c.C();
  auto conv = test::uniform(static_cast<size_t>(c.T) * C, c.seed, -2.f, 2.f);
  // Every fifth token is scaled by 2^-10 (exact), so its sums of squares are near the 1e-6 epsilon.
  for (int t = 0; t < c.T; t += 5) {
    for (int i = 0; i < C; ++i)
      conv[static_cast<size_t>(t) * C + i] = std::ldexp(conv[static_cast<size_t>(t) * C + i], -10);
  }
  in.conv = strided(as_stored(conv, c.in), c.T, C, c.conv_stride());
  // a + dt_bias spans softplus's x > 20 branch; b spans both tails of the sigmoid.
  in.a = strided(as_stored(test::uniform(static_cast<size_t>(c.T) * c.Hv, c.seed + 1, -8.f, 25.f), c.in), c.T, c.Hv,
                 c.a_stride());
  in.b = strided(as_stored(test::uniform(static_cast<size_t>(c.T) * c.Hv, c.seed + 2, -8.f, 8.f), c.in), c.T, c.Hv,
                 c.b_stride());
  in.A_log = test::uniform(c.Hv, c.seed + 3, -1.f, 1.5f);
  in.dt_bias = test::uniform(c.Hv, c.seed + 4, -1.f, 1.f);
  in.d_conv = DevBuf::from(in.conv, c.in);
  in.d_a = DevBuf::from(in.a, c.in);
  in.d_b = DevBuf::from(in.b, c.in);
  in.d_A_log = DevBuf::from(in.A_log, DType::f32);
  in.d_dt_bias = DevBuf::from(in.dt_bias, DType::f32);
  return in;
}

struct Outputs {
  std::vector<uint8_t> q, k, v, g, beta;
};

struct DevOutputs {
  DevBuf q, k, v, g, beta;
  explicit DevOutputs(const Case& c) {
    const size_t es = dtype_size(c.out);
    q = DevBuf(static_cast<size_t>(c.T) * c.Hk * c.Dk * es);  // poisoned 0xA5
    k = DevBuf(static_cast<size_t>(c.T) * c.Hk * c.Dk * es);
    v = DevBuf(static_cast<size_t>(c.T) * c.Hv * c.Dv * es);
    g = DevBuf(static_cast<size_t>(c.T) * c.Hv * 4);
    beta = DevBuf(static_cast<size_t>(c.T) * c.Hv * 4);
  }
};

PostconvParams params(const Case& c, const Inputs& in, const DevOutputs& o) {
  PostconvParams p;
  p.conv = in.d_conv.data();
  p.conv_stride = c.conv_stride();
  p.conv_dtype = c.in;
  p.a = in.d_a.data();
  p.a_stride = c.a_stride();
  p.b = in.d_b.data();
  p.b_stride = c.b_stride();
  p.ab_dtype = c.in;
  p.A_log = in.d_A_log.as<float>();
  p.dt_bias = in.d_dt_bias.as<float>();
  p.q = o.q.data();
  p.k = o.k.data();
  p.v = o.v.data();
  p.qkv_dtype = c.out;
  p.g = o.g.as<float>();
  p.beta = o.beta.as<float>();
  p.T = c.T;
  p.Hk = c.Hk;
  p.Hv = c.Hv;
  p.Dk = c.Dk;
  p.Dv = c.Dv;
  return p;
}

Outputs run_arm(const Case& c, const Inputs& in, PostconvArm arm) {
  DevOutputs o(c);
  const auto contract = postconv_contract(arm, c.shape());
  check(postconv(params(c, in, o), contract, nullptr));
  check(cudaDeviceSynchronize());
  return {o.q.download(), o.k.download(), o.v.download(), o.g.download(), o.beta.download()};
}

std::string describe(const Case& c) {
  return fmt::format("T={} Hk={} Hv={} Dk={} Dv={} in={} out={} conv_stride={} (C={}) a_stride={} b_stride={} seed={}",
                     c.T, c.Hk, c.Hv, c.Dk, c.Dv, dtype_name(c.in), dtype_name(c.out), c.conv_stride(), c.C(),
                     c.a_stride(), c.b_stride(), c.seed);
}

// |got - want| <= 1e-6 + 4e-7 |want| for every element; returns the count that fail and the worst
// error / tolerance ratio.
size_t gate_mismatches(const std::vector<uint8_t>& got_bytes, const std::vector<float>& want, double* worst) {
  const auto got = test::from_bytes(got_bytes, DType::f32);
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-6 + 4e-7 * std::fabs(static_cast<double>(want[i]));
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol)) ++bad;  // NaN (an unread poison or a read NaN sentinel) fails too
    *worst = std::max(*worst, err / tol);
  }
  return bad;
}

// Runs every arm of one case: each against megablock byte for byte, megablock against the CPU
// reference.
void check_case(const Case& c) {
  INFO(describe(c));
  const Inputs in = make_inputs(c);

  std::vector<float> q(static_cast<size_t>(c.T) * c.Hk * c.Dk), k(q.size()), v(static_cast<size_t>(c.T) * c.Hv * c.Dv),
      g(static_cast<size_t>(c.T) * c.Hv), beta(g.size());
  const ref::Store st = c.out == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
  ref::postconv(ref::PostconvShape{c.Hk, c.Hv, c.Dk, c.Dv, st}, c.T, in.conv.data(), c.conv_stride(), in.a.data(),
                c.a_stride(), in.b.data(), c.b_stride(), in.A_log.data(), in.dt_bias.data(), q.data(), k.data(),
                v.data(), g.data(), beta.data());

  const Outputs mb = run_arm(c, in, PostconvArm::megablock);
  {
    INFO("megablock vs ref::postconv");
    CHECK(byte_diff(mb.q, test::to_bytes(q, c.out), c.out) == "");
    CHECK(byte_diff(mb.k, test::to_bytes(k, c.out), c.out) == "");
    CHECK(byte_diff(mb.v, test::to_bytes(v, c.out), c.out) == "");
    double worst_g = 0, worst_beta = 0;
    const size_t bad_g = gate_mismatches(mb.g, g, &worst_g), bad_beta = gate_mismatches(mb.beta, beta, &worst_beta);
    INFO("worst |d| / tol: g " << worst_g << ", beta " << worst_beta);
    CHECK(bad_g == 0);
    CHECK(bad_beta == 0);
  }
  for (PostconvArm arm : kArms) {
    if (arm == PostconvArm::megablock) continue;
    const auto contract = postconv_contract(arm, c.shape());
    INFO("arm " << arm_name(arm) << " (runs " << arm_name(contract.arm) << ") vs megablock");
    if (arm == PostconvArm::token_tile && !(c.Dk == 128 && c.Dv == 128)) {
      CHECK(contract.arm == PostconvArm::fast);
      CHECK(!contract.fallback_reason.empty());
    } else {
      CHECK(contract.arm == arm);
    }
    const Outputs o = run_arm(c, in, arm);
    CHECK(byte_diff(o.q, mb.q, c.out) == "");
    CHECK(byte_diff(o.k, mb.k, c.out) == "");
    CHECK(byte_diff(o.v, mb.v, c.out) == "");
    CHECK(byte_diff(o.g, mb.g, DType::f32) == "");
    CHECK(byte_diff(o.beta, mb.beta, DType::f32) == "");
  }
}

}  // namespace

TEST_CASE("postconv: every arm gives megablock's bytes, megablock matches the reference", "[gpu][postconv]") {
  const std::pair<int, int> heads[] = {{4, 8}, {16, 32}, {16, 48}};
  const std::pair<DType, DType> dtypes[] = {
      {DType::bf16, DType::bf16}, {DType::f32, DType::f32}, {DType::f32, DType::bf16}, {DType::bf16, DType::f32}};
  // conv row pads: 0 (dense), 8 (a gap, rows still 16-byte aligned), 3 (unaligned rows: token_tile's
  // element-wise path).
  const int conv_pads[] = {8, 0, 3};
  uint64_t seed = 1000;
  int n = 0;
  for (int T : {1, 15, 16, 17, 128, 2048}) {
    for (auto [Hk, Hv] : heads) {
      for (auto [in, out] : dtypes) {
        // T = 2048 (the large inputs): the two same-dtype pairs only, to keep the run short.
        if (T == 2048 && in != out) continue;
        const Case c{T, Hk, Hv, 128, 128, in, out, conv_pads[n % 3], 1 + n % 4, seed++};
        ++n;
        check_case(c);
      }
    }
  }
}

TEST_CASE("postconv: other head sizes (token_tile falls back to fast) keep the bytes", "[gpu][postconv]") {
  // Dk = 64 (the fallback case of ARMS.md), a non-power-of-two Dk (zeros in the tree), Dk = 256 (the
  // largest: three in-lane tree levels), Dk = 16 (P < 32: a partial butterfly).
  const Case cases[] = {
      {33, 4, 8, 64, 64, DType::bf16, DType::bf16, 8, 1, 2001},
      {33, 4, 8, 64, 64, DType::f32, DType::f32, 3, 2, 2002},
      {19, 2, 6, 96, 80, DType::f32, DType::bf16, 5, 3, 2003},
      {17, 2, 4, 256, 256, DType::f32, DType::f32, 0, 1, 2004},
      {17, 2, 4, 256, 200, DType::bf16, DType::f32, 8, 1, 2005},
      {21, 3, 9, 16, 24, DType::f32, DType::f32, 1, 1, 2006},
      {21, 1, 3, 1, 1, DType::f32, DType::bf16, 1, 0, 2007},
  };
  for (const Case& c : cases) check_case(c);
  // The contract says token_tile is fast for Dk = 64.
  const auto tc = postconv_contract(PostconvArm::token_tile, PostconvShape{33, 4, 8, 64, 64});
  CHECK(tc.arm == PostconvArm::fast);
  CHECK(tc.kernel == postconv_contract(PostconvArm::fast, PostconvShape{33, 4, 8, 64, 64}).kernel);
  CHECK(tc.fallback_reason.find("token_tile") != std::string::npos);
}

TEST_CASE("postconv: the launcher refuses a contract that does not fit the params", "[gpu][postconv]") {
  const Case c{40, 4, 8, 128, 128, DType::bf16, DType::bf16, 0, 0, 3001};
  const Inputs in = make_inputs(c);
  DevOutputs o(c);
  PostconvParams p = params(c, in, o);
  // A contract for fewer tokens than the params hold would leave tokens unwritten.
  CHECK(postconv(p, postconv_contract(PostconvArm::token_tile, PostconvShape{16, 4, 8, 128, 128}), nullptr) ==
        cudaErrorInvalidValue);
  CHECK(postconv(p, postconv_contract(PostconvArm::fast, PostconvShape{39, 4, 8, 128, 128}), nullptr) ==
        cudaErrorInvalidValue);
  // token_tile's kernel is built for Dk = Dv = 128 only.
  p.Dk = p.Dv = 64;
  CHECK(postconv(p, postconv_contract(PostconvArm::token_tile, PostconvShape{40, 4, 8, 128, 128}), nullptr) ==
        cudaErrorInvalidValue);
  // A contract for a larger (padded) bucket is fine: tokens >= T are skipped.
  p.Dk = p.Dv = 128;
  CHECK(postconv(p, postconv_contract(PostconvArm::token_tile, PostconvShape{64, 4, 8, 128, 128}), nullptr) ==
        cudaSuccess);
  check(cudaDeviceSynchronize());
}

TEST_CASE("postconv: each arm's captured node is the contract's kernel, grid and block", "[gpu][postconv][manifest]") {
  Stream s;
  for (auto [Dk, T] : {std::pair{128, 37}, std::pair{64, 37}}) {
    const Case c{T, 4, 8, Dk, Dk, DType::bf16, DType::bf16, 0, 0, 4000u + Dk};
    const Inputs in = make_inputs(c);
    DevOutputs o(c);
    const PostconvParams p = params(c, in, o);
    for (PostconvArm arm : kArms) {
      CAPTURE(Dk, arm_name(arm));
      const auto contract = postconv_contract(arm, c.shape());
      NodeRecorder rec;
      const std::string name = fmt::format("postconv {} Dk={}", arm_name(arm), Dk);
      CapturedGraph g = CapturedGraph::capture(name, s.get(), [&] {
        check(postconv(p, contract, s.get()));
        rec.launched(s.get(), {-1, "postconv", std::string(arm_name(contract.arm)), 0});
      });
      const Manifest m = build_manifest(name, "", g.graph(), rec);
      REQUIRE(m.nodes.size() == 1);
      const ManifestNode& node = m.nodes[0];
      INFO("kernel " << node.kernel << ", contract kernel " << contract.kernel);
      CHECK(node.kernel.find(std::string(contract.kernel)) != std::string::npos);
      CHECK(node.grid == contract.grid);
      CHECK(node.block == contract.block);
      CHECK(node.smem_bytes == contract.smem_bytes);
      CHECK(node.label.arm == arm_name(contract.arm));
      if (arm == PostconvArm::token_tile && Dk == 64) {
        CHECK(node.kernel.find("postconv_fast") != std::string::npos);
      } else {
        CHECK(contract.arm == arm);
      }
      g.replay(s.get());
      s.sync();
    }
  }
}
