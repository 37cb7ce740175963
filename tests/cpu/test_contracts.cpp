// CPU tests of kernels/contracts.h: grid, block, shared memory and fallbacks of every op's launch
// contract (conv.update's in test_conv_update_contract.cpp); the conv prefill chunk descriptors
// against their worst-case bound; the arm each contract runs after its fallbacks.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/contracts.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

std::string dims(const Dim3& d) { return to_string(d); }
Dim3 d3(unsigned x, unsigned y, unsigned z) { return Dim3{x, y, z}; }
std::vector<ConvChunk> chunks_of(std::initializer_list<ConvChunk> l) { return l; }

template <class F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    FAIL("threw something other than std::invalid_argument");
  }
  FAIL("did not throw");
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The worst-case chunk count by dynamic programming over all ways to split T tokens into at most
// n sequences (zero-length sequences allowed): best[n][T] = max_L ceil(L/ct) + best[n-1][T-L].
std::vector<std::vector<int>> worst_chunks_table(int max_T, int max_n, int ct) {
  std::vector<std::vector<int>> best(max_n + 1, std::vector<int>(max_T + 1, -1));
  best[0][0] = 0;  // no sequences hold exactly zero tokens
  for (int n = 1; n <= max_n; ++n) {
    for (int T = 0; T <= max_T; ++T) {
      for (int L = 0; L <= T; ++L) {
        if (best[n - 1][T - L] < 0) continue;
        best[n][T] = std::max(best[n][T], (L + ct - 1) / ct + best[n - 1][T - L]);
      }
    }
  }
  return best;
}

}  // namespace

// --- postconv -------------------------------------------------------------------------------------

TEST_CASE("postconv contract: every arm's grid and block", "[contracts]") {
  struct Heads {
    int Hk, Hv;
  };
  for (Heads h : {Heads{4, 8}, Heads{16, 32}, Heads{16, 48}}) {
    for (int T : {1, 15, 16, 17, 128, 2048}) {
      CAPTURE(h.Hk, h.Hv, T);
      const PostconvShape s{T, h.Hk, h.Hv, 128, 128};
      const unsigned t = unsigned(T), hk = unsigned(h.Hk), hv = unsigned(h.Hv);
      auto m = postconv_contract(PostconvArm::megablock, s);
      CHECK(m.arm == PostconvArm::megablock);
      CHECK(m.grid == d3(t, hk + 1, 1));
      CHECK(m.block == d3(256, 1, 1));
      CHECK(m.kernel == "postconv_megablock");
      auto f = postconv_contract(PostconvArm::fast, s);
      CHECK(f.arm == PostconvArm::fast);
      CHECK(f.grid == d3(t, hk + 1, 1));
      CHECK(f.block == d3(128, 1, 1));
      CHECK(f.kernel == "postconv_fast");
      auto sp = postconv_contract(PostconvArm::split, s);
      CHECK(sp.arm == PostconvArm::split);
      CHECK(sp.grid == d3(t, hk + hv, 1));
      CHECK(sp.block == d3(128, 1, 1));
      CHECK(sp.kernel == "postconv_split");
      auto tt = postconv_contract(PostconvArm::token_tile, s);
      CHECK(tt.arm == PostconvArm::token_tile);
      CHECK(tt.grid == d3((t + 15) / 16, hk + hv, 1));
      CHECK(tt.block == d3(128, 1, 1));
      CHECK(tt.kernel == "postconv_token_tile");
      for (const auto* c : {&m, &f, &sp, &tt}) {
        CHECK(c->fallback_reason.empty());
        CHECK(c->smem_bytes == 0);
      }
    }
  }
  // Hand values for the 4B shape (Hk 16, Hv 32, D 128).
  CHECK(dims(postconv_contract(PostconvArm::token_tile, {2048, 16, 32, 128, 128}).grid) == "(128, 48, 1)");
  CHECK(dims(postconv_contract(PostconvArm::token_tile, {17, 16, 32, 128, 128}).grid) == "(2, 48, 1)");
  CHECK(dims(postconv_contract(PostconvArm::token_tile, {16, 16, 32, 128, 128}).grid) == "(1, 48, 1)");
  CHECK(dims(postconv_contract(PostconvArm::token_tile, {1, 16, 32, 128, 128}).grid) == "(1, 48, 1)");
  CHECK(dims(postconv_contract(PostconvArm::megablock, {2048, 16, 32, 128, 128}).grid) == "(2048, 17, 1)");
  CHECK(dims(postconv_contract(PostconvArm::split, {15, 16, 48, 128, 128}).grid) == "(15, 64, 1)");
}

