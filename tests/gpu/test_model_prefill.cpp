// GPU tests of the whole model's PREFILL step (models/model_step.h), all on the same HostWeights as
// the CPU reference:
// - a varlen prefill (fresh sequences, an empty request, then a continuing prefill with history
//   and decode steps after it) matches the CPU reference;
// - prefill of n tokens then m decode steps equals one prefill of n + m tokens;
// - a batch of mixed sequences equals each sequence prefilled alone;
// - prefill graph replay is byte-identical to eager (logits, tokens and every cache);
// - empty requests and unused slots touch no cache; an empty request gets zero logits, token 0;
// - the prefill manifest labels every kernel and shows the prefill kernels;
// - on the Hugging Face fixtures (tests/fixtures) the GPU step in f32 reproduces HF's logits and
//   greedy tokens;
// These run the scan delta-rule prefill unless told (the n + m, mixed-batch and fused tests run scan,
// chunked and mma);
// the chunked form's own tests are in test_model_prefill_chunked.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "engine/error.h"
#include "kernels/attention.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/ref/mlp_ref.h"
#include "models/hf_config.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "models/safetensors.h"
#include "tests/support/catch.h"
#include "tests/support/logits.h"

#include "tests/gpu/model_prefill_fixture.h"

using namespace sg;
using namespace sg::test::mp;

TEST_CASE("model prefill matches the CPU reference, with history and decode after it", "[gpu][model][prefill]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 11);
    ModelStep step(cfg, prefill_options(DType::f32));
    step.load_host_weights(w);
    step.capture_all();
    ReferenceModel ref(cfg, w, 8, 160);
    const double tol = f32_tolerance(step);
    const int V = cfg.vocab;

    // Fresh: lengths 1, 7, 19 and an empty request.
    check_prefill(step, {&ref}, {{5, 1, 0}, {1, 7, 0}, {3, 19, 0}, {0, 0, 0}}, V, tol);
    // Continuing prefills (history): short (< K-1), across conv chunks, and a fresh one beside them.
    check_prefill(step, {&ref}, {{1, 2, 7}, {5, 33, 1}, {6, 9, 0}, {3, 1, 19}}, V, tol);
    // Decode after prefill.
    check_decode_after(step, {&ref}, {1, 5, 6, 3}, {9, 34, 9, 20}, V, tol);
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model prefill of n tokens then m decode steps equals a prefill of n + m", "[gpu][model][prefill]") {
  const Qwen35Config cfg = preset("tiny");
  const HostWeights w = synthetic_weights(cfg, 12);
  const DeltaPrefill dp = GENERATE(DeltaPrefill::scan, DeltaPrefill::chunked, DeltaPrefill::mma);
  CAPTURE(delta_prefill_name(dp));
  ModelStep step(cfg, prefill_options(DType::f32, dp));
  step.load_host_weights(w);
  step.capture_all();
  const int V = cfg.vocab;
  for (int n : {1, 5, 11, 40, 70}) {
    CAPTURE(n);
    const int m = 5;
    const std::vector<int32_t> toks = tokens_for(n, n + m, V);
    step.clear_caches();
    // A: prefill n into slot 2, then decode m tokens one by one.
    step.prefill({PrefillRequest{2, std::vector<int32_t>(toks.begin(), toks.begin() + n), 0}}, RunMode::graph);
    DecodeOutput last;
    for (int j = 0; j < m; ++j)
      last = step.decode({DecodeRequest{2, toks[static_cast<size_t>(n + j)], n + j}}, RunMode::graph);
    // B: prefill all n + m into slot 6.
    const PrefillOutput all = step.prefill({PrefillRequest{6, toks, 0}}, RunMode::graph);
    // Same math; only summation orders differ (attention prefill vs decode, cuBLAS kernels for
    // other row counts): f32 tolerance, KV cache rounding identical in both paths.
    const double e = normalised_error(last.logits.data(), all.logits.data(), static_cast<size_t>(V));
    INFO("normalised max logit error " << e);
    CHECK(e <= 1e-4);
    CHECK(last.tokens[0] == all.tokens[0]);
  }
}

