// Ctrl-C in `stepgraph bench` on the GPU (the program as a subprocess, the GPU visible): the run
// ends after the graph being measured, prints and writes (--json) what it measured so far, marked
// interrupted, and exits with 130.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

TEST_CASE("bench: Ctrl-C ends the run after the graph being measured and writes what was measured",
          "[gpu][cli][sigint]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_sigint_bench.json";
  std::filesystem::remove(json);
  // The tiny preset's 7 decode graphs (b = 32 down to 1) at 20000 replays x 3 repetitions each
  // take seconds a graph; the signal comes 4 s after the start (after the handler is installed,
  // before the last graph is done).
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "bench",     "--preset", "tiny",       "--phase",
                                         "decode",         "--replays", "20000",    "--reps",     "3",
                                         "--node-replays", "3",         "--json",   json.string()};
  const ChildResult r = run_program_on_gpu(argv, 300, 4.0);
  INFO(r.describe() << "\n" << r.out.substr(0, 3000));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 130);
  CHECK(r.seconds < 120);
  CHECK(r.out.find("interrupted (SIGINT) after ") != std::string::npos);
  CHECK(r.out.find("of 7 graphs: what was measured so far follows") != std::string::npos);
  std::ifstream f(json);
  REQUIRE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  CHECK(j.at("interrupted") == true);
  const auto& graphs = j.at("graphs");
  CHECK(graphs.size() < 7);
  for (const auto& g : graphs) {  // whatever was measured is whole
    CHECK(g.at("kind") == "decode");
    CHECK(g.at("step_ms").at("median").get<double>() > 0);
  }
  std::filesystem::remove(json);
}

TEST_CASE("capture: Ctrl-C ends the run after the graph being captured and writes the graphs captured so far",
          "[gpu][cli][sigint]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_sigint_capture.json";
  std::filesystem::remove(json);
  // The 27B preset's 7 decode graphs and 12 prefill buckets (32 x 1024 tokens): before the captures
  // every key runs once eagerly, the largest prefill bucket for seconds, so the signal at 3 s comes
  // before the last graph is captured (the 4B preset's whole run took about 1 s on the H200). It
  // may come before the first capture (the runner asks its stop hook before each graph): then no
  // graph is captured, and the report, the JSON and the exit code say so all the same.
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "capture", "--preset", "qwen3.5-27b",
                                         "--phase",        "both",    "--json",   json.string()};
  const ChildResult r = run_program_on_gpu(argv, 300, 3.0);
  INFO(r.describe() << "\n" << r.out.substr(0, 3000));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 130);
  CHECK(r.out.find("interrupted (SIGINT) after ") != std::string::npos);
  CHECK(r.out.find("of 19 graphs: the graphs captured so far follow") != std::string::npos);
  std::ifstream f(json);
  REQUIRE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  CHECK(j.at("interrupted") == true);
  CHECK(j.at("planned_graphs") == 19);
  const auto& graphs = j.at("graphs");
  CHECK(graphs.size() < 19);
  CHECK(j.at("totals").at("graphs") == graphs.size());
  for (const auto& g : graphs) CHECK(g.at("kernel_nodes").get<int>() > 0);  // whatever was captured is whole
  std::filesystem::remove(json);
}

TEST_CASE("inspect: Ctrl-C ends the run after the unit under way and exits with 130", "[gpu][cli][sigint]") {
  // 400 replays a timing: the baseline alone takes about 5 s on the 4B decode graph and each of the
  // 18 op families as long again, so the signal at 10 s comes during the capture or the marginal costs.
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "inspect", "--preset", "qwen3.5-4b", "--replays", "400"};
  const ChildResult r = run_program_on_gpu(argv, 300, 10.0);
  INFO(r.describe() << "\n" << r.out.substr(0, 4000));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 130);
  CHECK(r.seconds < 120);
  const bool in_capture =
      r.out.find("interrupted (SIGINT) while capturing the graphs: nothing was measured") != std::string::npos;
  const bool in_marginal = r.out.find("interrupted (SIGINT) during the marginal costs: ") != std::string::npos;
  CHECK(in_capture != in_marginal);
  if (in_marginal) {  // the table follows, every op family listed, the unmeasured ones without a marginal cost
    CHECK(r.out.find("groups measured (the others show none)") != std::string::npos);
    CHECK(r.out.find("mlp.gate_up") != std::string::npos);
  }
}