TEST_CASE("postconv contract: token_tile falls back to fast unless Dk = Dv = 128", "[contracts]") {
  struct Row {
    int Dk, Dv;
  };
  for (Row d : {Row{64, 64}, Row{64, 128}, Row{128, 64}, Row{256, 256}, Row{127, 128}, Row{1, 1}}) {
    CAPTURE(d.Dk, d.Dv);
    auto c = postconv_contract(PostconvArm::token_tile, {128, 16, 32, d.Dk, d.Dv});
    CHECK(c.arm == PostconvArm::fast);
    CHECK(c.kernel == "postconv_fast");
    CHECK(c.grid == d3(128, 17, 1));
    CHECK(c.block == d3(128, 1, 1));
    CHECK(c.fallback_reason == "token_tile needs Dk = Dv = 128 (got Dk=" + std::to_string(d.Dk) +
                                   ", Dv=" + std::to_string(d.Dv) + "): using fast");
    // The other arms never fall back on D.
    for (auto arm : {PostconvArm::megablock, PostconvArm::fast, PostconvArm::split}) {
      auto o = postconv_contract(arm, {128, 16, 32, d.Dk, d.Dv});
      CHECK(o.arm == arm);
      CHECK(o.fallback_reason.empty());
    }
  }
  CHECK(postconv_contract(PostconvArm::token_tile, {128, 16, 32, 64, 64}).fallback_reason ==
        "token_tile needs Dk = Dv = 128 (got Dk=64, Dv=64): using fast");
  ArmSelection s;
  s.postconv = PostconvArm::token_tile;
  CHECK(postconv_contract(s, {128, 16, 32, 128, 128}).arm == PostconvArm::token_tile);
  CHECK(postconv_contract(s, {128, 16, 32, 64, 128}).arm == PostconvArm::fast);
}

TEST_CASE("postconv contract: invalid shapes", "[contracts]") {
  for (auto arm : {PostconvArm::megablock, PostconvArm::fast, PostconvArm::split, PostconvArm::token_tile}) {
    CAPTURE(arm_name(arm));
    CHECK(contains(invalid_argument_of([&] { postconv_contract(arm, {0, 16, 32, 128, 128}); }), "T must be >= 1"));
    CHECK(contains(invalid_argument_of([&] {
                     postconv_contract(arm, {8, 16, 24, 128, 128});
                   }),
                   "Hv must be a multiple of Hk (got Hk=16, Hv=24)"));
    CHECK_THROWS_AS(postconv_contract(arm, {8, 0, 32, 128, 128}), std::invalid_argument);
    CHECK_THROWS_AS(postconv_contract(arm, {8, 16, 0, 128, 128}), std::invalid_argument);
    CHECK_THROWS_AS(postconv_contract(arm, {8, 16, 32, 0, 128}), std::invalid_argument);
    CHECK_THROWS_AS(postconv_contract(arm, {8, 16, 32, 128, 0}), std::invalid_argument);
    CHECK(contains(invalid_argument_of([&] {
                     postconv_contract(arm, {8, 16, 32, 257, 128});
                   }),
                   "Dk and Dv must be 1..256 (got Dk=257, Dv=128)"));
    CHECK_THROWS_AS(postconv_contract(arm, {8, 16, 32, 128, 257}), std::invalid_argument);
    CHECK_NOTHROW(postconv_contract(arm, {8, 16, 32, 256, 256}));
    CHECK_NOTHROW(postconv_contract(arm, {8, 16, 16, 1, 1}));
  }
}

