// The fault reports of replays whose synchronisation is not the step's own, in-process: the error
// handed over is one that leaves the CUDA context usable (cudaErrorInvalidValue), so the test can
// check the message and that the step still runs afterwards. A real fault ends the context; those
// runs are subprocesses (tests/gpu/test_fault_report.cpp).
// - ModelStep::check_replays, which `inspect` and `bench --marginal` hand the marginal costs'
//   replay errors to (graphs/marginal.h on_error): the graph and the group that was disabled;
// - marginal_costs calls no on_error on a healthy graph;
// - GdnDecodeStep::check_step (bench --workload gdn-layer's timing events): the graph that ran last.
// Also a drill on a later run (ModelStepOptions::fault_run, GdnDecodeOptions::fault_run) that is not
// reached: its kernel counts the node's runs in the graphs that hold it, faults on none of them
// and leaves every output byte as a step without the drill does. And a CUPTI timing window that
// an error leaves open (NodeTimerWindow) is abandoned, so the next window starts.
#include <string>
#include <vector>

#include "engine/error.h"
#include "graphs/marginal.h"
#include "graphs/node_timer.h"
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

// A small step of the tiny preset: 8 slots of 32 positions, decode keys 1, 2 and 4, bf16.
ModelStepOptions tiny_options() {
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 4;
  o.act = DType::bf16;
  return o;
}

// One GDN layer's small dims and options (keys 1, 2 and 4; 8 slots), and a batch of 3 rows for them.
const GdnDims kLayer{2, 6, 32, 64, 3};
GdnDecodeOptions layer_options() {
  GdnDecodeOptions o;
  o.max_seqs = 4;
  o.graph_max = 4;
  o.num_slots = 8;
  return o;
}
DecodeBatch three_rows(const GdnDims& d) {
  DecodeBatch b;
  b.slots = {1, 6, 3};
  b.x = test::uniform_bf16(size_t{3} * d.C(), 1, -2.f, 2.f);
  b.a = test::uniform_bf16(size_t{3} * d.Hv, 2, -3.f, 3.f);
  b.b = test::uniform_bf16(size_t{3} * d.Hv, 3, -3.f, 3.f);
  return b;
}

}  // namespace

TEST_CASE("model step: an error of the marginal costs' replays names the graph and the disabled group",
          "[gpu][faults][marginal]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStep step(cfg, tiny_options());
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
  const GdnDims& d = kLayer;
  GdnDecodeStep step(d, layer_options());
  step.capture_all();
  const DecodeBatch b = three_rows(d);
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

TEST_CASE("model step: a drill on a later run counts the node's runs, faults on none of them, changes no byte",
          "[gpu][faults]") {
  const Qwen35Config cfg = preset("tiny");  // layer 4 is a GDN layer
  ModelStepOptions o = tiny_options();
  ModelStep plain(cfg, o);
  o.fault_layer = 4;
  o.fault_op = "conv.update";
  o.fault_run = 1000;  // never reached here
  ModelStep drilled(cfg, o);
  plain.capture_all();
  drilled.capture_all();
  CHECK(drilled.fault_drill_matched());
  CHECK(drilled.fault_drill_runs() == 0);  // captured, not run yet
  CHECK(plain.fault_drill_runs() == 0);    // no drill: no counter
  const std::vector<DecodeRequest> reqs = {{1, 7, 3}, {5, 11, 9}};
  for (int i = 0; i < 5; ++i) {
    const DecodeOutput a = plain.decode(reqs, RunMode::graph);
    const DecodeOutput b = drilled.decode(reqs, RunMode::graph);
    CHECK(a.logits == b.logits);  // the drill's kernel writes nothing before its run
    CHECK(a.tokens == b.tokens);
  }
  CHECK(drilled.fault_drill_runs() == 5);
  drilled.decode(reqs, RunMode::eager);  // eager steps without check_nodes hold no drill
  CHECK(drilled.fault_drill_runs() == 5);
  for (int i = 0; i < 3; ++i) drilled.replay(2);
  CHECK(drilled.fault_drill_runs() == 8);
}

TEST_CASE("gdn-layer step: a drill on a later run counts the node's runs in every graph and changes no byte",
          "[gpu][faults][skeleton]") {
  const GdnDims& d = kLayer;
  GdnDecodeOptions o = layer_options();
  GdnDecodeStep plain(d, o);
  o.fault_op = "delta_rule.decode";  // the default (unfused) gdn.decode arm launches it
  o.fault_run = 1000;
  GdnDecodeStep drilled(d, o);
  for (GdnDecodeStep* s : {&plain, &drilled}) s->capture_all();
  CHECK(drilled.fault_drill_matched());
  CHECK(!plain.fault_drill_matched());
  const DecodeBatch b = three_rows(d);
  for (GdnDecodeStep* s : {&plain, &drilled}) {
    CHECK(s->run(b, RunMode::graph) == 4);
    s->replay(1);
    s->replay(2);
    s->run(b, RunMode::eager);  // no drill in eager steps
  }
  CHECK(drilled.fault_drill_runs() == 3);  // the graphs of keys 4, 1 and 2
  CHECK(plain.fault_drill_runs() == 0);
  CHECK(plain.output_bytes(3) == drilled.output_bytes(3));
  CHECK(plain.ssm_state_bytes() == drilled.ssm_state_bytes());
}

TEST_CASE("node timer: a window an error leaves open is abandoned, so the next one starts and stops",
          "[gpu][faults][cupti]") {
  GdnDecodeStep step(kLayer, layer_options());
  step.capture_all(/*for_timing=*/true);
  try {
    const NodeTimerWindow window;
    step.replay(1);
    step.sync();  // its records are complete, in CUPTI's buffers
    throw Error("an error between start and stop");
  } catch (const Error&) {
  }
  NodeTimerWindow window;  // NodeTimer::start() refuses to start a running timer
  step.replay(1);
  step.sync();
  const std::vector<KernelRecord> records = window.stop();
  int unmatched = 0;
  const std::vector<NodeStats> stats = aggregate(step.manifest(1), records, &unmatched);
  CHECK(unmatched == 0);  // none of the abandoned window's records
  REQUIRE(!stats.empty());
  for (const NodeStats& s : stats) CHECK(s.calls == 1);  // one replay's records only
}
