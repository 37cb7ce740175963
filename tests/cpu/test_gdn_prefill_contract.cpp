// CPU tests of gdn.prefill's launch contract (kernels/contracts.h) and of the fused arm's C entry
// point's argument checks (sg_gdn_prefill_fused, kernels/capi/stepgraph_c.h), which need no GPU:
// - the fused grid (token tiles x (conv blocks + 1 gate block)) on the model shapes and awkward
//   head sizes, spelled out; it depends only on (max_tokens, Hk, Hv, Dv), never on max_seqs;
// - unsupported head sizes fall back to unfused with a reason; the unfused contract names no launch;
// - invalid shapes throw; the ArmSelection overload reads gdn_prefill;
// - every argument error of sg_gdn_prefill_fused returns its code and a message naming the field.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/device.h"
#include "kernels/capi/stepgraph_c.h"
#include "kernels/contracts.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

// Expected blocks per tile: conv blocks ceil((2 Hk + ceil(Hv Dv / 128)) / 8), plus the gate block.
unsigned per_tile(int Hk, int Hv, int Dv) {
  const int groups = 2 * Hk + (Hv * Dv + 127) / 128;
  return static_cast<unsigned>((groups + 7) / 8 + 1);
}

alignas(16) float g_fake[512];  // stands in for device buffers (never read or written)
void* fake(int i) { return &g_fake[i * 16]; }
const int32_t* fake_i32(int i) { return reinterpret_cast<const int32_t*>(fake(i)); }
const float* fake_f32(int i) { return reinterpret_cast<const float*>(fake(i)); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Valid arguments (fake pointers) of a small fused call: Hk 2, Hv 4, Dk 128, Dv 64, K 4, C 768.
sg_gdn_prefill_args fused_args() {
  sg_gdn_prefill_args a{};
  a.x = fake(0);
  a.x_stride = 776;
  a.x_dtype = SG_BF16;
  a.state = fake(1);
  a.state_dtype = SG_BF16;
  a.w = fake_f32(2);
  a.bias = nullptr;
  a.a = fake(3);
  a.a_stride = 5;
  a.b = fake(4);
  a.b_stride = 4;
  a.ab_dtype = SG_BF16;
  a.A_log = fake_f32(5);
  a.dt_bias = fake_f32(6);
  a.q = fake(7);
  a.k = fake(8);
  a.v = fake(9);
  a.qkv_dtype = SG_BF16;
  a.g = reinterpret_cast<float*>(fake(10));
  a.beta = reinterpret_cast<float*>(fake(11));
  a.cu_seqlens = fake_i32(12);
  a.slots = fake_i32(13);
  a.has_history = reinterpret_cast<const uint8_t*>(fake(14));
  a.n_seqs = fake_i32(15);
  a.Hk = 2;
  a.Hv = 4;
  a.Dk = 128;
  a.Dv = 64;
  a.K = 4;
  a.max_tokens = 100;
  a.max_seqs = 3;
  a.silu = 1;
  return a;
}

}  // namespace

TEST_CASE("gdn.prefill contract: the fused grid on model shapes and awkward heads", "[contracts]") {
  struct Case {
    int max_tokens, max_seqs, Hk, Hv, Dk, Dv, K;
    unsigned tiles;
  };
  const Case cases[] = {
      {32768, 32, 16, 32, 128, 128, 4, 512},  // 4B prefill-32x1024: 64 groups, 8 + 1 blocks per tile
      {32768, 32, 16, 48, 128, 128, 4, 512},  // 27B: 80 groups, 10 + 1
      {1, 1, 1, 1, 128, 128, 2, 1},           // C = 384: 3 groups, 1 + 1
      {65, 7, 3, 9, 128, 40, 5, 2},           // v region 360 channels: pieces of 128, 128, 104
      {129, 2, 2, 6, 128, 200, 3, 3},        {64, 1, 1, 2, 128, 8, 8, 1},  // a 16-channel v region: one narrow piece
  };
  for (const Case& c : cases) {
    CAPTURE(c.max_tokens, c.Hk, c.Hv, c.Dv, c.K);
    const auto k = gdn_prefill_contract(GdnPrefillArm::fused,
                                        GdnPrefillShape{c.max_tokens, c.max_seqs, c.Hk, c.Hv, c.Dk, c.Dv, c.K});
    CHECK(k.arm == GdnPrefillArm::fused);
    CHECK(k.fallback_reason.empty());
    CHECK(k.kernel == "gdn_prefill_fused");
    CHECK(k.grid == Dim3{c.tiles * per_tile(c.Hk, c.Hv, c.Dv), 1, 1});
    CHECK(k.block == Dim3{128, 1, 1});
    CHECK(k.smem_bytes == 0);
    CHECK(static_cast<unsigned>(gdn_prefill_conv_blocks_per_tile(c.Hk, c.Hv, c.Dv)) + 1 == per_tile(c.Hk, c.Hv, c.Dv));
    // The grid is the bucket's: any max_seqs gives the same launch.
    const auto more = gdn_prefill_contract(
        GdnPrefillArm::fused, GdnPrefillShape{c.max_tokens, c.max_seqs + 100, c.Hk, c.Hv, c.Dk, c.Dv, c.K});
    CHECK(more.grid == k.grid);
  }
  CHECK(gdn_prefill_contract(GdnPrefillArm::fused, GdnPrefillShape{32768, 32, 16, 32, 128, 128, 4}).grid.x == 4608);
}