// --- conv.fwd -------------------------------------------------------------------------------------

TEST_CASE("conv.fwd contract: tiles, blocks, shared memory, both chunk splits", "[contracts]") {
  SECTION("4B prefill: C = 8192, K = 4, bucket 2048 tokens / 32 sequences") {
    const ConvFwdShape s{2048, 32, 8192, 4};
    const int chunks = conv_max_chunks(2048, 32);
    CHECK(chunks == 284);  // (2048 + 7*32) / 8
    struct Row {
      ConvFwdArm arm;
      unsigned x;
      Dim3 block;
      size_t smem;
      const char *exact, *whole;
    };
    for (const Row& r :
         {Row{ConvFwdArm::tiled, 256, {32, 8, 1}, (16 + 3) * 32 * 4, "conv_fwd_tiled_exact", "conv_fwd_tiled_whole"},
          Row{ConvFwdArm::reg, 64, {128, 1, 1}, 0, "conv_fwd_register_exact", "conv_fwd_register_whole"},
          Row{ConvFwdArm::k4, 64, {128, 1, 1}, 0, "conv_fwd_k4_exact", "conv_fwd_k4_whole"},
          Row{ConvFwdArm::k4x2, 32, {128, 1, 1}, 0, "conv_fwd_k4x2_exact", "conv_fwd_k4x2_whole"}}) {
      CAPTURE(arm_name(r.arm));
      auto e = conv_fwd_contract(r.arm, ConvChunksArm::exact, s);
      CHECK(e.arm == r.arm);
      CHECK(e.fallback_reason.empty());
      CHECK(e.grid == d3(r.x, 284, 1));
      CHECK(e.block == r.block);
      CHECK(e.smem_bytes == r.smem);
      CHECK(e.kernel == r.exact);
      auto w = conv_fwd_contract(r.arm, ConvChunksArm::whole, s);
      CHECK(w.arm == r.arm);
      CHECK(w.grid == d3(r.x, 32, 1));
      CHECK(w.block == r.block);
      CHECK(w.smem_bytes == r.smem);
      CHECK(w.kernel == r.whole);
    }
  }
  SECTION("27B prefill: C = 10240") {
    const ConvFwdShape s{8192, 64, 10240, 4};
    CHECK(dims(conv_fwd_contract(ConvFwdArm::tiled, ConvChunksArm::exact, s).grid) == "(320, 1080, 1)");
    CHECK(dims(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, s).grid) == "(80, 1080, 1)");
    CHECK(dims(conv_fwd_contract(ConvFwdArm::k4, ConvChunksArm::whole, s).grid) == "(80, 64, 1)");
    CHECK(dims(conv_fwd_contract(ConvFwdArm::k4x2, ConvChunksArm::whole, s).grid) == "(40, 64, 1)");
  }
  SECTION("awkward C: grid x per arm") {
    struct Row {
      int C;
      unsigned tiled, reg, k4x2;
    };
    for (const Row& r : {Row{1, 1, 1, 1}, Row{127, 4, 1, 1}, Row{129, 5, 2, 1}, Row{385, 13, 4, 2}, Row{32, 1, 1, 1},
                         Row{33, 2, 1, 1}, Row{256, 8, 2, 1}, Row{257, 9, 3, 2}}) {
      CAPTURE(r.C);
      const ConvFwdShape s{64, 4, r.C, 4};
      CHECK(conv_fwd_contract(ConvFwdArm::tiled, ConvChunksArm::exact, s).grid.x == r.tiled);
      CHECK(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, s).grid.x == r.reg);
      CHECK(conv_fwd_contract(ConvFwdArm::k4, ConvChunksArm::exact, s).grid.x == r.reg);
      CHECK(conv_fwd_contract(ConvFwdArm::k4x2, ConvChunksArm::exact, s).grid.x == r.k4x2);
      for (auto arm : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
        CHECK(conv_fwd_contract(arm, ConvChunksArm::exact, s).grid.y == unsigned(conv_max_chunks(64, 4)));
        CHECK(conv_fwd_contract(arm, ConvChunksArm::whole, s).grid.y == 4);
      }
    }
    CHECK(conv_fwd_channel_tile(ConvFwdArm::tiled) == 32);
    CHECK(conv_fwd_channel_tile(ConvFwdArm::reg) == 128);
    CHECK(conv_fwd_channel_tile(ConvFwdArm::k4) == 128);
    CHECK(conv_fwd_channel_tile(ConvFwdArm::k4x2) == 256);
  }
  SECTION("tiled shared memory: (16 + K - 1) x 32 f32") {
    for (int K = kConvMinK; K <= kConvMaxK; ++K) {
      CAPTURE(K);
      CHECK(conv_fwd_contract(ConvFwdArm::tiled, ConvChunksArm::exact, {64, 4, 1024, K}).smem_bytes ==
            size_t(16 + K - 1) * 32 * 4);
      CHECK(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, {64, 4, 1024, K}).smem_bytes == 0);
    }
  }
  SECTION("the ArmSelection overload uses both the conv.fwd and the conv.chunks arm") {
    ArmSelection sel;
    CHECK(conv_fwd_contract(sel, {2048, 32, 8192, 4}).kernel == "conv_fwd_register_exact");
    sel.conv_fwd = ConvFwdArm::k4x2;
    sel.conv_chunks = ConvChunksArm::whole;
    auto c = conv_fwd_contract(sel, {2048, 32, 8192, 4});
    CHECK(c.kernel == "conv_fwd_k4x2_whole");
    CHECK(c.grid == d3(32, 32, 1));
  }
}

