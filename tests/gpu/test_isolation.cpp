// GPU tests of sequence isolation (docs/RELIABILITY.md, "Short of device memory, and isolation"):
// the sequences of one decode or prefill step never read each other's caches.
// - A slot whose caches hold NaN in every value (all bytes 0xFF) leaves every other row's logits,
//   greedy token and slot caches byte for byte as they are when that slot holds ordinary values,
//   and every slot outside the batch untouched (the poisoned row's own outputs may be anything).
// - Each row of a batch equals the same row decoded alone, within the tolerance of the model tests
//   (another graph key: other split counts and summation orders), greedy tokens included where
//   the margin allows.
// - Prefill: a slot whose caches hold NaN leaves the other sequences of the step (whose rows share
//   the attention's query tiles and warps with it) byte for byte as they are without the poison,
//   with the CUDA-core and the tensor-core attention.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "models/model_step.h"
#include "tests/gpu/model_prefill_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/logits.h"
#include "tests/support/tolerance.h"

using namespace sg;

namespace {

struct Run {
  std::vector<float> logits;  // [rows, V]
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> slots;  // every slot's caches after the step
};

// 8 slots of 32 tokens, decode keys up to 8 rows, activations (and KV cache) of `act`.
ModelStepOptions isolation_options(DType act) {
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 8;
  o.act = act;
  return o;
}

// The step's outputs and every slot's caches after it.
template <typename Output>
Run collect(const ModelStep& step, const Output& out) {
  Run r{out.logits, out.tokens, {}};
  for (int s = 0; s < step.options().num_slots; ++s) r.slots.push_back(step.slot_cache_bytes(s));
  return r;
}

Run run_batch(ModelStep& step, const std::vector<uint8_t>& caches, const std::vector<DecodeRequest>& batch) {
  step.set_cache_bytes(caches);
  return collect(step, step.decode(batch, RunMode::graph));
}

// `start` with every byte of `slot`'s caches 0xFF (NaN in bf16 and f32); leaves the step holding it.
std::vector<uint8_t> with_nan_slot(ModelStep& step, const std::vector<uint8_t>& start, int slot) {
  step.set_cache_bytes(start);
  step.set_slot_cache_bytes(slot, std::vector<uint8_t>(step.slot_cache_bytes(slot).size(), 0xFF));
  return step.cache_bytes();
}

}  // namespace

TEST_CASE("decode isolation: NaN in one slot's caches reaches no other row, and rows equal themselves alone",
          "[gpu][model][isolation]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    for (DType act : {DType::bf16, DType::f32}) {
      CAPTURE(name, dtype_name(act));
      const Qwen35Config cfg = preset(name);
      const ModelStepOptions o = isolation_options(act);
      ModelStep step(cfg, o);
      step.capture_all();
      step.randomize_caches(11);  // a history in every slot
      const std::vector<uint8_t> start = step.cache_bytes();
      const int V = cfg.vocab;
      const std::vector<DecodeRequest> batch = {
          {6, 17 % V, 5}, {2, 3 % V, 9}, {4, 40 % V, 2}, {0, 9 % V, 12}, {5, 23 % V, 7}};
      const int poisoned = 2;  // the slot of row 1
      const Run clean = run_batch(step, start, batch);
      const Run dirty = run_batch(step, with_nan_slot(step, start, poisoned), batch);
      for (size_t r = 0; r < batch.size(); ++r) {
        if (batch[r].slot == poisoned) continue;
        CAPTURE(r);
        CHECK(std::memcmp(dirty.logits.data() + r * V, clean.logits.data() + r * V, sizeof(float) * V) == 0);
        CHECK(dirty.tokens[r] == clean.tokens[r]);
        CHECK(dirty.slots[static_cast<size_t>(batch[r].slot)] == clean.slots[static_cast<size_t>(batch[r].slot)]);
      }
      const size_t prow = 1;  // batch[1] is the poisoned slot's row
      REQUIRE(batch[prow].slot == poisoned);
      bool poisoned_row_nonfinite = false;  // the poison did reach its own row (the test is not vacuous)
      for (int v = 0; v < V; ++v) poisoned_row_nonfinite |= !std::isfinite(dirty.logits[prow * V + v]);
      CHECK(poisoned_row_nonfinite);
      for (int s : {1, 3, 7}) {  // outside the batch: untouched
        CAPTURE(s);
        CHECK(dirty.slots[static_cast<size_t>(s)] == clean.slots[static_cast<size_t>(s)]);
      }

      // Each row alone (key 1) against its row of the batch (key 8).
      const double tol = act == DType::f32 ? 1e-4 : 2e-2;
      for (size_t r = 0; r < batch.size(); ++r) {
        CAPTURE(r);
        const Run alone = run_batch(step, start, {batch[r]});
        const float* br = clean.logits.data() + r * V;
        const double e = test::max_normalised_error(alone.logits.data(), br, static_cast<size_t>(V));
        CHECK(e <= tol);
        double max_abs = 0;
        for (int v = 0; v < V; ++v) max_abs = std::max(max_abs, static_cast<double>(std::fabs(br[v])));
        if (test::top2_margin(br, V) > 2.0 * e * max_abs + 1e-6) CHECK(alone.tokens[0] == clean.tokens[r]);
      }
      CHECK(step.eager_fallbacks() == 0);
    }
  }
}

