// Tensor parallelism's collectives inside the model step (ModelStepOptions::tp_comm,
// engine/nccl.h), over one GPU: a communicator of one rank sums each mixer's and MLP's output over
// that one rank and picks the greedy token from its one (best logit, token id) pair, so every byte
// must be the plain step's, in captured graphs (the collectives captured into them) and eagerly.
// This is the sharded code path's check on a one-GPU machine; two ranks need two GPUs.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/nccl.h"
#include "kernels/tp_argmax.h"
#include "models/model_step.h"
#include "models/tp_plan.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"

using namespace sg;

namespace {

// A small bf16 step: 8 slots of 64 positions, decode keys up to 4, prefills of `prefill_tokens`.
ModelStepOptions small_step(int prefill_tokens) {
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 64;
  o.max_decode_batch = 4;
  o.max_prefill_tokens = prefill_tokens;
  o.act = DType::bf16;
  return o;
}

}  // namespace

TEST_CASE("tp_argmax: the pick over the ranks' pairs is tp_greedy's, NaN, ties and padding rows included",
          "[gpu][tp]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Few distinct values, so that ties across ranks are common; rank k's ids in [1000 k, 1000 k + 1000).
  const float values[] = {-inf, -2.f, 0.f, 1.5f, 1.5f, 3.f, inf, nan};
  for (int ranks : {1, 2, 3, 4, 8}) {
    const int rows = 300, live = 290, stride = 301;
    CAPTURE(ranks);
    std::mt19937 rng(77 + ranks);
    std::vector<ArgmaxPair> pairs(static_cast<size_t>(ranks) * stride, ArgmaxPair{-1.f, -1});
    for (int k = 0; k < ranks; ++k) {
      for (int r = 0; r < rows; ++r) {
        // NaN rarely (1 in 16), so most rows are decided by value and rank order.
        const float v = rng() % 16 == 0 ? nan : values[rng() % 7];
        pairs[static_cast<size_t>(k) * stride + r] = ArgmaxPair{v, static_cast<int32_t>(1000 * k + rng() % 1000)};
      }
    }
    test::DevBuf dp = test::DevBuf::from_bytes(std::vector<uint8_t>(
        reinterpret_cast<const uint8_t*>(pairs.data()), reinterpret_cast<const uint8_t*>(pairs.data() + pairs.size())));
    test::DevBuf out(rows * 4, 0xA5), dlive = test::DevBuf::from_i32({live});
    TpArgmaxParams p;
    p.pairs = static_cast<const ArgmaxPair*>(dp.data());
    p.ranks = ranks;
    p.rank_stride = stride;
    p.rows = rows;
    p.out = out.as<int32_t>();
    p.live_rows = dlive.as<int32_t>();
    check(tp_argmax(p, nullptr));
    const std::vector<uint8_t> ob = out.download();
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      int32_t got = 0;
      std::memcpy(&got, ob.data() + 4 * r, 4);
      std::vector<std::pair<float, int64_t>> per_rank;
      for (int k = 0; k < ranks; ++k) {
        const ArgmaxPair& q = pairs[static_cast<size_t>(k) * stride + r];
        per_rank.push_back({q.value, q.index});
      }
      CHECK(got == (r < live ? tp_greedy(per_rank) : 0));
    }
  }
  TpArgmaxParams bad;
  test::DevBuf some(64);
  bad.pairs = static_cast<const ArgmaxPair*>(some.data());
  bad.out = some.as<int32_t>();
  bad.ranks = 2;
  bad.rows = 4;
  bad.rank_stride = 3;  // < rows
  CHECK(tp_argmax(bad, nullptr) == cudaErrorInvalidValue);
  bad.rank_stride = 4;
  bad.ranks = 0;
  CHECK(tp_argmax(bad, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("tensor parallel over one rank: the step's collectives give the plain step's bytes", "[gpu][tp][model]") {
  INFO("this build has no NCCL: set NCCL_HOME (or use the CUDA toolkit's) and configure again");
  REQUIRE(nccl_available());
  int device = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  NcclComms comms({device});
  REQUIRE(comms.ranks() == 1);
  CHECK(nccl_ranks(comms.comm(0)) == 1);
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o = small_step(/*prefill_tokens=*/64);
  ModelStep plain(cfg, o);
  o.tp_comm = comms.comm(0);
  ModelStep tp(cfg, o);
  for (ModelStep* s : {&plain, &tp}) s->capture_all(/*for_timing=*/false, /*prefill=*/true);
  for (const int key : tp.keys()) CHECK(tp.manifest(key).unlabelled() == 0);  // NCCL's nodes are labelled
  bool labelled = false;  // the pick over the ranks' pairs is a kernel of its own
  for (const ManifestNode& n : tp.manifest(tp.keys().back()).nodes) labelled |= n.label.op == "tp_argmax";
  CHECK(labelled);

  const std::vector<PrefillRequest> prompts = {{1, {3, 9, 27, 81, 243, 5, 7}, 0}, {5, {11, 13, 17}, 0}};
  for (const RunMode mode : {RunMode::graph, RunMode::eager}) {
    CAPTURE(mode == RunMode::graph ? "graphs" : "eager");
    const PrefillOutput a = plain.prefill(prompts, mode), b = tp.prefill(prompts, mode);
    CHECK(a.logits == b.logits);
    CHECK(a.tokens == b.tokens);
    std::vector<int32_t> ta = a.tokens, tb = b.tokens;
    for (int t = 0; t < 6; ++t) {
      const std::vector<DecodeRequest> da = {{1, ta[0], 7 + t}, {5, ta[1], 3 + t}};
      const std::vector<DecodeRequest> db = {{1, tb[0], 7 + t}, {5, tb[1], 3 + t}};
      const DecodeOutput x = plain.decode(da, mode), y = tp.decode(db, mode);
      CHECK(x.logits == y.logits);
      CHECK(x.tokens == y.tokens);
      ta = x.tokens;
      tb = y.tokens;
    }
  }
}

TEST_CASE("a rank's LM head of vocabulary rows: its logits are the plain step's columns, the pairs pick its token",
          "[gpu][tp][model]") {
  REQUIRE(nccl_available());
  int device = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  const Qwen35Config cfg = preset("tiny-dkdv");  // tied embeddings: a share is the embedding's rows
  REQUIRE(cfg.tie_word_embeddings);
  ModelStepOptions o = small_step(/*prefill_tokens=*/0);
  ModelStep plain(cfg, o);
  // Two halves of the vocabulary, each a step with a one-rank communicator of its own (so the pick
  // over the two happens here, with tp_greedy, where the real collective would gather the pairs).
  const int64_t V = cfg.vocab, half = V / 2;
  NcclComms ca({device}), cb({device});
  o.tp_comm = ca.comm(0);
  o.head_rows = half;
  ModelStep lo(cfg, o);
  o.tp_comm = cb.comm(0);
  o.head_row0 = half;
  o.head_rows = V - half;
  ModelStep hi(cfg, o);
  CHECK(lo.head_width() == half);
  CHECK(hi.head_width() == V - half);
  {  // A share of the vocabulary without a communicator would hand out ids of its own rows.
    ModelStepOptions bad = o;
    bad.tp_comm = nullptr;
    std::string what;
    try {
      ModelStep s(cfg, bad);
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(what.find("needs tp_comm") != std::string::npos);
  }
  for (ModelStep* s : {&plain, &lo, &hi}) s->capture_all();
  const std::vector<DecodeRequest> reqs = {{1, 7, 0}, {5, 11, 0}, {6, 200, 0}};
  for (int t = 0; t < 4; ++t) {
    std::vector<DecodeRequest> step = reqs;
    for (auto& r : step) r.position = t;
    const DecodeOutput w = plain.decode(step, RunMode::graph), a = lo.decode(step, RunMode::graph),
                       b = hi.decode(step, RunMode::graph);
    REQUIRE(a.logits.size() == step.size() * static_cast<size_t>(half));
    REQUIRE(b.logits.size() == step.size() * static_cast<size_t>(V - half));
    for (size_t r = 0; r < step.size(); ++r) {
      CAPTURE(t, r);
      // The head's GEMM over fewer rows may sum in another order: the columns agree to f32 rounding.
      double worst = 0;
      for (int64_t j = 0; j < V; ++j) {
        const float x = w.logits[r * V + j];
        const float y = j < half ? a.logits[r * half + j] : b.logits[r * (V - half) + (j - half)];
        worst = std::max(worst, std::fabs(double(x) - double(y)) / (1.0 + std::fabs(double(x))));
      }
      CHECK(worst < 1e-5);
      CHECK(a.tokens[r] >= 0);
      CHECK(a.tokens[r] < half);  // each half's token is a global id within its rows
      CHECK(b.tokens[r] >= half);
      CHECK(b.tokens[r] < V);
      const float av = a.logits[r * half + a.tokens[r]], bv = b.logits[r * (V - half) + (b.tokens[r] - half)];
      const int64_t pick = tp_greedy({{av, a.tokens[r]}, {bv, b.tokens[r]}});
      const float pv = pick < half ? av : bv, wv = w.logits[r * V + w.tokens[r]];
      const double tol = 1e-4 * (1.0 + std::fabs(double(wv)));
      CHECK(std::fabs(double(pv) - double(wv)) <= tol);  // the pick's logit is the row's largest
      // Another token than the whole head's only where their logits tie within that rounding.
      if (pick != w.tokens[r]) CHECK(std::fabs(double(w.logits[r * V + pick]) - double(wv)) <= tol);
    }
  }
}