TEST_CASE("conv.fwd contract: k4 and k4x2 fall back to register when K != 4", "[contracts]") {
  for (auto requested : {ConvFwdArm::k4, ConvFwdArm::k4x2}) {
    for (int K : {2, 3, 5, 8}) {
      for (auto chunks : {ConvChunksArm::exact, ConvChunksArm::whole}) {
        CAPTURE(arm_name(requested), K, arm_name(chunks));
        const ConvFwdShape s{2048, 32, 8192, K};
        auto c = conv_fwd_contract(requested, chunks, s);
        auto reg = conv_fwd_contract(ConvFwdArm::reg, chunks, s);
        CHECK(c.arm == ConvFwdArm::reg);
        CHECK(c.fallback_reason ==
              std::string(arm_name(requested)) + " needs K = 4 (got K=" + std::to_string(K) + "): using register");
        CHECK(c.grid == reg.grid);
        CHECK(c.block == reg.block);
        CHECK(c.smem_bytes == reg.smem_bytes);
        CHECK(c.kernel == reg.kernel);
        CHECK(reg.fallback_reason.empty());
      }
    }
    // K = 4 keeps the arm.
    auto c = conv_fwd_contract(requested, ConvChunksArm::exact, {2048, 32, 8192, 4});
    CHECK(c.arm == requested);
    CHECK(c.fallback_reason.empty());
  }
  CHECK(conv_fwd_contract(ConvFwdArm::k4, ConvChunksArm::exact, {64, 4, 1024, 3}).fallback_reason ==
        "k4 needs K = 4 (got K=3): using register");
  CHECK(conv_fwd_contract(ConvFwdArm::k4x2, ConvChunksArm::exact, {64, 4, 1024, 5}).fallback_reason ==
        "k4x2 needs K = 4 (got K=5): using register");
  // tiled and register never fall back.
  for (int K = kConvMinK; K <= kConvMaxK; ++K) {
    CHECK(conv_fwd_contract(ConvFwdArm::tiled, ConvChunksArm::exact, {64, 4, 1024, K}).fallback_reason.empty());
    CHECK(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, {64, 4, 1024, K}).fallback_reason.empty());
  }
}

