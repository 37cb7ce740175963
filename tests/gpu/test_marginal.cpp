// GPU tests of the marginal costs (graphs/marginal.h) on a model step's decode graph, with PDL on
// (programmatic edges to and from the disabled nodes):
// - one group per op family, each timed once (progress in order), a positive baseline;
// - afterwards every node is enabled again: the graph gives the bytes it gave before.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "graphs/marginal.h"
#include "models/model_step.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("marginal costs: one timed group per op family, and the graph is whole afterwards", "[gpu][marginal]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 4;
  o.act = DType::bf16;
  ModelStep step(cfg, o);
  step.capture_all();
  step.randomize_caches(5);
  const std::vector<uint8_t> start = step.cache_bytes();
  const std::vector<DecodeRequest> reqs = {{1, 7, 3}, {5, 11, 9}, {2, 13, 0}};
  const DecodeOutput before = step.decode(reqs, RunMode::graph);
  const int key = 4;
  const Manifest& m = step.manifest(key);
  std::set<std::string> ops;
  for (const auto& n : m.nodes) ops.insert(n.label.op);
  std::vector<std::pair<int, int>> calls;
  std::set<std::string> named;
  const MarginalReport r = marginal_costs(
      step.graph(key), m, step.stream(), [](const ManifestNode& n) { return n.label.op; }, 2, 3,
      [&](int done, int total, const std::string& name) {
        calls.emplace_back(done, total);
        named.insert(name);
      });
  CHECK(r.groups.size() == ops.size());
  CHECK(r.baseline_ms > 0);
  REQUIRE(calls.size() == ops.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].first == static_cast<int>(i) + 1);
    CHECK(calls[i].second == static_cast<int>(ops.size()));
  }
  CHECK(named == ops);
  for (const auto& g : r.groups) CHECK(g.without_ms > 0);
  // Every node enabled again: the same step from the same caches gives the same bytes.
  step.set_cache_bytes(start);
  const DecodeOutput after = step.decode(reqs, RunMode::graph);
  CHECK(std::memcmp(before.logits.data(), after.logits.data(), before.logits.size() * sizeof(float)) == 0);
  CHECK(before.tokens == after.tokens);
}