TEST_CASE("gdn.prefill contract: unsupported heads fall back to unfused, which names no launch", "[contracts]") {
  CHECK(gdn_prefill_fused_supports(128, 128, 4));
  CHECK(gdn_prefill_fused_supports(128, 8, 2));
  CHECK(gdn_prefill_fused_supports(128, 256, 8));
  for (auto [Dk, Dv] : {std::pair{64, 128}, {256, 128}, {128, 12}, {128, 264}, {128, 4}, {32, 16}}) {
    CAPTURE(Dk, Dv);
    CHECK_FALSE(gdn_prefill_fused_supports(Dk, Dv, 4));
    const auto c = gdn_prefill_contract(GdnPrefillArm::fused, GdnPrefillShape{100, 4, 2, 4, Dk, Dv, 4});
    CHECK(c.arm == GdnPrefillArm::unfused);
    CHECK(contains(c.fallback_reason, "fused needs Dk = 128"));
    CHECK(c.kernel.empty());
    CHECK(c.grid == Dim3{0, 0, 0});
  }
  const auto u = gdn_prefill_contract(GdnPrefillArm::unfused, GdnPrefillShape{100, 4, 2, 4, 128, 128, 4});
  CHECK(u.arm == GdnPrefillArm::unfused);
  CHECK(u.fallback_reason.empty());
  CHECK(u.kernel.empty());
  CHECK(u.block == Dim3{0, 0, 0});
  ArmSelection sel;
  sel.gdn_prefill = GdnPrefillArm::unfused;
  CHECK(gdn_prefill_contract(sel, GdnPrefillShape{100, 4, 2, 4, 128, 128, 4}).arm == GdnPrefillArm::unfused);
  sel.gdn_prefill = GdnPrefillArm::fused;
  CHECK(gdn_prefill_contract(sel, GdnPrefillShape{100, 4, 2, 4, 128, 128, 4}).arm == GdnPrefillArm::fused);
}

TEST_CASE("gdn.prefill contract: invalid shapes throw", "[contracts]") {
  const GdnPrefillShape ok{100, 4, 2, 4, 128, 128, 4};
  auto with = [&](auto edit) {
    GdnPrefillShape s = ok;
    edit(s);
    return s;
  };
  const GdnPrefillShape bad[] = {
      with([](auto& s) { s.max_tokens = 0; }),
      with([](auto& s) { s.max_seqs = 0; }),
      with([](auto& s) { s.Hk = 0; }),
      with([](auto& s) { s.Hv = 0; }),
      with([](auto& s) { s.Hv = 3; }),
      with([](auto& s) { s.Dk = 0; }),
      with([](auto& s) { s.Dv = -8; }),
      with([](auto& s) { s.K = 1; }),
      with([](auto& s) { s.K = 9; }),
      with([](auto& s) {
        s.Hk = 1 << 20;
        s.Hv = 1 << 20;
        s.Dk = 1024;
      }),
  };
  for (const auto& s : bad) {
    CAPTURE(s.max_tokens, s.max_seqs, s.Hk, s.Hv, s.Dk, s.Dv, s.K);
    CHECK_THROWS_AS(gdn_prefill_contract(GdnPrefillArm::fused, s), std::invalid_argument);
    CHECK_THROWS_AS(gdn_prefill_contract(GdnPrefillArm::unfused, s), std::invalid_argument);
  }
  CHECK_THROWS_AS(gdn_prefill_contract(static_cast<GdnPrefillArm>(7), ok), std::invalid_argument);
  CHECK_NOTHROW(gdn_prefill_contract(GdnPrefillArm::fused, ok));
}

