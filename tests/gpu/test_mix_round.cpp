// GPU tests of the mix-round setting (models/step_settings.h): where the projections before each
// RMSNorm (attn.o_proj, gdn.out_proj, mlp.down) round their output. `norm` writes it in f32 on steps
// of at most 32 rows and lets the norm round it; on the skinny kernel that is the same arithmetic,
// so the same bytes as `gemm`; on cuBLASLt the algorithm chosen for an f32 output may sum in another
// order, so the bytes agree within the GEMM tolerance, and replay equals eager byte for byte.
// `partials` (the norm sums a split skinny GEMM's partials) gives gemm's bytes; `residual` too on
// the skinny kernel, and where cublasGemmEx runs a residual projection it adds the product to the
// residual stream (within the GEMM tolerance).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "models/model_step.h"
#include "tests/support/byte_diff_count.h"
#include "tests/support/catch.h"
#include "tests/support/tolerance.h"

using namespace sg;

namespace {

using test::count_diff;

int32_t token_at(int step, int row, int vocab) { return static_cast<int32_t>((37 * step + 11 * row + 3) % vocab); }

// 8 slots of 32 tokens, decode keys up to 8 rows and prefill buckets up to 64 tokens (those of more
// than 32 rows round in the GEMM under either setting).
ModelStepOptions small_step(GemmKind gemm, MixRound mix) {
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 8;
  o.max_prefill_tokens = 64;
  o.max_prefill_seqs = 4;
  o.act = DType::bf16;
  o.gemm = gemm;
  o.mix_round = mix;
  return o;
}

// How many of a manifest's nodes of `op` write an f32 output: their byte label holds the output's
// rows x N x 4 bytes (the label is x + W + y bytes).
int f32_outputs(const Manifest& m, const std::string& op, double x_bytes_and_w, double y_f32) {
  int n = 0;
  for (const auto& node : m.nodes) {
    if (node.label.op == op && node.label.bytes == x_bytes_and_w + y_f32) ++n;
  }
  return n;
}

// mlp.down writes [rows, H] f32 once a layer in every decode graph of `norm`, bf16 in `gemm`'s (a
// launch's label sits on its first kernel node, so a library GEMM with a reduce kernel counts once).
void check_down_outputs(const Qwen35Config& c, const ModelStep& gemm, const ModelStep& norm) {
  for (int key : norm.keys()) {
    CAPTURE(key);
    const double xw = key * double(c.intermediate) * 2 + double(c.hidden) * c.intermediate * 2;
    CHECK(f32_outputs(norm.manifest(key), "mlp.down", xw, key * double(c.hidden) * 4) == c.layers);
    CHECK(f32_outputs(gemm.manifest(key), "mlp.down", xw, key * double(c.hidden) * 4) == 0);
  }
}

// Both steps' prefills of at most 32 tokens (26 tokens in the bucket of 32, which fills the f32
// buffer's 32 rows, then 13 in the bucket of 16, whose caches the decode steps continue from) and 4
// decode steps (3 live rows of key 4), graphed and eager: the same logits, tokens and caches.
void check_same_bytes(const Qwen35Config& c, ModelStep& a, ModelStep& b) {
  std::vector<int32_t> twelve(12), fourteen(14);
  for (size_t i = 0; i < twelve.size(); ++i) twelve[i] = token_at(7, static_cast<int>(i), c.vocab);
  for (size_t i = 0; i < fourteen.size(); ++i) fourteen[i] = token_at(8, static_cast<int>(i), c.vocab);
  const std::vector<PrefillRequest> full = {{0, twelve, 0}, {7, fourteen, 0}};
  const std::vector<PrefillRequest> pre = {{1, {5, 9, 2, 7}, 0}, {4, {3, 3, 8}, 0}, {6, {11, 1, 4, 4, 2, 9}, 0}};
  for (const auto* batch : {&full, &pre}) {
    for (RunMode mode : {RunMode::graph, RunMode::eager}) {
      const PrefillOutput pa = a.prefill(*batch, mode), pb = b.prefill(*batch, mode);
      CHECK(pa.bucket == (batch == &full ? 32 : 16));
      CHECK(std::memcmp(pa.logits.data(), pb.logits.data(), pa.logits.size() * sizeof(float)) == 0);
      CHECK(pa.tokens == pb.tokens);
    }
  }
  for (int t = 0; t < 4; ++t) {
    CAPTURE(t);
    std::vector<DecodeRequest> reqs = {
        {1, token_at(t, 0, c.vocab), 4 + t}, {4, token_at(t, 1, c.vocab), 3 + t}, {6, token_at(t, 2, c.vocab), 6 + t}};
    const auto da = a.decode(reqs, RunMode::graph);
    const auto db = b.decode(reqs, t % 2 ? RunMode::eager : RunMode::graph);
    CHECK(std::memcmp(da.logits.data(), db.logits.data(), da.logits.size() * sizeof(float)) == 0);
    CHECK(da.tokens == db.tokens);
  }
  CHECK(count_diff(a.cache_bytes(), b.cache_bytes()) == 0);
}

// The tiny preset with a hidden size whose residual projections the skinny kernel runs with their
// K split (the norm's 16-byte kernel takes rows of 768).
Qwen35Config split_k_model() {
  Qwen35Config c = preset("tiny");
  c.hidden = 768;
  c.intermediate = 2048;  // mlp.down [768, 2048]: K split in 8
  c.Hq = 8;
  c.D = 64;                          // attn.o_proj [768, 512]: in 2
  c.gdn = GdnDims{2, 8, 32, 64, 4};  // gdn.out_proj [768, 512]: in 2
  c.validate("test");
  return c;
}

}  // namespace