TEST_CASE("model prefill of a mixed batch equals each sequence prefilled alone", "[gpu][model][prefill]") {
  const DeltaPrefill dp = GENERATE(DeltaPrefill::scan, DeltaPrefill::chunked, DeltaPrefill::mma);
  CAPTURE(delta_prefill_name(dp));
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 13);
    ModelStep step(cfg, prefill_options(DType::f32, dp));
    step.load_host_weights(w);
    step.capture_all();
    const int V = cfg.vocab;
    const std::vector<int> slots = {4, 0, 7, 2}, lens = {3, 17, 1, 9};
    std::vector<PrefillRequest> batch;
    for (size_t i = 0; i < slots.size(); ++i) batch.push_back({slots[i], tokens_for(slots[i], lens[i], V), 0});
    step.clear_caches();
    const PrefillOutput mixed = step.prefill(batch, RunMode::graph);
    const DecodeOutput next = step.decode({{4, 1, 3}, {0, 2, 17}, {7, 3, 1}, {2, 4, 9}}, RunMode::graph);
    for (size_t i = 0; i < slots.size(); ++i) {
      CAPTURE(i, slots[i], lens[i]);
      step.clear_caches();
      const PrefillOutput alone = step.prefill({batch[i]}, RunMode::graph);
      const int tok = static_cast<int>(i) + 1;
      const DecodeOutput one = step.decode({{slots[i], tok, lens[i]}}, RunMode::graph);
      // Row-local math is the same; cuBLAS's kernel choice for another row count changes summation
      // orders, and those differences grow through the layers: the f32 bound of the n + m test.
      const double e1 = normalised_error(mixed.logits.data() + i * V, alone.logits.data(), static_cast<size_t>(V));
      const double e2 = normalised_error(next.logits.data() + i * V, one.logits.data(), static_cast<size_t>(V));
      INFO("prefill error " << e1 << ", next decode step error " << e2);
      CHECK(e1 <= 1e-4);
      CHECK(e2 <= 1e-4);
      CHECK(mixed.tokens[i] == alone.tokens[0]);
    }
  }
}

TEST_CASE("model prefill graph replay is byte-identical to eager", "[gpu][model][prefill][graphs]") {
  for (DType act : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(act));
    const Qwen35Config cfg = preset("tiny-dkdv");
    ModelStepOptions o = prefill_options(act);
    o.synthetic = true;
    ModelStep step(cfg, o);
    step.capture_all();
    step.randomize_caches(3);
    const int V = cfg.vocab;
    // Three sequences, two with history (positions consistent with the random caches' length).
    check_prefill_replay(
        step, {{3, tokens_for(1, 21, V), 10}, {0, tokens_for(2, 2, V), 30}, {6, tokens_for(3, 40, V), 0}}, 64);
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model prefill with gemm = lt-all: the projections on cuBLASLt, named in the manifest, replay == eager",
          "[gpu][model][prefill][gemm]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o = prefill_options(DType::bf16);
  o.synthetic = true;
  o.gemm = GemmKind::lt_all;
  ModelStep step(cfg, o);
  step.capture_all();  // each key's warm-up tunes its projection shapes before its capture
  for (int b : step.prefill_keys()) {
    CAPTURE(b);
    int lt = 0, other = 0;
    for (const auto& n : step.prefill_manifest(b).nodes) {
      const std::string& op = n.label.op;
      if (op == "mlp.gate_up" || op == "mlp.down" || op == "gdn.in_proj" || op == "lm_head")
        ++(n.label.arm.rfind("lt algo=", 0) == 0 ? lt : other);
    }
    CHECK(other == 0);
    CHECK(lt >= 2 * cfg.layers + cfg.num_linear_attention() + 1);  // cuBLASLt may add a reduction node
  }
  step.randomize_caches(3);
  check_prefill_replay(step, {{3, tokens_for(1, 21, cfg.vocab), 10}, {6, tokens_for(3, 40, cfg.vocab), 0}});
  CHECK(step.eager_fallbacks() == 0);
}

