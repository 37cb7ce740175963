// GPU tests of gdn.prefill's fused arm (kernels/gdn_prefill_fused.h) against the unfused reference
// path, conv.fwd (tiled, exact) into a conv buffer in the activation dtype, then postconv
// (megablock) over the live tokens:
// - raw bytes of q, k, v, g, beta and of the whole conv state cache, over f32 and bf16 activations
//   (q/k/v in the same or the other dtype; state and a/b dtypes varied), K in {2, 3, 4, 5} (and 8),
//   head shapes from one v-head to the 4B and 27B layers, narrow and odd v regions (Dv 8, 40, 200);
// - varlen batches with zero-length sequences, sequences shorter than K-1, sequences starting at
//   and around the 64-token tile edges with history, long sequences with history, padding
//   sequences (slot -1, with their history flag set); the seed's regression case (C = 1024, K = 4,
//   lengths {33, 37}, the first with history, f32);
// - invariants of every fused run: x, a and b are read through strides whose gaps (and the rows
//   past the live tokens) hold NaN that must never be read; every output starts as poison, every
//   live byte is written (two runs from 0xA5 and 0x5A poison agree) and rows past T stay poison;
//   padding tokens get all-zero q, k, v, g, beta (the unfused path computes their g and beta from a
//   and b: those rows are compared against zeros instead); slots no live sequence owns keep their bytes;
// - unsupported shapes and contracts that are not the params' own are refused with
//   cudaErrorInvalidValue before anything is launched;
// - one captured launch: the graph's kernel node is the contract's kernel, grid and block, and the
//   graph replays eager's bytes for two batch compositions of its bucket;
// - the C entry point sg_gdn_prefill_fused gives the C++ launcher's bytes.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/capi/stepgraph_c.h"
#include "tests/gpu/gdn_prefill_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::gpf;
using test::byte_diff;

TEST_CASE("gdn.prefill fused: q k v g beta and state are the unfused path's bytes", "[gpu][gdn_prefill_fused]") {
  struct Heads {
    int Hk, Hv, Dv;
  };
  // One v-head (C = 384); C = 1024; narrow, odd and wide v regions; the 4B and 27B layers.
  const Heads heads[] = {{1, 1, 128}, {2, 4, 128}, {1, 2, 8}, {3, 9, 40}, {2, 6, 200}, {16, 32, 128}, {16, 48, 128}};
  uint64_t seed = 1000;
  for (size_t hi = 0; hi < std::size(heads); ++hi) {
    for (int K : {2, 3, 4, 5}) {
      const DType act = (hi + static_cast<size_t>(K)) % 2 ? DType::f32 : DType::bf16;
      const DType other = act == DType::f32 ? DType::bf16 : DType::f32;
      const auto [Hk, Hv, Dv] = heads[hi];
      check_problem(matrix_problem(act, seed % 3 == 0 ? other : act, Hk, Hv, Dv, K, seed));
      ++seed;
      if (K == 4) {
        check_problem(matrix_problem(other, other, Hk, Hv, Dv, K, seed));
        ++seed;
      }
    }
  }
  check_problem(matrix_problem(DType::bf16, DType::bf16, 2, 4, 64, 8, 999));  // the widest conv
}

