// `stepgraph drift` on the GPU (the program as a subprocess, the GPU visible): with B = A the two
// sides give the same logits at every position (so the sides are built and fed alike), with a
// bf16 state they do not; the JSON holds what the table shows.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/gpu/cli_fixture.h"
#include "tests/support/catch.h"

using namespace sg::test;

namespace {
nlohmann::json run_drift(const std::string& b, const std::filesystem::path& json, std::string* out) {
  return run_for_json({SG_STEPGRAPH_BIN, "drift", "--preset", "tiny", "--prompt", "5", "--max-new", "8", "--window",
                       "4", "--b", b, "--json", json.string()},
                      json, out);
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