TEST_CASE("model prefill leaves unused slots and empty requests untouched", "[gpu][model][prefill]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o = prefill_options(DType::bf16);
  o.synthetic = true;
  ModelStep step(cfg, o);
  step.capture_all();
  step.randomize_caches(9);
  std::vector<std::vector<uint8_t>> before;
  for (int s = 0; s < o.num_slots; ++s) before.push_back(step.slot_cache_bytes(s));
  const PrefillOutput out = step.prefill({{2, tokens_for(1, 5, cfg.vocab), 0}, {4, {}, 3}}, RunMode::graph);
  CHECK(out.tokens[1] == 0);
  const float* empty = out.logits.data() + cfg.vocab;
  CHECK(std::all_of(empty, empty + cfg.vocab, [](float x) { return x == 0.0f; }));
  for (int s = 0; s < o.num_slots; ++s) {
    CAPTURE(s);
    if (s == 2) {
      CHECK(step.slot_cache_bytes(s) != before[static_cast<size_t>(s)]);
    } else {
      CHECK(step.slot_cache_bytes(s) == before[static_cast<size_t>(s)]);
    }
  }
  // Bad input: more tokens than the largest bucket, too many sequences, a repeated slot.
  CHECK_THROWS_AS(step.prefill({{1, tokens_for(1, 129, cfg.vocab), 0}}, RunMode::graph), Error);
  CHECK_THROWS_AS(step.prefill({{0, {1}, 0}, {1, {1}, 0}, {2, {1}, 0}, {3, {1}, 0}, {5, {1}, 0}}, RunMode::graph),
                  Error);
  CHECK_THROWS_AS(step.prefill({{1, {1}, 0}, {1, {2}, 0}}, RunMode::graph), Error);
}

TEST_CASE("model prefill manifest labels every kernel and shows the prefill kernels", "[gpu][model][prefill]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o = prefill_options(DType::bf16);
  o.synthetic = true;
  ModelStep step(cfg, o);
  step.capture_all();
  REQUIRE(step.prefill_keys() == std::vector<int>{16, 32, 64, 128});
  for (int b : step.prefill_keys()) {
    CAPTURE(b);
    const Manifest& m = step.prefill_manifest(b);
    CHECK(m.unlabelled() == 0);
    std::multiset<std::string> ops;
    for (const auto& n : m.nodes) ops.insert(n.label.op);
    CHECK(ops.count("conv.fwd") == static_cast<size_t>(cfg.num_linear_attention()));
    CHECK(ops.count("delta_rule.prefill") == static_cast<size_t>(cfg.num_linear_attention()));
    CHECK(ops.count("attention.prefill") == static_cast<size_t>(cfg.num_full_attention()));
    CHECK(ops.count("conv.update") == 0);
    CHECK(ops.count("gather_last") == 1);
    for (const auto& n : m.nodes) {
      if (n.label.op == "delta_rule.prefill") CHECK(n.grid.y == static_cast<unsigned>(o.max_prefill_seqs));
    }
  }
}

TEST_CASE("model prefill: attn_prefill auto picks mma for bf16, simt for f32, and labels the manifest",
          "[gpu][model][prefill][mma]") {
  CHECK(ModelStepOptions{}.attn_prefill == AttnPrefill::automatic);
  CHECK(parse_attn_prefill("auto") == AttnPrefill::automatic);
  CHECK(parse_attn_prefill("mma") == AttnPrefill::mma);
  CHECK(parse_attn_prefill("wgmma") == AttnPrefill::wgmma);
  CHECK_THROWS_AS(parse_attn_prefill("wmma"), Error);
  const Qwen35Config cfg = preset("tiny");
  for (auto [act, want] : {std::pair{DType::bf16, AttnPrefill::mma}, {DType::f32, AttnPrefill::simt}}) {
    CAPTURE(dtype_name(act));
    ModelStepOptions o = prefill_options(act);
    o.synthetic = true;
    o.attn_prefill = AttnPrefill::automatic;
    ModelStep step(cfg, o);
    CHECK(step.options().attn_prefill == want);
    step.capture_all();
    size_t seen = 0;
    for (const auto& n : step.prefill_manifest(step.prefill_keys().back()).nodes) {
      if (n.label.op != "attention.prefill") continue;
      CHECK(n.label.arm == attn_prefill_name(want));
      ++seen;
    }
    CHECK(seen == static_cast<size_t>(cfg.num_full_attention()));
    if (act == DType::f32) {
      o.attn_prefill = AttnPrefill::mma;  // explicit mma on an f32 step: an error
      CHECK_THROWS_AS(ModelStep(cfg, o), Error);
    }
    o.attn_prefill = AttnPrefill::wgmma;  // the tiny preset's D = 32 has no wgmma kernel: an error
    CHECK_THROWS_AS(ModelStep(cfg, o), Error);
  }
}