TEST_CASE("conv.fwd contract: invalid shapes", "[contracts]") {
  for (auto arm : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
    for (auto chunks : {ConvChunksArm::exact, ConvChunksArm::whole}) {
      CAPTURE(arm_name(arm), arm_name(chunks));
      CHECK(contains(invalid_argument_of([&] {
                       conv_fwd_contract(arm, chunks, {64, 4, 1024, 1});
                     }),
                     "conv.fwd: K must be 2..8 (got K=1)"));
      CHECK_THROWS_AS(conv_fwd_contract(arm, chunks, {64, 4, 1024, 9}), std::invalid_argument);
      CHECK_THROWS_AS(conv_fwd_contract(arm, chunks, {0, 4, 1024, 4}), std::invalid_argument);
      CHECK_THROWS_AS(conv_fwd_contract(arm, chunks, {64, 0, 1024, 4}), std::invalid_argument);
      CHECK_THROWS_AS(conv_fwd_contract(arm, chunks, {64, 4, 0, 4}), std::invalid_argument);
    }
  }
  // grid y over CUDA's 65535: exact via the chunk bound, whole via max_seqs.
  CHECK(conv_max_chunks(524280, 1) == 65535);
  CHECK_NOTHROW(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, {524280, 1, 1024, 4}));
  CHECK(contains(invalid_argument_of([] {
                   conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, {524288, 1, 1024, 4});
                 }),
                 "grid y = 65536"));
  CHECK_NOTHROW(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::whole, {524288, 1, 1024, 4}));
  CHECK_THROWS_AS(conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::whole, {70000, 65536, 1024, 4}),
                  std::invalid_argument);
}

// --- chunk descriptors ----------------------------------------------------------------------------

