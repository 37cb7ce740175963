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
  ChildLimits l;
  l.seconds = 300;
  l.address_space = ~uint64_t{0};  // no limit: the CUDA driver maps large ranges
  l.sigint_after = 4.0;
  const ChildResult r = run_program(argv, {{"CUDA_VISIBLE_DEVICES", std::nullopt}}, l);
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
