// `stepgraph drift` on the GPU (the program as a subprocess, the GPU visible): with B = A the two
// sides give the same logits at every position (so the sides are built and fed alike), with a
// bf16 state they do not; the JSON holds what the table shows.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

namespace {
nlohmann::json run_drift(const std::string& b, const std::filesystem::path& json, std::string* out) {
  std::filesystem::remove(json);
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "drift",      "--preset", "tiny", "--prompt", "5",
                                         "--max-new",      "8",          "--window", "4",    "--b",      b,
                                         "--json",         json.string()};
  ChildLimits l;
  l.seconds = 300;
  l.address_space = ~uint64_t{0};  // the CUDA driver maps large ranges
  const ChildResult r = run_program(argv, {{"CUDA_VISIBLE_DEVICES", std::nullopt}}, l);
  INFO(r.describe() << "\n" << r.out.substr(0, 3000));
  REQUIRE(r.end == ChildResult::End::exited);
  REQUIRE(r.code == 0);
  *out = r.out;
  std::ifstream f(json);
  REQUIRE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  std::filesystem::remove(json);
  return j;
}
}  // namespace

TEST_CASE("drift: B = A drifts by nothing, a bf16 state by something", "[gpu][cli][drift][ssm_state]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_drift.json";
  std::string out;
  const nlohmann::json same = run_drift("ssm-state=f32", json, &out);
  CHECK(out.find("note: A and B run the same arithmetic") != std::string::npos);
  CHECK(out.find("greedy tokens: equal at all 8 positions") != std::string::npos);
  CHECK(same.at("positions") == 8);
  CHECK(same.at("windows").size() == 2);
  CHECK(same.at("total").at("max_error") == 0.0);
  CHECK(same.at("total").at("top1_agree") == 8);
  CHECK(same.at("first_divergence").is_null());
  CHECK(same.at("interrupted") == false);

  const nlohmann::json bf16 = run_drift("ssm-state=bf16", json, &out);
  CHECK(out.find("note: A and B run the same arithmetic") == std::string::npos);
  CHECK(bf16.at("positions") == 8);
  CHECK(bf16.at("total").at("max_error").get<double>() > 0.0);  // the state's rounding reaches the logits
  CHECK(bf16.at("total").at("max_error").get<double>() < 0.5);  // and does not blow them up
  CHECK(bf16.at("b").at("settings").get<std::string>().find("ssm-state=bf16") != std::string::npos);
  CHECK(bf16.at("a").at("settings").get<std::string>().find("ssm-state=f32") != std::string::npos);
}