TEST_CASE("gdn.prefill fused: the seed's regression case and long sequences with history", "[gpu][gdn_prefill_fused]") {
  // The seed's 0-ulp regression (ARMS.md): C = 1024 (Hk 2, Hv 4, Dk = Dv = 128), K = 4, lengths
  // {33, 37}, the first with history, f32; dense, then strided in a larger bucket.
  Problem p = make("seed regression", DType::f32, DType::f32, 2, 4, 128, 4, 2661);
  p.sdt = DType::f32;
  p.abt = DType::f32;
  p.has_bias = true;
  p.silu = true;
  p.odd_w = false;
  p.lens = {33, 37};
  p.slots = {1, 0};
  p.hist = {1, 0};
  p.num_slots = 2;
  fill(p, /*x_pad=*/0, /*extra_tokens=*/0, /*extra_seqs=*/0);
  check_problem(p);
  Problem q = p;
  fill(q, /*x_pad=*/3, /*extra_tokens=*/25, /*extra_seqs=*/3);
  check_problem(q);
  // Long sequences with history span many tiles: every later tile takes its left taps from x.
  for (DType act : {DType::bf16, DType::f32}) {
    for (int K : {2, 4, 5}) {
      Problem l = make("long with history", act, act, 2, 4, 128, K, 3000 + K);
      set_batch(l, {{1000, true, false}, {7, true, false}, {300, true, false}, {129, false, false}});
      fill(l, 8);
      check_problem(l);
    }
  }
}

TEST_CASE("gdn.prefill fused: sequences around tile edges, short, empty and padding", "[gpu][gdn_prefill_fused]") {
  // In order: sequences starting at 63, 125 (length 1, padding), 126, 128, 190, 253, 256, 320, 384,
  // 448: heads (first K-1 tokens) that cross a 64-token tile edge, with history, and shorter than K-1.
  const std::vector<Seq> edges = {{63, true, false}, {62, true, false}, {1, true, true},    {2, true, false},
                                  {62, true, false}, {63, true, false}, {3, true, false},   {64, true, false},
                                  {0, true, false},  {64, true, false}, {64, false, false}, {1, true, false},
                                  {5, true, true},   {2, false, false}};
  uint64_t seed = 5000;
  for (int K : {2, 3, 4, 5, 8}) {
    for (DType act : {DType::bf16, DType::f32}) {
      Problem p = make("tile edges", act, act, 1, 2, 64, K, seed++);
      set_batch(p, edges);
      fill(p, 3, 70, 1);
      check_problem(p);
    }
  }
  // Batches with nothing to do, or nothing but padding: zero rows, untouched state.
  const std::vector<std::vector<Seq>> special = {
      {{0, true, false}, {0, false, false}},
      {{4, true, true}, {90, false, true}},
      {{1, true, false}},
      {{1, true, false}, {2, true, false}, {1, false, false}, {3, true, false}}};
  for (const auto& batch : special) {
    for (int K : {2, 4, 5}) {
      Problem p = make("special", DType::bf16, DType::bf16, 2, 4, 128, K, seed++);
      set_batch(p, batch);
      fill(p, 8);
      check_problem(p);
    }
  }
}

