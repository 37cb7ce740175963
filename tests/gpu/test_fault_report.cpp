// A kernel that faults while a step runs, found with `generate --fault-after` (a fault drill: a
// kernel that stores to an invalid address right after the named node). In a replayed graph the
// error names the graph and how to find the node; with --check-nodes (eager steps, synchronised
// after every node) it names the node: layer, op and arm. The program runs as a subprocess (the
// GPU visible): the fault ends its CUDA context.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

namespace {

ChildResult run_generate(std::vector<std::string> extra) {
  std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "generate",  "--preset", "tiny",  "--tokens",
                                   "1,2,3,4,5",      "--max-new", "4",        "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildLimits l;
  l.seconds = 240;
  l.address_space = ~uint64_t{0};  // the CUDA driver maps large ranges
  return run_program(argv, {{"CUDA_VISIBLE_DEVICES", std::nullopt}}, l);
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