TEST_CASE("C API: sg_gdn_prefill_fused argument errors name the field", "[capi]") {
  CHECK(sg_gdn_prefill_fused(nullptr, nullptr) == SG_ERR_POINTER);
  CHECK(contains(sg_last_error(), "sg_gdn_prefill_fused: args is NULL"));
  CHECK(contains(sg_arms(), "sg_gdn_prefill_fused"));

  struct Bad {
    const char* what;
    void (*edit)(sg_gdn_prefill_args&);
    int code;
    const char* message;
  };
  const Bad bad[] = {
      {"x dtype", [](sg_gdn_prefill_args& a) { a.x_dtype = static_cast<sg_dtype>(2); }, SG_ERR_DTYPE,
       "x_dtype must be SG_F32"},
      {"qkv dtype", [](sg_gdn_prefill_args& a) { a.qkv_dtype = static_cast<sg_dtype>(-1); }, SG_ERR_DTYPE, "qkv_dtype"},
      {"Hv % Hk", [](sg_gdn_prefill_args& a) { a.Hv = 5; }, SG_ERR_SIZE, "Hv must be a multiple of Hk"},
      {"K", [](sg_gdn_prefill_args& a) { a.K = 9; }, SG_ERR_SIZE, "K must be 2..8"},
      {"Dk", [](sg_gdn_prefill_args& a) { a.Dk = 64; }, SG_ERR_SIZE, "sg_conv_fwd then sg_postconv"},
      {"Dv", [](sg_gdn_prefill_args& a) { a.Dv = 60; }, SG_ERR_SIZE, "Dv a multiple of 8"},
      {"x_stride", [](sg_gdn_prefill_args& a) { a.x_stride = 767; }, SG_ERR_SIZE, "x_stride must be >= 768"},
      {"a_stride", [](sg_gdn_prefill_args& a) { a.a_stride = 3; }, SG_ERR_SIZE, "a_stride must be >= 4"},
      {"max_tokens", [](sg_gdn_prefill_args& a) { a.max_tokens = 0; }, SG_ERR_SIZE, "max_tokens must be >= 1"},
      {"max_seqs", [](sg_gdn_prefill_args& a) { a.max_seqs = 0; }, SG_ERR_SIZE, "max_seqs must be >= 1"},
      {"q", [](sg_gdn_prefill_args& a) { a.q = nullptr; }, SG_ERR_POINTER, "q is NULL"},
      {"n_seqs", [](sg_gdn_prefill_args& a) { a.n_seqs = nullptr; }, SG_ERR_POINTER, "n_seqs is NULL"},
      {"x alignment", [](sg_gdn_prefill_args& a) { a.x = reinterpret_cast<char*>(g_fake) + 1; }, SG_ERR_POINTER, "x ("},
      {"g alignment",
       [](sg_gdn_prefill_args& a) { a.g = reinterpret_cast<float*>(reinterpret_cast<char*>(g_fake) + 2); },
       SG_ERR_POINTER, "g ("},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    sg_gdn_prefill_args a = fused_args();
    b.edit(a);
    CHECK(sg_gdn_prefill_fused(&a, nullptr) == b.code);
    const std::string msg = sg_last_error();
    CAPTURE(msg);
    CHECK(contains(msg, "sg_gdn_prefill_fused: "));
    CHECK(contains(msg, b.message));
    CHECK(std::string(sg_last_launch()).empty());
  }
  // Without a usable GPU a valid call reaches the launch, which fails (with one, these fake
  // pointers would be launched on: the GPU tests cover valid calls).
  if (!probe_device().ok) {
    sg_gdn_prefill_args a = fused_args();
    CHECK(sg_gdn_prefill_fused(&a, nullptr) == SG_ERR_CUDA);
    CHECK(contains(sg_last_error(), "sg_gdn_prefill_fused: launch of gdn_prefill_fused failed: cuda"));
  }
}