TEST_CASE("model prefill with attn_prefill wgmma at D 64: the mma setting's logits bytes, labelled wgmma",
          "[gpu][model][prefill][wgmma]") {
  const DeviceLimits dev = DeviceLimits::current();
  if (!attention_prefill_wgmma_device(dev.cc_major, dev.cc_minor)) {
    WARN("the wgmma attention prefill runs on compute capability 9.0 only: not tested on this device");
    return;
  }
  // "tiny" with D = 64 (the kernels' bytes agree there: test_attention_mma.cpp), bf16, two
  // sequences with history across several 64-row tiles, graphed.
  Qwen35Config cfg = preset("tiny");
  cfg.D = 64;
  cfg.validate("test");
  const HostWeights w = synthetic_weights(cfg, 13);
  auto run = [&](AttnPrefill a) {
    ModelStepOptions o = prefill_options(DType::bf16);
    o.attn_prefill = a;
    ModelStep step(cfg, o);
    CHECK(step.options().attn_prefill == a);
    step.load_host_weights(w);
    step.capture_all();
    const int V = cfg.vocab;
    step.prefill({{1, tokens_for(1, 20, V), 0}, {3, tokens_for(3, 9, V), 0}}, RunMode::graph);
    const PrefillOutput out =
        step.prefill({{1, tokens_for(1, 70, V, 20), 20}, {3, tokens_for(3, 41, V, 9), 9}}, RunMode::graph);
    size_t labelled = 0;
    for (const auto& n : step.prefill_manifest(step.prefill_keys().back()).nodes)
      if (n.label.op == "attention.prefill") labelled += n.label.arm == attn_prefill_name(a);
    CHECK(labelled == static_cast<size_t>(cfg.num_full_attention()));
    return out;
  };
  const PrefillOutput m = run(AttnPrefill::mma), g = run(AttnPrefill::wgmma);
  REQUIRE(m.logits.size() == g.logits.size());
  CHECK(std::memcmp(m.logits.data(), g.logits.data(), m.logits.size() * sizeof(float)) == 0);
  CHECK(m.tokens == g.tokens);
}

TEST_CASE("model decode: attn_decode auto picks mma for bf16 with D 64, simt otherwise, and labels the manifest",
          "[gpu][model][mma][decode_mma]") {
  CHECK(ModelStepOptions{}.attn_decode == AttnDecode::automatic);
  CHECK(parse_attn_decode("auto") == AttnDecode::automatic);
  CHECK(parse_attn_decode("simt") == AttnDecode::simt);
  CHECK(parse_attn_decode("mma") == AttnDecode::mma);
  CHECK_THROWS_AS(parse_attn_decode("wmma"), Error);
  Qwen35Config cfg = preset("tiny");
  for (int D : {32, 64}) {
    cfg.D = D;
    for (DType act : {DType::bf16, DType::f32}) {
      CAPTURE(D, dtype_name(act));
      const AttnDecode want = D == 64 && act == DType::bf16 ? AttnDecode::mma : AttnDecode::simt;
      ModelStepOptions o = prefill_options(act);
      o.synthetic = true;
      ModelStep step(cfg, o);
      CHECK(step.options().attn_decode == want);
      step.capture_all(false, false);
      size_t seen = 0;
      for (const auto& n : step.manifest(step.keys().back()).nodes) {
        if (n.label.op != "attention.decode") continue;
        CHECK(n.label.arm.rfind(attn_decode_name(want), 0) == 0);  // "mma splits=N" / "simt splits=N"
        if (want == AttnDecode::mma && n.kernel.find("merge") == std::string::npos) {
          CHECK(n.kernel.find("attn_decode_mma_kernel") != std::string::npos);
        }
        ++seen;
      }
      CHECK(seen >= static_cast<size_t>(cfg.num_full_attention()));
      if (want == AttnDecode::simt) {
        o.attn_decode = AttnDecode::mma;  // explicit mma where it cannot run: an error
        CHECK_THROWS_AS(ModelStep(cfg, o), Error);
      }
    }
  }
}

