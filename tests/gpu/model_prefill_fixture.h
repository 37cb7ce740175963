// model_prefill_fixture.h: what the GPU tests of the model's prefill step share
// (test_model_prefill.cpp, test_model_prefill_chunked.cpp): deterministic tokens, the step
// options, the f32 tolerance and the parity checks against the CPU reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ref/mlp_ref.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tests/support/catch.h"
#include "tests/support/tolerance.h"

namespace sg::test::mp {

// max |a - b| / max |b| (tests/support/tolerance.h).
inline double normalised_error(const float* a, const float* b, size_t n) { return test::max_normalised_error(a, b, n); }

// Deterministic token ids for (sequence, position).
inline std::vector<int32_t> tokens_for(int seq, int n, int vocab, int from = 0) {
  std::vector<int32_t> t;
  for (int i = from; i < from + n; ++i) {
    uint64_t z = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(seq * 7919 + i + 1);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    t.push_back(static_cast<int32_t>((z ^ (z >> 29)) % static_cast<uint64_t>(vocab)));
  }
  return t;
}

inline std::vector<int64_t> widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// The general tests name the delta rule's prefill: the scan (the reference-exact one) unless told;
// the chunked form (the `auto` default for these Dk) has its own tests, and the n + m and
// mixed-batch tests run both.
inline ModelStepOptions prefill_options(DType act, DeltaPrefill dp = DeltaPrefill::scan) {
  ModelStepOptions o;
  o.delta_prefill = dp;
  o.num_slots = 8;
  o.max_context = 160;
  o.max_decode_batch = 8;
  o.max_prefill_tokens = 128;
  o.max_prefill_seqs = 4;
  o.act = act;
  o.synthetic = false;
  return o;
}

// The tolerance of GPU f32 vs the f32 CPU reference (normalised max logit error): 1e-4 with an f32
// KV cache (summation orders and expf ulps only), 2e-2 with the bf16 KV cache (k and v rounded to
// 2^-9 before the attention reads them); see test_model_step.cpp.
inline double f32_tolerance(const ModelStep& step) { return step.kv_cache_dtype() == DType::f32 ? 1e-4 : 2e-2; }

// One prefill request of the parity tests: n tokens from position `start` into `slot`.
struct Req {
  int slot, n, start;
};

// Prefills `reqs` in one graphed step and checks each request's last-token logits against every
// reference (each prefilling that request alone) within tol, and its greedy token against the
// logits' argmax; empty requests get zero logits and token 0.
inline void check_prefill(ModelStep& step, const std::vector<ReferenceModel*>& refs, const std::vector<Req>& reqs,
                          int V, double tol) {
  std::vector<PrefillRequest> batch;
  for (const Req& r : reqs) batch.push_back({r.slot, tokens_for(r.slot, r.n, V, r.start), r.start});
  const PrefillOutput g = step.prefill(batch, RunMode::graph);
  REQUIRE(g.logits.size() == reqs.size() * static_cast<size_t>(V));
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i, reqs[i].slot, reqs[i].n, reqs[i].start);
    const float* gr = g.logits.data() + i * V;
    if (reqs[i].n == 0) {
      CHECK(std::all_of(gr, gr + V, [](float x) { return x == 0.0f; }));
      CHECK(g.tokens[i] == 0);
      continue;
    }
    for (size_t k = 0; k < refs.size(); ++k) {
      const std::vector<float> c = refs[k]->prefill({Sequence{reqs[i].slot, widen(batch[i].tokens)}});
      const double e = normalised_error(gr, c.data(), static_cast<size_t>(V));
      INFO("reference " << k << ": normalised max logit error " << e << " (tolerance " << tol << ")");
      CHECK(e <= tol);
    }
    CHECK(g.tokens[i] == ref::argmax(gr, V));
  }
}

// `batch` prefilled eagerly and then through its graph from the same caches: the logits, the
// tokens and the caches must be the same bytes. Returns the caches after the eager run.
inline std::vector<uint8_t> check_prefill_replay(ModelStep& step, const std::vector<PrefillRequest>& batch,
                                                 int bucket = 0) {
  const std::vector<uint8_t> start = step.cache_bytes();
  const PrefillOutput e = step.prefill(batch, RunMode::eager);
  const std::vector<uint8_t> eager_cache = step.cache_bytes();
  step.set_cache_bytes(start);
  const PrefillOutput g = step.prefill(batch, RunMode::graph);
  if (bucket > 0) {
    CHECK(e.bucket == bucket);
    CHECK(g.bucket == bucket);
  }
  CHECK(std::memcmp(e.logits.data(), g.logits.data(), e.logits.size() * sizeof(float)) == 0);
  CHECK(e.tokens == g.tokens);
  CHECK(eager_cache == step.cache_bytes());
  return eager_cache;
}

// Three graphed decode steps on `slots` at positions pos, pos + 1, pos + 2 after the prefills:
// logits within tol of refs[0]; every reference takes the same steps.
inline void check_decode_after(ModelStep& step, const std::vector<ReferenceModel*>& refs,
                               const std::vector<int32_t>& slots, const std::vector<int32_t>& pos, int V, double tol) {
  for (int t = 0; t < 3; ++t) {
    std::vector<DecodeRequest> reqs;
    std::vector<int> rs;
    std::vector<int64_t> rt;
    for (size_t r = 0; r < slots.size(); ++r) {
      const int32_t tok = tokens_for(100 + t, 1, V, static_cast<int>(r))[0];
      reqs.push_back({slots[r], tok, pos[r] + t});
      rs.push_back(slots[r]);
      rt.push_back(tok);
    }
    const DecodeOutput g = step.decode(reqs, RunMode::graph);
    const std::vector<float> c = refs[0]->decode(rs, rt);
    for (size_t k = 1; k < refs.size(); ++k) refs[k]->decode(rs, rt);
    const double e = normalised_error(g.logits.data(), c.data(), c.size());
    INFO("decode step " << t << " after prefill: normalised error " << e);
    CHECK(e <= tol);
  }
}

}  // namespace sg::test::mp
