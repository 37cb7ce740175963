// A kernel that faults while a step runs, found with `--fault-after` (a fault drill: a kernel that
// stores to an invalid address right after the named node). In a replayed graph the error names
// the graph and how to find the node (generate, and bench, inspect, soak and ab, whose replays are
// synchronised by events, CUPTI or downloads of their own; ab also names the side); with generate
// --check-nodes (eager steps, synchronised after every node) it names the node: layer, op and arm.
// A drill on a later run (LAYER:OP@RUN) faults deep in a run: in the marginal costs' replays (the
// report names the group disabled then), in the gdn-layer workload's per-node replays, on a soak's
// later replay; a run it never reaches is an error, after the results, that says how many times
// the node ran.
// The program runs as a subprocess (the GPU visible): the fault ends its CUDA context.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

namespace {

// `stepgraph` with `args`, then `extra`.
ChildResult run_stepgraph(std::vector<std::string> args, const std::vector<std::string>& extra) {
  args.insert(args.begin(), SG_STEPGRAPH_BIN);
  args.insert(args.end(), extra.begin(), extra.end());
  return run_program_on_gpu(args, 240);
}

ChildResult run_generate(const std::vector<std::string>& extra) {
  return run_stepgraph({"generate", "--preset", "tiny", "--tokens", "1,2,3,4,5", "--max-new", "4", "--json"}, extra);
}

// Short runs of the tiny preset: 2 sequences of 16 tokens (decode keys 1 and 2, prefill bucket 32).
ChildResult run_bench(const std::vector<std::string>& extra, const std::string& node_replays = "1") {
  return run_stepgraph({"bench", "--preset", "tiny", "--max-seqs", "2", "--context", "16", "--replays", "2", "--reps",
                        "1", "--node-replays", node_replays},
                       extra);
}

ChildResult run_inspect(const std::vector<std::string>& extra) {
  return run_stepgraph({"inspect", "--preset", "tiny", "--max-seqs", "2", "--context", "16", "--replays", "2", "--reps",
                        "1", "--node-replays", "2", "--no-marginal"},
                       extra);
}

ChildResult run_soak(const std::vector<std::string>& extra) {
  return run_stepgraph(
      {"soak", "--preset", "tiny", "--max-seqs", "2", "--replays", "20", "--period", "8", "--check-every", "10"},
      extra);
}

// Two sides of the tiny preset on one short graph: 2 sequences of 16 tokens (decode key 2, prefill
// bucket 32), 3 repetitions of 2 replays and 1 CUPTI replay each.
ChildResult run_ab(const std::vector<std::string>& extra) {
  return run_stepgraph({"ab", "--preset", "tiny", "--max-seqs", "2", "--context", "16", "--reps", "3", "--replays", "2",
                        "--node-replays", "1"},
                       extra);
}

// A replayed graph's fault, reported as generate reports it: the graph, the CUDA error, the lost
// context, the way to the node, and no source location. `side`: ab's side label and ": " before
// the graph ("side B (swiglu=kernel): "), empty for the other commands. `after`: what follows
// "failed while it ran" (the error, or for replays that were not the step's own what they did,
// " (replayed for its marginal costs, ...): cudaErrorIllegalAddress").
void check_graph_fault(const ChildResult& r, const std::string& graph, const std::string& side = "",
                       const std::string& after = ": cudaErrorIllegalAddress") {
  INFO(r.describe() << "\n" << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 1);
  CHECK(r.out.find("stepgraph: error: " + side + "the graph " + graph + " failed while it ran" + after) !=
        std::string::npos);
  CHECK(r.out.find("the CUDA context is lost") != std::string::npos);
  CHECK(r.out.find("`generate --check-nodes`") != std::string::npos);
  CHECK(r.out.find(".cpp:") == std::string::npos);  // a sentence, not a source location
  CHECK(r.out.find(".cu:") == std::string::npos);
  CHECK(r.out.find("CUDA error 700") == std::string::npos);  // not the bare error of a check()
}

// generate's JSON output (the text from the first '{' to the last '}').
nlohmann::json json_of(const std::string& out) {
  const size_t b = out.find('{'), e = out.rfind('}');
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  return nlohmann::json::parse(out.substr(b, e - b + 1));
}

}  // namespace