TEST_CASE("model step in f32 reproduces the Hugging Face fixtures on the GPU", "[gpu][model][prefill][fixtures]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(SG_TEST_SOURCE_DIR) / "tests" / "fixtures";
  REQUIRE(fs::is_directory(root));
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && fs::exists(e.path() / "reference.json")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(dirs.size() >= 4);
  int run = 0;
  for (const fs::path& dir : dirs) {
    CAPTURE(dir.filename().string());
    std::ifstream jf(dir / "reference.json");
    const nlohmann::json fx = nlohmann::json::parse(jf);
    const Qwen35Config c = load_hf_config(dir / "config.json");
    // Every fixture's head sizes run on the GPU (D 16 and 24 on the generic attention kernel, Dk 8
    // and 16 on the delta rule's small tiles); the constructor would throw otherwise.
    CAPTURE(c.D, c.gdn.Dk, c.gdn.Dv);
    REQUIRE(attention_supports(c.Hq, c.Hkv, c.D, DType::f32));
    REQUIRE(delta_rule_decode_supports(c.gdn.Dk, c.gdn.Dv));
    ++run;
    const Checkpoint ck = Checkpoint::open(dir);
    ModelStepOptions o = prefill_options(DType::f32);
    o.num_slots = 2;
    o.max_decode_batch = 2;
    o.max_prefill_seqs = 1;
    ModelStep step(c, o);
    step.load_host_weights(load_weights(ck, c));
    step.capture_all();
    const int V = c.vocab;
    // f32 KV cache: the CPU reference's 1e-4 against HF. bf16 KV cache: 2e-2 (see above).
    const double tol = f32_tolerance(step);
    for (const auto& p : fx.at("prompts")) {
      const auto tokens = p.at("tokens").get<std::vector<int32_t>>();
      const auto greedy = p.at("greedy").get<std::vector<int64_t>>();
      const auto margins =
          p.contains("greedy_margins") ? p.at("greedy_margins").get<std::vector<double>>() : std::vector<double>{};
      const int n = static_cast<int>(tokens.size());
      CAPTURE(n);
      std::ifstream bf(dir / p.at("logits_file").get<std::string>(), std::ios::binary);
      std::vector<float> hf(static_cast<size_t>(n) * V);
      bf.read(reinterpret_cast<char*>(hf.data()), static_cast<std::streamsize>(hf.size() * 4));
      REQUIRE(bf.gcount() == static_cast<std::streamsize>(hf.size() * 4));
      const float* hf_last = hf.data() + static_cast<size_t>(n - 1) * V;

      step.clear_caches();
      const PrefillOutput out = step.prefill({PrefillRequest{1, tokens, 0}}, RunMode::graph);
      const double e = normalised_error(out.logits.data(), hf_last, static_cast<size_t>(V));
      INFO("last-token normalised logit error vs HF " << e << " (tolerance " << tol << ")");
      CHECK(e <= tol);
      // Greedy continuation: prefill's token, then decode steps feeding each token back.
      std::vector<int64_t> gen = {out.tokens[0]};
      while (gen.size() < greedy.size()) {
        const DecodeOutput d = step.decode(
            {DecodeRequest{1, static_cast<int32_t>(gen.back()), n + static_cast<int>(gen.size()) - 1}}, RunMode::graph);
        gen.push_back(d.tokens[0]);
      }
      double max_abs = 0;
      for (float x : hf) max_abs = std::max(max_abs, double(std::fabs(x)));
      INFO("ours " << nlohmann::json(gen).dump() << ", HF " << nlohmann::json(greedy).dump());
      for (size_t i = 0; i < greedy.size(); ++i) {
        if (gen[i] == greedy[i]) continue;
        // A near-tie (HF's top-2 margin within the error bound) may legitimately flip.
        const bool near_tie = i < margins.size() && margins[i] < 2.0 * tol * max_abs;
        if (near_tie) {
          WARN("greedy step " << i << " differs at a near-tie (margin " << margins[i] << "): not counted");
        } else {
          FAIL_CHECK("greedy token " << i << " differs: ours " << gen[i] << ", HF " << greedy[i]);
        }
        break;
      }
    }
  }
  // Every fixture ran: the real models' head sizes (h32: Dk = Dv = 128, D = 256) and the small ones
  // (Dk 8/16/32, Dv 8/16/24, D 16/24).
  REQUIRE(run == static_cast<int>(dirs.size()));
}

