// `stepgraph bench --history` on the GPU (the program as a subprocess, the GPU visible): the prefill
// step continues sequences with tokens in their caches; the report, the JSON and the finiteness
// check say so; with the decode phase as well it is refused (the caches' size would change the
// decode graphs).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

namespace {
ChildResult run_bench(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program_on_gpu(argv);
}
}  // namespace

TEST_CASE("bench --history: the prefill step after tokens in the caches", "[gpu][cli][prefill]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_bench_history.json";
  std::filesystem::remove(json);
  const ChildResult r =
      run_bench({"--preset", "tiny", "--phase", "prefill", "--max-seqs", "4", "--context", "70", "--history", "100",
                 "--reps", "1", "--replays", "2", "--node-replays", "1", "--json", json.string()});
  INFO(r.describe() << "\n" << r.out.substr(0, 4000));
  REQUIRE(r.end == ChildResult::End::exited);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("(prefill: after 100 tokens of history)") != std::string::npos);
  CHECK(r.out.find("graph prefill 4 x 70 tokens after 100 of history (bucket ") != std::string::npos);
  CHECK(r.out.find("logits of the prefill and 128 greedy decode steps after it: all finite") != std::string::npos);
  CHECK(r.out.find("prefill 4x70+h100 graph") != std::string::npos);
  CHECK(r.out.find("compute floor: ") != std::string::npos);
  std::ifstream f(json);
  REQUIRE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  CHECK(j.at("history") == 100);
  bool prefill = false;
  for (const auto& g : j.at("graphs")) {
    if (g.at("kind") != "prefill") continue;
    prefill = true;
    CHECK(g.at("history") == 100);
    CHECK(g.at("tokens_per_sequence") == 70);
    CHECK(g.at("step_ms").at("median").get<double>() > 0);
    // The compute floor: the step's FLOPs (the projections', attention's causal and the delta rule's
    // products) at 790 TFLOP/s.
    const double flops = g.at("flops").get<double>();
    CHECK(flops > 0);
    CHECK(g.at("compute_floor_ms").get<double>() == Approx(flops / 790e9).epsilon(1e-9));
    // The clocks during the timed replays (null only where NVML could not sample, which the run says).
    const auto& c = g.at("clocks");
    if (c.is_null()) {
      CHECK(r.out.find("clocks: not sampled (") != std::string::npos);
    } else {
      CHECK(c.at("samples").get<int>() >= 1);
      CHECK(c.at("sm_mhz").at("median").get<int>() > 0);
      CHECK(r.out.find("clocks during the graph's timed replays: SM ") != std::string::npos);
    }
  }
  CHECK(prefill);
  std::filesystem::remove(json);
}

TEST_CASE("bench --history with the decode phase is refused on the GPU", "[gpu][cli][prefill]") {
  const ChildResult r = run_bench({"--preset", "tiny", "--history", "10"});
  INFO(r.describe() << "\n" << r.out.substr(0, 3000));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 1);
  CHECK(r.out.find("bench --history on the GPU sizes every slot's caches") != std::string::npos);
  CHECK(r.out.find("use --phase prefill") != std::string::npos);
  CHECK(r.out.find("graph decode") == std::string::npos);  // refused before anything ran
}