TEST_CASE("gdn.prefill fused: unsupported shapes and foreign contracts are refused", "[gpu][gdn_prefill_fused]") {
  Problem p = make("refusals", DType::bf16, DType::bf16, 2, 4, 128, 4, 77);
  set_batch(p, {{20, true, false}, {9, false, false}});
  fill(p, 8);
  Rig rig(p);
  rig.load(p);
  const GdnPrefillFusedParams f = rig.fused();
  const auto c = gdn_prefill_contract(GdnPrefillArm::fused, p.shape());
  auto with = [&](auto edit) {
    GdnPrefillFusedParams e = f;
    edit(e);
    return gdn_prefill_fused(e, c, nullptr);
  };
  CHECK(with([](auto& e) { e.Dk = 64; }) == cudaErrorInvalidValue);  // not built (the contract falls back)
  CHECK(with([](auto& e) { e.Dv = 60; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.K = 9; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.Hv = 3; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.act = DType::f16; }) == cudaErrorInvalidValue);
  CHECK(with([&](auto& e) { e.x_stride = p.C() - 1; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.b_stride = 3; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.n_seqs = nullptr; }) == cudaErrorInvalidValue);
  CHECK(with([](auto& e) { e.max_tokens += 64; }) == cudaErrorInvalidValue);  // another bucket's grid
  auto c2 = c;
  c2.grid.x += 1;
  CHECK(gdn_prefill_fused(f, c2, nullptr) == cudaErrorInvalidValue);
  c2 = c;
  c2.arm = GdnPrefillArm::unfused;
  CHECK(gdn_prefill_fused(f, c2, nullptr) == cudaErrorInvalidValue);
  // The fallback contract of an unsupported shape cannot be launched here.
  const auto fb =
      gdn_prefill_contract(GdnPrefillArm::fused, GdnPrefillShape{p.max_tokens, p.max_seqs, 2, 4, 64, 64, 4});
  CHECK(fb.arm == GdnPrefillArm::unfused);
  CHECK(!fb.fallback_reason.empty());
  GdnPrefillFusedParams f64 = f;
  f64.Dk = f64.Dv = 64;
  CHECK(gdn_prefill_fused(f64, fb, nullptr) == cudaErrorInvalidValue);
  // Nothing was launched: the outputs are still poison.
  const Outcome o = download(rig);
  for (const auto* b : {&o.q, &o.k, &o.v, &o.g, &o.beta}) {
    CHECK(std::all_of(b->begin(), b->end(), [](uint8_t x) { return x == kPoison; }));
  }
  // The C entry point refuses the head size with SG_ERR_SIZE, naming the unfused calls.
  sg_gdn_prefill_args a{};
  a.Hk = 2;
  a.Hv = 4;
  a.Dk = 64;
  a.Dv = 64;
  a.K = 4;
  CHECK(sg_gdn_prefill_fused(&a, nullptr) == SG_ERR_SIZE);
  CHECK(std::string(sg_last_error()).find("sg_conv_fwd then sg_postconv") != std::string::npos);
}

TEST_CASE("gdn.prefill fused: one captured launch is the contract's node and replays eager",
          "[gpu][gdn_prefill_fused][graphs]") {
  // Bucket of batch A; batch B is another composition of the same bucket.
  Problem a = make("graph batch A", DType::bf16, DType::bf16, 2, 4, 128, 4, 91);
  a.odd_w = false;
  set_batch(a, {{37, true, false}, {0, true, false}, {5, true, true}, {100, false, false}});
  a.num_slots = 8;  // (set_batch's slots are < 7)
  fill(a, 8, 80, 4);
  Problem b = a;
  b.name = "graph batch B";
  b.seed = 97;  // (the same strides as a: they follow seed % 6)
  b.lens = {1, 2, 150, 9, 3, 20};
  b.slots = {7, 6, 5, -1, 2, 4};
  b.hist = {1, 0, 1, 1, 1, 0};
  {
    const int mt = a.max_tokens, ms = a.max_seqs;
    fill(b, 8, 0, 0);
    REQUIRE(b.T() <= mt);
    REQUIRE(b.N() <= ms);
    b.max_tokens = mt;
    b.max_seqs = ms;
    b.x.resize(static_cast<size_t>(mt) * b.x_stride, kNaN);
    b.a.resize(static_cast<size_t>(mt) * b.a_stride, kNaN);
    b.b.resize(static_cast<size_t>(mt) * b.b_stride, kNaN);
  }
  const auto c = gdn_prefill_contract(GdnPrefillArm::fused, a.shape());
  REQUIRE(c.arm == GdnPrefillArm::fused);
  Stream stream;
  Rig rig(a);
  rig.load(a);
  NodeRecorder rec;
  CapturedGraph g = CapturedGraph::capture("gdn.prefill fused", stream.get(), [&] {
    check(gdn_prefill_fused(rig.fused(), c, stream.get()));
    rec.launched(stream.get(), NodeLabel{-1, "gdn.prefill", "fused", 0});
  });
  ArmSelection sel;
  sel.gdn_prefill = GdnPrefillArm::fused;
  const Manifest m = build_manifest("gdn.prefill fused", sel.describe(), g.graph(), rec);
  REQUIRE(m.nodes.size() == 1);
  CHECK(m.unlabelled() == 0);
  CAPTURE(m.nodes[0].kernel);
  CHECK(m.nodes[0].kernel.find(std::string(c.kernel)) != std::string::npos);
  CHECK(m.nodes[0].grid == c.grid);
  CHECK(m.nodes[0].block == c.block);
  CHECK(m.nodes[0].smem_bytes == c.smem_bytes);
  // Spelled out: token tiles x (conv blocks + the gate block).
  const unsigned tiles = static_cast<unsigned>((a.max_tokens + kGdnPrefillTileTokens - 1) / kGdnPrefillTileTokens);
  CHECK(c.grid == Dim3{tiles * static_cast<unsigned>(gdn_prefill_conv_blocks_per_tile(2, 4, 128) + 1), 1, 1});
  for (const Problem* p : {&a, &b}) {
    INFO(describe(*p));
    const Outcome eager = run_fused(*p);
    rig.load(*p);
    g.replay(stream.get());
    stream.sync();
    const Outcome replayed = download(rig);
    CHECK(invariants(*p, replayed, kPoison) == "");
    CHECK(byte_diff(replayed.q, eager.q, p->qkv) == "");
    CHECK(byte_diff(replayed.k, eager.k, p->qkv) == "");
    CHECK(byte_diff(replayed.v, eager.v, p->qkv) == "");
    CHECK(byte_diff(replayed.g, eager.g, DType::f32) == "");
    CHECK(byte_diff(replayed.beta, eager.beta, DType::f32) == "");
    CHECK(byte_diff(replayed.state, eager.state, p->sdt) == "");
  }
}