// bf16: the GPU step in bf16 against the CPU reference emulating a bf16 step (weights rounded to
// bf16, every activation the step stores rounded to bf16, f32 math in between). The two round at
// the same places but accumulate in other orders (cuBLAS vs double, tree vs serial sums), so an
// intermediate that lands near a rounding boundary rounds to a neighbouring bf16 value (2^-8
// relative) and that difference propagates through the layers. Tolerance: normalised max logit
// error <= 3e-2 per step; greedy tokens must agree wherever the reference's top-2 margin exceeds
// twice the observed error times the largest |logit|.
// Both attention prefills (simt and the tensor-core mma) are held to this tolerance.
TEST_CASE("model step in bf16 matches the bf16 CPU reference, prefill then decode", "[gpu][model][prefill][bf16]") {
  constexpr double kTol = 3e-2;
  const AttnPrefill ap = GENERATE(AttnPrefill::simt, AttnPrefill::mma);
  CAPTURE(attn_prefill_name(ap));
  // "tiny" with D = 64 as well: its decode steps run the tensor-core attention decode (auto) and
  // the skinny GEMM, the presets' D = 32 the CUDA-core attention and the mixed projections.
  for (const char* name : {"tiny", "tiny-dkdv", "tiny-d64"}) {
    CAPTURE(name);
    const bool d64 = std::string(name) == "tiny-d64";
    Qwen35Config cfg = preset(d64 ? "tiny" : name);
    if (d64) cfg.D = 64;
    const HostWeights w = synthetic_weights(cfg, 21);
    ModelStepOptions o = prefill_options(DType::bf16);
    o.attn_prefill = ap;
    if (d64) o.gemm = GemmKind::skinny;  // and its decode projections on the skinny GEMM
    ModelStep step(cfg, o);
    REQUIRE(step.options().attn_prefill == ap);
    REQUIRE(step.options().attn_decode == (d64 ? AttnDecode::mma : AttnDecode::simt));
    REQUIRE(step.options().gemm ==
            (d64 ? GemmKind::skinny : resolve_gemm(GemmKind::automatic, DType::bf16, DeviceLimits::current())));
    step.load_host_weights(w);
    step.capture_all();
    ReferenceOptions ro;
    ro.act = ref::Store::bf16;
    ReferenceModel ref(cfg, w, 8, 160, ro);
    const int V = cfg.vocab;
    double worst = 0;
    int compared = 0, rows = 0;
    auto compare = [&](const std::vector<float>& g, const std::vector<int32_t>& gt, const std::vector<float>& c) {
      REQUIRE(g.size() == c.size());
      const double e = normalised_error(g.data(), c.data(), c.size());
      worst = std::max(worst, e);
      INFO("normalised max logit error " << e << " (tolerance " << kTol << ")");
      CHECK(e <= kTol);
      double max_abs = 0;
      for (float x : c) max_abs = std::max(max_abs, double(std::fabs(x)));
      for (size_t r = 0; r < gt.size(); ++r, ++rows) {
        const float* cr = c.data() + r * V;
        if (test::top2_margin(cr, V) > 2.0 * e * max_abs) {
          CHECK(gt[r] == ref::argmax(cr, V));
          ++compared;
        }
      }
    };
    const std::vector<int> slots = {2, 6, 1}, lens = {5, 23, 1};
    std::vector<PrefillRequest> batch;
    std::vector<float> cref;
    for (size_t i = 0; i < slots.size(); ++i) {
      batch.push_back({slots[i], tokens_for(slots[i], lens[i], V), 0});
      const auto c = ref.prefill({Sequence{slots[i], widen(batch.back().tokens)}});
      cref.insert(cref.end(), c.begin(), c.end());
    }
    const PrefillOutput p = step.prefill(batch, RunMode::graph);
    compare(p.logits, p.tokens, cref);
    for (int t = 0; t < 12; ++t) {
      std::vector<DecodeRequest> reqs;
      std::vector<int> rs;
      std::vector<int64_t> rt;
      for (size_t i = 0; i < slots.size(); ++i) {
        const int32_t tok = tokens_for(300 + t, 1, V, static_cast<int>(i))[0];
        reqs.push_back({slots[i], tok, lens[i] + t});
        rs.push_back(slots[i]);
        rt.push_back(tok);
      }
      const DecodeOutput d = step.decode(reqs, RunMode::graph);
      compare(d.logits, d.tokens, ref.decode(rs, rt));
    }
    WARN(name << " bf16: worst normalised logit error " << worst << ", greedy tokens compared " << compared << " of "
              << rows);
    CHECK(compared >= rows / 2);  // the comparison must not be vacuous
  }
}