TEST_CASE("mix-round norm on the skinny kernel: the bytes of gemm, prefill and decode, graphed and eager",
          "[gpu][model][mix_round]") {
  const Qwen35Config c = preset("tiny");
  ModelStep gemm(c, small_step(GemmKind::skinny, MixRound::gemm));
  ModelStep norm(c, small_step(GemmKind::skinny, MixRound::norm));
  CHECK(gemm.options().mix_round == MixRound::gemm);
  CHECK(norm.options().mix_round == MixRound::norm);
  // `auto` resolves to residual (partials on the skinny kernel, measured faster in decode; the
  // product added in cublasGemmEx, measured faster in prefill; the norm form measured no faster).
  CHECK(ModelStep(c, small_step(GemmKind::skinny, MixRound::automatic)).options().mix_round == MixRound::residual);
  gemm.capture_all();
  norm.capture_all();
  check_down_outputs(c, gemm, norm);
  check_same_bytes(c, gemm, norm);
  // A prefill bucket of more than 32 tokens rounds in the GEMM under both settings: the same bytes.
  std::vector<PrefillRequest> longer;
  for (int s = 0; s < 2; ++s) {  // 2 x 20 tokens (the context holds 32)
    std::vector<int32_t> toks(20);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = token_at(9 + s, static_cast<int>(i), c.vocab);
    longer.push_back({2 + s, toks, 0});
  }
  const PrefillOutput a = gemm.prefill(longer, RunMode::graph);
  const PrefillOutput b = norm.prefill(longer, RunMode::graph);
  CHECK(a.bucket > 32);
  CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
}

TEST_CASE("mix-round norm on cuBLASLt: replay equals eager, and the logits agree with gemm's within tolerance",
          "[gpu][model][mix_round][gemm]") {
  const Qwen35Config c = preset("tiny");
  ModelStep gemm(c, small_step(GemmKind::lt, MixRound::gemm));
  ModelStep norm(c, small_step(GemmKind::lt, MixRound::norm));
  gemm.capture_all();  // the warm-up tunes every projection shape (the f32 ones on their own)
  norm.capture_all();
  check_down_outputs(c, gemm, norm);
  norm.randomize_caches(11);
  gemm.set_cache_bytes(norm.cache_bytes());
  const std::vector<uint8_t> start = norm.cache_bytes();
  std::vector<DecodeRequest> reqs;
  for (int r = 0; r < 5; ++r) reqs.push_back({r + 2, token_at(0, r, c.vocab), 3 + r});  // slots 2 .. 6
  const int re = norm.enqueue(reqs, RunMode::eager);
  const auto le = norm.logits_bytes(re);
  const auto ce = norm.cache_bytes();
  norm.set_cache_bytes(start);
  const int rg = norm.enqueue(reqs, RunMode::graph);
  CHECK(rg == re);
  CHECK(count_diff(le, norm.logits_bytes(rg)) == 0);
  CHECK(count_diff(ce, norm.cache_bytes()) == 0);
  CHECK(norm.eager_fallbacks() == 0);
  // Against gemm's step on the same caches: the same projections, summed in cuBLASLt's order for
  // each output dtype; the logits within the GEMM tolerance of the model tests.
  const auto a = gemm.decode(reqs, RunMode::graph);
  norm.set_cache_bytes(start);
  const auto b = norm.decode(reqs, RunMode::graph);
  REQUIRE(a.logits.size() == b.logits.size());
  const double e = test::max_normalised_error(b.logits.data(), a.logits.data(), a.logits.size());
  INFO("normalised max logit error " << e);
  CHECK(e <= 2e-2);
}