TEST_CASE("gdn.prefill fused: the C entry point gives the C++ launcher's bytes", "[gpu][gdn_prefill_fused][capi]") {
  Problem p = matrix_problem(DType::bf16, DType::bf16, 2, 4, 128, 4, 4242);
  const Outcome want = run_fused(p);
  Rig rig(p);
  rig.load(p);
  const GdnPrefillFusedParams f = rig.fused();
  sg_gdn_prefill_args a{};
  a.x = f.x;
  a.x_stride = f.x_stride;
  a.x_dtype = SG_BF16;
  a.state = f.state;
  a.state_dtype = p.sdt == DType::bf16 ? SG_BF16 : SG_F32;
  a.w = f.w;
  a.bias = f.bias;
  a.a = f.a;
  a.a_stride = f.a_stride;
  a.b = f.b;
  a.b_stride = f.b_stride;
  a.ab_dtype = p.abt == DType::bf16 ? SG_BF16 : SG_F32;
  a.A_log = f.A_log;
  a.dt_bias = f.dt_bias;
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.qkv_dtype = SG_BF16;
  a.g = f.g;
  a.beta = f.beta;
  a.cu_seqlens = f.cu_seqlens;
  a.slots = f.slots;
  a.has_history = f.has_history;
  a.n_seqs = f.n_seqs;
  a.Hk = f.Hk;
  a.Hv = f.Hv;
  a.Dk = f.Dk;
  a.Dv = f.Dv;
  a.K = f.K;
  a.max_tokens = f.max_tokens;
  a.max_seqs = f.max_seqs;
  a.silu = f.silu ? 1 : 0;
  REQUIRE(sg_gdn_prefill_fused(&a, nullptr) == SG_OK);
  CHECK(std::string(sg_last_launch()).find("gdn.prefill=fused kernel gdn_prefill_fused") != std::string::npos);
  const Outcome got = download(rig);
  CHECK(byte_diff(got.q, want.q, p.qkv) == "");
  CHECK(byte_diff(got.k, want.k, p.qkv) == "");
  CHECK(byte_diff(got.v, want.v, p.qkv) == "");
  CHECK(byte_diff(got.g, want.g, DType::f32) == "");
  CHECK(byte_diff(got.beta, want.beta, DType::f32) == "");
  CHECK(byte_diff(got.state, want.state, p.sdt) == "");
}
