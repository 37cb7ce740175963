// The fault reports of replays whose synchronisation is not the step's own, in-process: the error
// handed over is one that leaves the CUDA context usable (cudaErrorInvalidValue), so the test can
// check the message and that the step still runs afterwards. A real fault ends the context; those
// runs are subprocesses (tests/gpu/test_fault_report.cpp).
// - ModelStep::check_replays, which `inspect` and `bench --marginal` hand the marginal costs'
//   replay errors to (graphs/marginal.h on_error): the graph and the group that was disabled;
// - marginal_costs calls no on_error on a healthy graph;
// - GdnDecodeStep::check_step (bench --workload gdn-layer's timing events): the graph that ran last.
#include <string>
#include <vector>

#include "engine/error.h"
#include "graphs/marginal.h"
#include "models/gdn_decode_step.h"
#include "models/model_step.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;

namespace {

// The KernelFault's message of `body` ("" when it throws none).
template <class Body>
std::string fault_of(const Body& body) {
  try {
    body();
  } catch (const KernelFault& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("model step: an error of the marginal costs' replays names the graph and the disabled group",
          "[gpu][faults][marginal]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 4;
  o.act = DType::bf16;
  ModelStep step(cfg, o);
  step.capture_all();
  const std::vector<DecodeRequest> reqs = {{1, 7, 3}, {5, 11, 9}};
  const DecodeOutput before = step.decode(reqs, RunMode::graph);
  const int key = 4;
  int errors = 0;  // a healthy graph: the hook is never called
  const MarginalReport r = marginal_costs(
      step.graph(key), step.manifest(key), step.stream(), [](const ManifestNode& n) { return n.label.op; }, 1, 2, {},
      {}, [&](cudaError_t, const std::string&) { ++errors; });
  CHECK(errors == 0);
  CHECK(!r.groups.empty());

  const std::string m = fault_of(
      [&] { step.check_replays(GraphKey::decode(key), cudaErrorInvalidValue, marginal_replay_note("postconv")); });
  CAPTURE(m);
  CHECK(contains(m,
                 "the graph decode 4 failed while it ran (replayed for its marginal costs, with the nodes of group "
                 "'postconv' disabled): cudaErrorInvalidValue"));
  CHECK(!contains(m, "the CUDA context is lost"));  // the error was not sticky
  CHECK(contains(m, "`generate --check-nodes`"));
  CHECK(fault_of([&] { step.check_replays(GraphKey::decode(key), cudaSuccess, "unused"); }).empty());
  // The step goes on: the same step from the same caches is not what the test checks, only that it runs.
  const DecodeOutput after = step.decode(reqs, RunMode::graph);
  CHECK(after.tokens.size() == before.tokens.size());
}

TEST_CASE("gdn-layer step: an error after its replays names the graph that ran last", "[gpu][faults][skeleton]") {
  const GdnDims d{2, 6, 32, 64, 3};
  GdnDecodeOptions o;
  o.max_seqs = 4;
  o.graph_max = 4;
  o.num_slots = 8;
  GdnDecodeStep step(d, o);
  step.capture_all();
  DecodeBatch b;
  b.slots = {1, 6, 3};
  b.x = test::uniform_bf16(size_t{3} * d.C(), 1, -2.f, 2.f);
  b.a = test::uniform_bf16(size_t{3} * d.Hv, 2, -3.f, 3.f);
  b.b = test::uniform_bf16(size_t{3} * d.Hv, 3, -3.f, 3.f);
  CHECK(step.run(b, RunMode::graph) == 4);
  step.replay(2);
  step.sync();  // no fault
  const std::string m = fault_of([&] { step.check_step(cudaErrorInvalidValue); });
  CAPTURE(m);
  CHECK(contains(m, "the graph decode 2 failed while it ran: cudaErrorInvalidValue"));
  CHECK(!contains(m, "the CUDA context is lost"));
  CHECK(contains(m, "`generate --check-nodes` with the same --preset and arms"));
  step.run(b, RunMode::eager);
  const std::string eager = fault_of([&] { step.check_step(cudaErrorInvalidValue); });
  CHECK(contains(eager, "the eager step decode 4 failed while it ran"));
  CHECK(step.output_bytes(3).size() == size_t{3} * d.Hv * d.Dv * 2);  // bf16 output, the step still runs
}
