// cli_fixture.h: the GPU tests' runs of the stepgraph program that write a JSON report.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

namespace sg::test {

// Runs stepgraph (`argv`, the program first) with the GPU visible; it must exit 0 and write `json`,
// which is parsed, removed and returned; `out` gets what the program printed.
inline nlohmann::json run_for_json(const std::vector<std::string>& argv, const std::filesystem::path& json,
                                   std::string* out) {
  std::filesystem::remove(json);
  const ChildResult r = run_program_on_gpu(argv);
  INFO(r.describe() << "\n" << r.out.substr(0, 6000));
  REQUIRE(r.end == ChildResult::End::exited);
  REQUIRE(r.code == 0);
  *out = r.out;
  std::ifstream f(json);
  REQUIRE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  std::filesystem::remove(json);
  return j;
}

}  // namespace sg::test