// The fused arm replaces conv.fwd + postconv and gives their bytes, whichever delta-rule prefill
// reads its q, k, v, g, beta (the arms are byte-identical and both delta-rule kernels deterministic).
// One test case a delta-rule form, one section a (Dv, dtype): each part can run on its own (a
// compute-sanitizer run selects one with -c "Dv 128 bf16").
namespace {
void check_fused_prefill(DeltaPrefill dp) {
  CAPTURE(delta_prefill_name(dp));
  // A tiny model with the head sizes the fused kernel is built for (Dk = 128; Dv 128 and 64).
  for (int Dv : {128, 64}) {
    for (DType act : {DType::bf16, DType::f32}) {
      DYNAMIC_SECTION("Dv " << Dv << " " << dtype_name(act)) {
        Qwen35Config cfg = preset("tiny");
        cfg.gdn = GdnDims{2, 4, 128, Dv, 4};
        cfg.validate("test");
        REQUIRE(gdn_prefill_fused_supports(cfg.gdn.Dk, cfg.gdn.Dv, cfg.gdn.K));
        ModelStepOptions o = prefill_options(act, dp);
        o.synthetic = true;
        o.arms.gdn_prefill = GdnPrefillArm::unfused;  // (fused is the default)
        ModelStep unfused(cfg, o);
        o.arms.gdn_prefill = GdnPrefillArm::fused;
        ModelStep fused(cfg, o);
        unfused.capture_all();
        fused.capture_all();
        unfused.randomize_caches(5);
        fused.set_cache_bytes(unfused.cache_bytes());
        // Fresh and continuing sequences, one shorter than K-1, one across tiles, an empty one.
        const std::vector<PrefillRequest> batch = {{1, tokens_for(1, 2, cfg.vocab), 7},
                                                   {4, tokens_for(2, 70, cfg.vocab), 0},
                                                   {6, {}, 3},
                                                   {0, tokens_for(3, 9, cfg.vocab), 20}};
        const PrefillOutput u = unfused.prefill(batch, RunMode::graph);
        const PrefillOutput f = fused.prefill(batch, RunMode::graph);
        CHECK(std::memcmp(u.logits.data(), f.logits.data(), u.logits.size() * sizeof(float)) == 0);
        CHECK(u.tokens == f.tokens);
        CHECK(unfused.cache_bytes() == fused.cache_bytes());
        std::multiset<std::string> ops, arms;
        for (const auto& n : fused.prefill_manifest(128).nodes) {
          ops.insert(n.label.op);
          if (n.label.op == "delta_rule.prefill") arms.insert(n.label.arm);
        }
        CHECK(ops.count("gdn.prefill") == static_cast<size_t>(cfg.num_linear_attention()));
        CHECK(ops.count("conv.fwd") == 0);
        CHECK(ops.count("postconv") == 0);
        std::multiset<std::string> unfused_ops;  // and the other side really ran conv.fwd + postconv
        for (const auto& n : unfused.prefill_manifest(128).nodes) unfused_ops.insert(n.label.op);
        CHECK(unfused_ops.count("gdn.prefill") == 0);
        CHECK(unfused_ops.count("conv.fwd") == static_cast<size_t>(cfg.num_linear_attention()));
        CHECK(ops.count("delta_rule.prefill") == static_cast<size_t>(cfg.num_linear_attention()));
        CHECK(arms.count(delta_prefill_name(dp)) == static_cast<size_t>(cfg.num_linear_attention()));
      }
    }
  }
}
}  // namespace

TEST_CASE("model prefill with the fused gdn.prefill arm gives the unfused bytes (scan)",
          "[gpu][model][prefill][fused]") {
  check_fused_prefill(DeltaPrefill::scan);
}

TEST_CASE("model prefill with the fused gdn.prefill arm gives the unfused bytes (chunked)",
          "[gpu][model][prefill][fused]") {
  check_fused_prefill(DeltaPrefill::chunked);
}

TEST_CASE("model prefill with the fused gdn.prefill arm gives the unfused bytes (mma)",
          "[gpu][model][prefill][fused]") {
  check_fused_prefill(DeltaPrefill::mma);
}