TEST_CASE("prefill isolation: NaN in one slot's caches reaches no other sequence of the step",
          "[gpu][model][isolation]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    for (AttnPrefill ap : {AttnPrefill::simt, AttnPrefill::mma}) {
      for (DType act : {DType::bf16, DType::f32}) {
        if (ap == AttnPrefill::mma && act != DType::bf16) continue;  // the tensor-core kernel reads bf16
        CAPTURE(name, attn_prefill_name(ap), dtype_name(act));
        const Qwen35Config cfg = preset(name);
        ModelStepOptions o = isolation_options(act);
        o.max_prefill_tokens = 64;
        o.max_prefill_seqs = 4;
        o.attn_prefill = ap;
        ModelStep step(cfg, o);
        REQUIRE(step.options().attn_prefill == ap);
        step.capture_all();
        step.randomize_caches(12);  // a history in every slot
        const std::vector<uint8_t> start = step.cache_bytes();
        const int V = cfg.vocab;
        // 5 + 9 + 7 rows: the first query tile holds rows of all three (in mma, its first 16-row warp).
        using test::mp::tokens_for;
        const std::vector<PrefillRequest> batch = {
            {6, tokens_for(6, 5, V), 4}, {2, tokens_for(2, 9, V), 3}, {4, tokens_for(4, 7, V), 2}};
        const int poisoned = 2;  // request 1
        auto run = [&](const std::vector<uint8_t>& caches) {
          step.set_cache_bytes(caches);
          return collect(step, step.prefill(batch, RunMode::graph));
        };
        const Run clean = run(start);
        const Run dirty = run(with_nan_slot(step, start, poisoned));
        for (size_t r : {size_t{0}, size_t{2}}) {
          CAPTURE(r);
          CHECK(std::memcmp(dirty.logits.data() + r * V, clean.logits.data() + r * V, sizeof(float) * V) == 0);
          CHECK(dirty.tokens[r] == clean.tokens[r]);
          CHECK(dirty.slots[static_cast<size_t>(batch[r].slot)] == clean.slots[static_cast<size_t>(batch[r].slot)]);
        }
        bool poisoned_row_nonfinite = false;  // the poison did reach its own row (the test is not vacuous)
        for (int v = 0; v < V; ++v) poisoned_row_nonfinite |= !std::isfinite(dirty.logits[static_cast<size_t>(V) + v]);
        CHECK(poisoned_row_nonfinite);
        for (int sl : {0, 1, 3, 5, 7}) {  // outside the batch: untouched
          CAPTURE(sl);
          CHECK(dirty.slots[static_cast<size_t>(sl)] == clean.slots[static_cast<size_t>(sl)]);
        }
        CHECK(step.eager_fallbacks() == 0);
      }
    }
  }
}