TEST_CASE("generate: a kernel fault inside a replayed graph names the graph, --check-nodes names the node",
          "[gpu][cli][faults]") {
  // Layer 1 of tiny is a GDN layer: its delta_rule.prefill node runs in the prefill step.
  SECTION("replayed graph") {
    const ChildResult r = run_generate({"--fault-after", "1:delta_rule.prefill"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("the graph prefill") != std::string::npos);
    CHECK(r.out.find("failed while it ran: cudaErrorIllegalAddress") != std::string::npos);
    CHECK(r.out.find("--check-nodes") != std::string::npos);
    CHECK(r.out.find(".cpp:") == std::string::npos);  // a sentence, not a source location
  }
  SECTION("eager steps checked node by node") {
    const ChildResult r = run_generate({"--fault-after", "1:delta_rule.prefill", "--check-nodes"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("layer 1 delta_rule.prefill (arm ") != std::string::npos);
    CHECK(r.out.find("the kernel failed while it ran: cudaErrorIllegalAddress") != std::string::npos);
  }
  SECTION("a drill in the decode steps: the node of layer 4's conv.update") {
    const ChildResult r = run_generate({"--fault-after", "4:conv.update", "--check-nodes"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("layer 4 conv.update (arm ") != std::string::npos);
  }
  SECTION("a drill whose node no step has is an error, not a silent pass") {
    const ChildResult r = run_generate({"--fault-after", "2:conv.update"});  // layer 2: attention
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("--fault-after 2:conv.update: no node of the captured graphs or checked steps is layer 2 op "
                     "'conv.update'") != std::string::npos);
  }
}

TEST_CASE("generate --check-nodes: the same tokens as the replayed graphs", "[gpu][cli][faults]") {
  const ChildResult graphed = run_generate({});
  const ChildResult checked = run_generate({"--check-nodes"});
  INFO(graphed.describe() << "\n" << graphed.out.substr(0, 2000) << "\n" << checked.out.substr(0, 2000));
  REQUIRE(graphed.end == ChildResult::End::exited);
  REQUIRE(checked.end == ChildResult::End::exited);
  CHECK(graphed.code == 0);
  CHECK(checked.code == 0);
  const nlohmann::json g = json_of(graphed.out), c = json_of(checked.out);
  CHECK(g.at("generated").size() == 4);
  CHECK(c.at("generated") == g.at("generated"));
  CHECK(c.at("detail").get<std::string>().find("every kernel node synchronised and checked") != std::string::npos);
}

TEST_CASE("bench: a kernel fault inside a timed graph names the graph", "[gpu][cli][faults]") {
  SECTION("decode: the largest key's graph is timed first") {
    check_graph_fault(run_bench({"--phase", "decode", "--fault-after", "4:conv.update"}), "decode 2");
  }
  SECTION("prefill") {
    check_graph_fault(run_bench({"--phase", "prefill", "--fault-after", "1:delta_rule.prefill"}), "prefill 32");
  }
  SECTION("without per-node timing (--node-replays 0)") {
    check_graph_fault(run_bench({"--phase", "decode", "--fault-after", "4:conv.update"}, "0"), "decode 2");
  }
  SECTION("a drill whose node no captured graph has is an error before any timing") {
    const ChildResult r = run_bench({"--phase", "decode", "--fault-after", "1:delta_rule.prefill"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("--fault-after 1:delta_rule.prefill: no node of the captured graphs is layer 1 op "
                     "'delta_rule.prefill'") != std::string::npos);
    CHECK(r.out.find("graph decode b=") == std::string::npos);  // nothing was timed
  }
}

TEST_CASE("inspect: a kernel fault inside the inspected graph names the graph", "[gpu][cli][faults]") {
  SECTION("decode") {
    check_graph_fault(run_inspect({"--key", "decode", "--fault-after", "4:conv.update"}), "decode 2");
  }
  SECTION("prefill") {
    check_graph_fault(run_inspect({"--key", "prefill", "--fault-after", "1:delta_rule.prefill"}), "prefill 32");
  }
  SECTION("without a drill the same short inspect passes and says what the clocks did") {
    const ChildResult r = run_inspect({"--key", "decode"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 0);
    CHECK(r.out.find("marginal us") != std::string::npos);
    CHECK((r.out.find("clocks during the timing: SM ") != std::string::npos ||
           r.out.find("clocks during the timing: not sampled (") != std::string::npos));
  }
}

TEST_CASE("soak: a kernel fault inside a replay names the graph", "[gpu][cli][faults]") {
  SECTION("the first graphed replay faults (the eager reference runs without the drill)") {
    check_graph_fault(run_soak({"--fault-after", "4:conv.update"}), "decode 2");
  }
  SECTION("a drill whose node the decode graphs do not have is an error") {
    const ChildResult r = run_soak({"--fault-after", "1:delta_rule.prefill"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("no node of the captured decode graphs is layer 1 op 'delta_rule.prefill'") != std::string::npos);
  }
  SECTION("without a drill the same short soak passes") {
    const ChildResult r = run_soak({});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 0);
    CHECK(r.out.find("soak: ok: 20/20 replays") != std::string::npos);
  }
}

TEST_CASE("ab: a kernel fault inside a side's graph names the side and the graph", "[gpu][cli][faults][ab]") {
  SECTION("decode: both sides' graphs hold the node, A's steps run first") {
    const ChildResult r = run_ab({"--b", "conv.update=grid", "--fault-after", "4:conv.update"});
    check_graph_fault(r, "decode 2", "side A (the base): ");
    CHECK(r.out.find("fault drill: a kernel that faults after layer 4 conv.update, in both sides' graphs") !=
          std::string::npos);
    CHECK(r.out.find("whole step (ms)") == std::string::npos);  // no report: the run ended at the fault
  }
  SECTION("prefill") {
    check_graph_fault(run_ab({"--phase", "prefill", "--b", "conv.fwd=k4", "--fault-after", "1:delta_rule.prefill"}),
                      "prefill 32", "side A (the base): ");
  }
  SECTION("a node only B's graph holds: B's graph faults") {
    // With the skinny GEMM, swiglu=gemm computes the activation in gate_up's epilogue (no swiglu
    // node, tests/gpu/test_model_step.cpp); swiglu=kernel launches the swiglu kernel after it.
    const ChildResult r =
        run_ab({"--gemm", "skinny", "--a", "swiglu=gemm", "--b", "swiglu=kernel", "--fault-after", "0:swiglu"});
    check_graph_fault(r, "decode 2", "side B (swiglu=kernel): ");
    CHECK(r.out.find("in B's graph only (A's graph has no such node)") != std::string::npos);
  }
  SECTION("a drill whose node neither side's graph holds is an error before any step runs") {
    const ChildResult r = run_ab({"--b", "conv.update=grid", "--fault-after", "1:delta_rule.prefill"});
    INFO(r.describe() << "\n" << r.out.substr(0, 3000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 1);
    CHECK(r.out.find("--fault-after 1:delta_rule.prefill: no node of either side's captured graph is layer 1 op "
                     "'delta_rule.prefill'") != std::string::npos);
    CHECK(r.out.find("whole step (ms)") == std::string::npos);  // nothing was timed
  }
  SECTION("without a drill the same short ab passes, with equal hashes") {
    const ChildResult r = run_ab({"--b", "conv.update=grid"});
    INFO(r.describe() << "\n" << r.out.substr(0, 4000));
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 0);
    CHECK(r.out.find("whole step (ms)") != std::string::npos);
    CHECK(r.out.find("DIFFERENT") == std::string::npos);  // conv.update's arms are byte-identical
    CHECK(r.out.find("fault drill") == std::string::npos);
    // Each side's clocks, or why they were not sampled (no NVML).
    CHECK((r.out.find("clocks during the event-timed replays (NVML):\n  A: SM ") != std::string::npos ||
           r.out.find("clocks: not sampled (") != std::string::npos));
  }
}

namespace {

// The count in "--fault-after X: the node ran N times ..." (-1 when the message is not there).
long long drill_runs(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("the node ran ([0-9]+) times? "))) return -1;
  return std::stoll(m[1].str());
}

// A run whose drill never came: the results are out (`done` in the output), then the error that
// names how many times the node ran. Returns that count.
long long check_never_came(const ChildResult& r, const std::string& drill, const std::string& done) {
  INFO(r.describe() << "\n" << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 1);
  CHECK(r.out.find(done) != std::string::npos);
  CHECK(r.out.find("stepgraph: error: --fault-after " + drill + ": the node ran ") != std::string::npos);
  CHECK(r.out.find("never came and nothing faulted") != std::string::npos);
  CHECK(r.out.find("cudaErrorIllegalAddress") == std::string::npos);
  const long long n = drill_runs(r.out);
  CHECK(n >= 1);
  return n;
}

}  // namespace

TEST_CASE("a drill on a later run (LAYER:OP@RUN): a real fault deep in a run, or an error when the run never comes",
          "[gpu][cli][faults]") {
  SECTION("inspect: a fault in the marginal costs' replays names the group disabled then") {
    // 1 repetition of 2 replays a group, after 2 warm-up replays: the last 4 runs of the node are the
    // final baseline (every node enabled), the 4 before them the last group's (not conv.update's own:
    // the groups go by name, and while conv.update's are disabled its drill node does not run).
    const std::vector<std::string> base = {"inspect", "--preset",  "tiny",  "--max-seqs", "2", "--context",
                                           "16",      "--replays", "2",     "--reps",     "1", "--node-replays",
                                           "2",       "--key",     "decode"};
    const long long n = check_never_came(run_stepgraph(base, {"--fault-after", "4:conv.update@1000000000"}),
                                         "4:conv.update@1000000000", "marginal us");
    REQUIRE(n > 8);
    const ChildResult last = run_stepgraph(base, {"--fault-after", "4:conv.update@" + std::to_string(n)});
    check_graph_fault(last, "decode 2", "",
                      " (replayed for its marginal costs, every node enabled): cudaErrorIllegalAddress");
    const ChildResult group = run_stepgraph(base, {"--fault-after", "4:conv.update@" + std::to_string(n - 4)});
    check_graph_fault(group, "decode 2", "", " (replayed for its marginal costs, with the nodes of group '");
    CHECK(group.out.find("' disabled): cudaErrorIllegalAddress") != std::string::npos);
    CHECK(group.out.find("group 'conv.update' disabled") == std::string::npos);  // its drill was not running
  }
  SECTION("bench --workload gdn-layer: the first run faults, a late one in the per-node replays") {
    const std::vector<std::string> base = {"bench", "--workload", "gdn-layer", "--preset", "tiny", "--max-seqs",
                                           "2",     "--replays",  "2",         "--reps",   "1",    "--node-replays",
                                           "1"};
    const ChildResult first = run_stepgraph(base, {"--fault-after", "0:delta_rule.decode"});
    check_graph_fault(first, "decode 1");  // keys run smallest first
    CHECK(first.out.find("fault drill: a kernel that faults after layer 0 delta_rule.decode") != std::string::npos);
    const ChildResult whole = run_stepgraph(base, {"--fault-after", "0:delta_rule.decode@1000000000"});
    const long long n =
        check_never_came(whole, "0:delta_rule.decode@1000000000", "summary (median replay time per graph");
    // Each graph's clocks under its line, or why they were not sampled.
    CHECK((whole.out.find("  clocks during the graph's timed replays: SM ") != std::string::npos ||
           whole.out.find("clocks: not sampled (") != std::string::npos));
    const ChildResult late = run_stepgraph(base, {"--fault-after", "0:delta_rule.decode@" + std::to_string(n)});
    check_graph_fault(late, "decode 2");
    CHECK(late.out.find("graph gdn-decode b=1:") != std::string::npos);  // key 1 was measured before
  }
  SECTION("soak: replay 15 of 20 faults") {
    const ChildResult r = run_soak({"--fault-after", "4:conv.update@15"});
    check_graph_fault(r, "decode 2");
    CHECK(r.out.find("soak: ok") == std::string::npos);
    CHECK(check_never_came(run_soak({"--fault-after", "4:conv.update@21"}), "4:conv.update@21", "soak: ok: 20/20") ==
          20);
  }
  SECTION("generate: the prefill graph runs layer 1's delta_rule.prefill once") {
    const ChildResult r = run_generate({"--fault-after", "1:delta_rule.prefill@2"});
    CHECK(check_never_came(r, "1:delta_rule.prefill@2", "\"generated\"") == 1);
    CHECK(r.out.find("the node ran 1 time in this run's steps") != std::string::npos);
  }
  SECTION("ab: both sides run the node as often; the report is out before the error") {
    const ChildResult r = run_ab({"--b", "conv.update=grid", "--fault-after", "4:conv.update@1000000000"});
    const long long n = check_never_came(r, "4:conv.update@1000000000", "whole step (ms)");
    CHECK(r.out.find(fmt::format("in one side's steps (A's: {}, B's: {})", n, n)) != std::string::npos);
  }
}