TEST_CASE("conv chunks: hand cases", "[contracts]") {
  CHECK(build_conv_chunks({0}).empty());
  CHECK(build_conv_chunks({0, 0, 0}).empty());
  CHECK(build_conv_chunks({0, 1}) == chunks_of({{0, 0, 1}}));
  CHECK(build_conv_chunks({0, 8}) == chunks_of({{0, 0, 8}}));
  CHECK(build_conv_chunks({0, 9}) == chunks_of({{0, 0, 8}, {0, 8, 1}}));
  CHECK(build_conv_chunks({0, 16}) == chunks_of({{0, 0, 8}, {0, 8, 8}}));
  // Zero-length sequences 0 and 2 produce nothing; sequence 3 (17 tokens) three chunks.
  CHECK(build_conv_chunks({0, 0, 3, 3, 20}) == chunks_of({{1, 0, 3}, {3, 3, 8}, {3, 11, 8}, {3, 19, 1}}));
  CHECK(build_conv_chunks({0, 1, 2, 3}) == chunks_of({{0, 0, 1}, {1, 1, 1}, {2, 2, 1}}));
  // The seed's regression shape: lengths {33, 37}.
  CHECK(build_conv_chunks({0, 33, 70}) == chunks_of({{0, 0, 8},
                                                     {0, 8, 8},
                                                     {0, 16, 8},
                                                     {0, 24, 8},
                                                     {0, 32, 1},
                                                     {1, 33, 8},
                                                     {1, 41, 8},
                                                     {1, 49, 8},
                                                     {1, 57, 8},
                                                     {1, 65, 5}}));
  // Other chunk sizes.
  CHECK(build_conv_chunks({0, 5, 5, 7}, 2) == chunks_of({{0, 0, 2}, {0, 2, 2}, {0, 4, 1}, {2, 5, 2}}));
  CHECK(build_conv_chunks({0, 3}, 1) == chunks_of({{0, 0, 1}, {0, 1, 1}, {0, 2, 1}}));

  CHECK_THROWS_AS(build_conv_chunks({}), std::invalid_argument);
  CHECK_THROWS_AS(build_conv_chunks({1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(build_conv_chunks({0, 5, 3}), std::invalid_argument);
  CHECK_THROWS_AS(build_conv_chunks({0, 5}, 0), std::invalid_argument);
}

TEST_CASE("conv chunks: conv_max_chunks is the exact worst case", "[contracts]") {
  CHECK(conv_max_chunks(0, 0) == 0);
  CHECK(conv_max_chunks(0, 5) == 0);
  CHECK(conv_max_chunks(5, 0) == 0);
  CHECK(conv_max_chunks(1, 1) == 1);
  CHECK(conv_max_chunks(8, 1) == 1);
  CHECK(conv_max_chunks(9, 1) == 2);
  CHECK(conv_max_chunks(8, 8) == 8);
  CHECK(conv_max_chunks(8, 100) == 8);  // never more chunks than tokens
  CHECK(conv_max_chunks(16, 2) == 3);   // {1, 15}
  CHECK(conv_max_chunks(2048, 32) == 284);
  CHECK(conv_max_chunks(5, 2, 2) == 3);  // {1, 4}
  CHECK_THROWS_AS(conv_max_chunks(-1, 1), std::invalid_argument);
  CHECK_THROWS_AS(conv_max_chunks(1, -1), std::invalid_argument);
  CHECK_THROWS_AS(conv_max_chunks(1, 1, 0), std::invalid_argument);

  for (int ct : {1, 2, 3, 8}) {
    const int max_T = ct == 8 ? 160 : 60, max_n = 24;
    const auto best = worst_chunks_table(max_T, max_n, ct);
    for (int n = 0; n <= max_n; ++n) {
      for (int T = 0; T <= max_T; ++T) {
        // The worst case over batches of at most T tokens in at most n sequences.
        int worst = 0;
        for (int m = 0; m <= n; ++m)
          for (int t = 0; t <= T; ++t) worst = std::max(worst, best[m][t]);
        CAPTURE(ct, n, T);
        REQUIRE(conv_max_chunks(T, n, ct) == worst);
        // It never exceeds the looser "one partial chunk per sequence" bound.
        CHECK(conv_max_chunks(T, n, ct) <= (T + ct - 1) / ct + n);
      }
    }
  }
}

TEST_CASE("conv chunks: random varlen batches stay within conv_max_chunks and cover every token once", "[contracts]") {
  const uint64_t seed = 0x5eedc0117ull;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int attained = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = std::uniform_int_distribution<int>(0, 64)(rng);
    // Mix of length profiles: many short (incl. zero), a few long, all lengths of one chunk + 1.
    const int profile = trial % 4;
    std::vector<int32_t> cu{0};
    for (int s = 0; s < n; ++s) {
      int len = 0;
      if (profile == 0) len = std::uniform_int_distribution<int>(0, 3)(rng);
      if (profile == 1) len = std::uniform_int_distribution<int>(0, 300)(rng);
      if (profile == 2)
        len = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 8 * std::uniform_int_distribution<int>(0, 5)(rng) + 1;
      if (profile == 3)
        len = std::uniform_int_distribution<int>(0, 20)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 17)(rng);
      cu.push_back(cu.back() + len);
    }
    const int T = cu.back();
    CAPTURE(trial, n, T);
    const auto chunks = build_conv_chunks(cu);
    const int bound = conv_max_chunks(T, n);
    REQUIRE(int(chunks.size()) <= bound);
    if (int(chunks.size()) == bound) ++attained;
    // A padded bucket (more tokens, more sequences) bounds it too.
    CHECK(int(chunks.size()) <= conv_max_chunks(T + 13, n + 3));
    // Every token exactly once, in order, each chunk inside its sequence, 1..8 tokens.
    int32_t next = 0;
    std::vector<int> per_seq(size_t(n), 0);
    for (const ConvChunk& c : chunks) {
      REQUIRE(c.seq >= 0);
      REQUIRE(c.seq < n);
      REQUIRE(c.len >= 1);
      REQUIRE(c.len <= 8);
      // Skip the empty sequences before this one.
      REQUIRE(c.start == next);
      REQUIRE(c.start >= cu[size_t(c.seq)]);
      REQUIRE(c.start + c.len <= cu[size_t(c.seq) + 1]);
      next = c.start + c.len;
      ++per_seq[size_t(c.seq)];
    }
    CHECK(next == T);
    for (int s = 0; s < n; ++s) {
      const int L = cu[size_t(s) + 1] - cu[size_t(s)];
      CHECK(per_seq[size_t(s)] == (L + 7) / 8);
    }
  }
  CHECK(attained > 0);  // profile 2 hits the bound often; the bound is not loose
  // The constructive worst case: m-1 one-token sequences and one long one.
  for (int T : {1, 7, 8, 9, 64, 2048}) {
    for (int n : {1, 2, 5, 32, 3000}) {
      const int m = std::min(n, T);
      std::vector<int32_t> cu{0};
      for (int s = 0; s + 1 < m; ++s) cu.push_back(cu.back() + 1);
      cu.push_back(T);
      CAPTURE(T, n);
      CHECK(int(build_conv_chunks(cu).size()) == conv_max_chunks(T, n));
    }
  }
}

// --- the arm a launcher runs ----------------------------------------------------------------------
// Each launcher switches over the contract's arm (closed switches: an arm without a case does not
// compile), so the arm that runs is the contract's after its fallbacks, and its kernel name.

TEST_CASE("the contract's arm is the requested one or its fallback, with that arm's kernel", "[contracts]") {
  SECTION("conv.fwd: every requested arm, K = 3, 4 and 5") {
    for (auto requested : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
      for (int K : {3, 4, 5}) {
        CAPTURE(arm_name(requested), K);
        const auto c = conv_fwd_contract(requested, ConvChunksArm::exact, {2048, 32, 8192, K});
        const bool falls_back = (requested == ConvFwdArm::k4 || requested == ConvFwdArm::k4x2) && K != 4;
        CHECK(c.arm == (falls_back ? ConvFwdArm::reg : requested));
        // The kernel the launchers run for that arm (their switch), by name.
        const char* const kernel = c.arm == ConvFwdArm::tiled ? "conv_fwd_tiled_exact"
                                   : c.arm == ConvFwdArm::reg ? "conv_fwd_register_exact"
                                   : c.arm == ConvFwdArm::k4  ? "conv_fwd_k4_exact"
                                                              : "conv_fwd_k4x2_exact";
        CHECK(std::string(c.kernel) == kernel);
      }
    }
  }
  SECTION("postconv: token_tile with Dk = 64 runs fast") {
    const auto c = postconv_contract(PostconvArm::token_tile, {128, 16, 32, 64, 64});
    CHECK(c.arm == PostconvArm::fast);
    CHECK(std::string(c.kernel) == "postconv_fast");
    CHECK(postconv_contract(PostconvArm::token_tile, {128, 16, 32, 128, 128}).arm == PostconvArm::token_tile);
    for (auto arm : {PostconvArm::megablock, PostconvArm::fast, PostconvArm::split}) {
      CHECK(postconv_contract(arm, {17, 4, 8, 128, 128}).arm == arm);
    }
  }
  SECTION("conv.update: each arm") {
    for (auto arm : {ConvUpdateArm::grid, ConvUpdateArm::fast}) {
      CHECK(conv_update_contract(arm, {32, 8192, 4}).arm == arm);
    }
  }
}
