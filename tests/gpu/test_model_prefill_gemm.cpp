// GPU tests of the model's prefill projections on the own wgmma GEMM (--gemm wgmma,
// kernels/gemm_wgmma.h): the manifest of every prefill key of more than 32 tokens shows gate_up
// with SwiGLU in its epilogue (no swiglu node), in_proj and qkv_proj on the wgmma kernel in clusters
// of two and the residual projections on cuBLAS adding into the stream; keys of at most 32 tokens
// run as under mixed; the step matches the bf16 CPU reference within the bf16 model tolerance;
// graph replay equals eager byte for byte; --swiglu kernel keeps the swiglu node and gives the
// fused form's bytes.
#include <string>
#include <vector>

#include "models/model_step.h"
#include "models/reference_model.h"
#include "tests/support/catch.h"
#include "tests/support/logits.h"

#include "tests/gpu/model_prefill_fixture.h"

using namespace sg;
using namespace sg::test::mp;

namespace {

bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return sm90a_device(d.cc_major, d.cc_minor);
}

ModelStepOptions wgmma_options(SwigluMode sw = SwigluMode::automatic) {
  ModelStepOptions o = prefill_options(DType::bf16);
  o.gemm = GemmKind::wgmma;
  o.swiglu = sw;
  return o;
}

}  // namespace

TEST_CASE("model prefill with gemm = wgmma: the projections named in the manifest, SwiGLU fused, replay == eager",
          "[gpu][model][prefill][gemm][gemm_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma GEMM needs compute capability 9.0");
    return;
  }
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o = wgmma_options();
  o.synthetic = true;
  ModelStep step(cfg, o);
  REQUIRE(step.options().gemm == GemmKind::wgmma);
  step.capture_all();
  int big_keys = 0;
  for (int b : step.prefill_keys()) {
    CAPTURE(b);
    int fused = 0, plain = 0, swiglu_nodes = 0, residual = 0, other = 0;
    for (const auto& n : step.prefill_manifest(b).nodes) {
      const std::string& op = n.label.op;
      if (op == "swiglu") ++swiglu_nodes;
      if (op == "mlp.gate_up" && n.label.arm == "wgmma +swiglu") ++fused;
      if ((op == "gdn.in_proj" || op == "attn.qkv_proj") && n.label.arm == "wgmma") {
        ++plain;
        CHECK(n.kernel.find("gemm_wgmma_kernel") != std::string::npos);
        CHECK(n.cluster.x == 2);
      }
      if (op == "mlp.down" || op == "gdn.out_proj" || op == "attn.o_proj") {
        ++(n.label.arm == "cublas +residual" ? residual : other);
      }
    }
    if (b > kGemmLtMaxRows) {
      ++big_keys;
      CHECK(fused == cfg.layers);
      CHECK(swiglu_nodes == 0);
      CHECK(plain == cfg.layers);  // one in_proj or qkv_proj a layer
      CHECK(other == 0);
    } else {
      CHECK(fused + plain == 0);  // mixed's choices up to 32 tokens
    }
    CHECK(residual + other > 0);
  }
  REQUIRE(big_keys > 0);
  step.randomize_caches(3);
  // 21 + 40 tokens: the 64-token key.
  check_prefill_replay(step, {{3, tokens_for(1, 21, cfg.vocab), 10}, {6, tokens_for(3, 40, cfg.vocab), 0}}, 64);
  CHECK(step.eager_fallbacks() == 0);
}

// The bf16 model tolerance of test_model_prefill.cpp (normalised max logit error <= 3e-2 against
// the CPU reference emulating a bf16 step), and the fused SwiGLU's bytes against --swiglu kernel.
TEST_CASE("model prefill with gemm = wgmma matches the bf16 CPU reference, --swiglu kernel gives the same bytes",
          "[gpu][model][prefill][bf16][gemm_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma GEMM needs compute capability 9.0");
    return;
  }
  constexpr double kTol = 3e-2;
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 21);
    ModelStep fused(cfg, wgmma_options()), apart(cfg, wgmma_options(SwigluMode::kernel));
    fused.load_host_weights(w);
    apart.load_host_weights(w);
    fused.capture_all();
    apart.capture_all();
    ReferenceOptions ro;
    ro.act = ref::Store::bf16;
    ReferenceModel ref(cfg, w, 8, 160, ro);
    const int V = cfg.vocab;
    const std::vector<int> slots = {2, 6, 1}, lens = {5, 70, 1};  // 76 tokens: more than 32 rows
    std::vector<PrefillRequest> batch;
    for (size_t i = 0; i < slots.size(); ++i) batch.push_back({slots[i], tokens_for(slots[i], lens[i], V), 0});
    const PrefillOutput a = fused.prefill(batch, RunMode::graph), b = apart.prefill(batch, RunMode::graph);
    REQUIRE(a.bucket > kGemmLtMaxRows);
    CHECK(a.logits == b.logits);
    CHECK(a.tokens == b.tokens);
    CHECK(fused.cache_bytes() == apart.cache_bytes());
    for (size_t i = 0; i < slots.size(); ++i) {
      CAPTURE(i);
      const std::vector<float> c = ref.prefill({Sequence{slots[i], widen(batch[i].tokens)}});
      const double e = normalised_error(a.logits.data() + i * V, c.data(), static_cast<size_t>(V));
      INFO("normalised max logit error " << e << " (tolerance " << kTol << ")");
      CHECK(e <= kTol);
    }
  }
}