// mix-round partials on a model whose residual projections split K on the skinny kernel and whose
// rows the norm's 16-byte kernel takes (hidden 768; the tiny preset's 64 does not): every such
// projection leaves its partials and the norm after sums them, with gemm's bytes in prefill and
// decode, graphed and eager, caches included.
TEST_CASE("mix-round partials: the RMSNorm sums the skinny GEMM's split-K partials, the bytes of gemm",
          "[gpu][model][mix_round]") {
  const Qwen35Config c = split_k_model();
  ModelStep gemm(c, small_step(GemmKind::skinny, MixRound::gemm));
  ModelStep part(c, small_step(GemmKind::skinny, MixRound::partials));
  CHECK(part.options().mix_round == MixRound::partials);
  gemm.capture_all();
  part.capture_all();
  auto count = [](const Manifest& m, const std::string& op, const std::string& arm_part) {
    int n = 0;
    for (const auto& node : m.nodes) n += node.label.op == op && node.label.arm.find(arm_part) != std::string::npos;
    return n;
  };
  const int attn = c.num_full_attention(), gdn = c.num_linear_attention();
  for (int key : part.keys()) {
    CAPTURE(key);
    const Manifest& m = part.manifest(key);
    CHECK(count(m, "mlp.down", "partials") == c.layers);
    CHECK(count(m, "gdn.out_proj", "partials") == gdn);
    CHECK(count(m, "attn.o_proj", "partials") == attn);
    CHECK(count(m, "rmsnorm.post_attention", "partials") == c.layers);
    CHECK(count(m, "rmsnorm.input", "partials") == c.layers - 1);  // the first layer's reads the embedding
    CHECK(count(m, "rmsnorm.final", "partials") == 1);
    CHECK(count(gemm.manifest(key), "mlp.down", "partials") == 0);
  }
  check_same_bytes(c, gemm, part);
}

// mix-round residual on the same model: steps of at most 32 rows run the residual projections on the
// skinny kernel as partials (gemm's bytes); a prefill bucket of more than 32 rows runs them on
// cublasGemmEx, which adds each product to the residual stream in place (rounded as cuBLAS's kernel
// does), and the norm after reads the stream alone: within the GEMM tolerance of partials' logits there,
// replay equal to eager, every such node labelled.
TEST_CASE("mix-round residual: cuBLAS adds the residual projections to the stream, the norm reads it alone",
          "[gpu][model][mix_round]") {
  const Qwen35Config c = split_k_model();
  ModelStep part(c, small_step(GemmKind::mixed, MixRound::partials));
  ModelStep res(c, small_step(GemmKind::mixed, MixRound::residual));
  CHECK(res.options().mix_round == MixRound::residual);
  part.capture_all();
  res.capture_all();
  auto count = [](const Manifest& m, const std::string& op, const std::string& arm) {
    int n = 0;
    for (const auto& node : m.nodes) n += node.label.op == op && node.label.arm == arm;
    return n;
  };
  const int attn = c.num_full_attention(), gdn = c.num_linear_attention();
  bool large = false;
  for (int b : res.prefill_keys()) {
    CAPTURE(b);
    const Manifest& m = res.prefill_manifest(b);
    const int want = b > 32 ? 1 : 0;  // cublasGemmEx runs the buckets of more than 32 rows
    large |= b > 32;
    CHECK(count(m, "mlp.down", "cublas +residual") == want * c.layers);
    CHECK(count(m, "gdn.out_proj", "cublas +residual") == want * gdn);
    CHECK(count(m, "attn.o_proj", "cublas +residual") == want * attn);
    CHECK(count(m, "rmsnorm.post_attention", "x summed in the GEMM") == want * c.layers);
    CHECK(count(m, "rmsnorm.input", "x summed in the GEMM") == want * (c.layers - 1));
    CHECK(count(m, "rmsnorm.final", "x summed in the GEMM") == want);
    CHECK(count(part.prefill_manifest(b), "mlp.down", "cublas +residual") == 0);
  }
  REQUIRE(large);
  for (int key : res.keys()) CHECK(count(res.manifest(key), "mlp.down", "cublas +residual") == 0);
  // Steps of at most 32 rows: partials' bytes, prefill and decode, graphed and eager.
  check_same_bytes(c, part, res);
  // A bucket of more than 32 rows (2 x 20 tokens): replay equals eager, and the logits are within
  // the GEMM tolerance of partials' (one rounding of each residual sum instead of two).
  std::vector<PrefillRequest> longer;
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> toks(20);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = token_at(9 + s, static_cast<int>(i), c.vocab);
    longer.push_back({2 + s, toks, 0});
  }
  const PrefillOutput g = res.prefill(longer, RunMode::graph);
  const PrefillOutput e = res.prefill(longer, RunMode::eager);
  CHECK(g.bucket > 32);
  CHECK(std::memcmp(g.logits.data(), e.logits.data(), g.logits.size() * sizeof(float)) == 0);
  CHECK(g.tokens == e.tokens);
  const PrefillOutput p = part.prefill(longer, RunMode::graph);
  REQUIRE(p.logits.size() == g.logits.size());
  // Whether cuBLAS rounds the product before it adds the stream depends on its kernel
  // (tools/probes/cublas_beta_probe.cu: on most shapes it does, which is partials' bytes), so the
  // logits may equal partials'. The norm reads the stream alone: had the GEMM not added the product
  // to it, every residual projection would be missing and the logits far outside the tolerance.
  const double err = test::max_normalised_error(g.logits.data(), p.logits.data(), p.logits.size());
  INFO("normalised max logit error against partials " << err);
  CHECK(err <= 2e-2);
}
