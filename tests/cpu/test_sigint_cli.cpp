// Ctrl-C in a long `stepgraph generate` run (the CPU reference, as a subprocess without a GPU):
// the run stops after the current token, prints the tokens generated so far (the same tokens an
// uninterrupted run starts with), marks the result interrupted and exits with 130; during a long
// prompt's prefill it stops after the current layer. The same for `stepgraph serve` after the step
// under way.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;

namespace {

std::vector<std::string> generate_argv(int max_new, bool json) {
  std::vector<std::string> v = {SG_STEPGRAPH_BIN,       "generate", "--cpu", "--preset", "tiny", "--max-new",
                                std::to_string(max_new)};
  if (json) v.push_back("--json");
  return v;
}

// The JSON object in a run's output (stdout, after anything the run wrote to stderr).
nlohmann::json json_of(const std::string& out) {
  const auto a = out.find('{'), b = out.rfind('}');
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  return nlohmann::json::parse(out.substr(a, b - a + 1));
}

ChildLimits limits(double sigint_after) {
  ChildLimits l;
  l.seconds = 120;
  l.address_space = uint64_t{4} << 30;
  l.sigint_after = sigint_after;
  return l;
}

// A run given SIGINT `after` seconds in: it must exit with 130 within a minute and print a JSON
// result marked interrupted, which is returned (with the run's whole output in `out`).
nlohmann::json interrupted_run(const std::vector<std::string>& argv, double after, std::string* out = nullptr) {
  const ChildResult r = run_program(argv, {}, limits(after));
  INFO(r.describe() << "\n" << r.out.substr(0, 2000));
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 130);
  CHECK(r.seconds < 60);
  const nlohmann::json j = json_of(r.out);
  CHECK(j.at("interrupted") == true);
  if (out) *out = r.out;
  return j;
}

}  // namespace

TEST_CASE("generate: Ctrl-C stops the run, prints the tokens so far and exits with 130", "[cli][sigint]") {
  // A run too long to finish before the signal (100000 tokens of the tiny preset take minutes);
  // the signal comes 3 s after the start, and not before the handler is installed (ChildLimits).
  const nlohmann::json j = interrupted_run(generate_argv(100000, true), 3.0);
  CHECK(j.at("max_new") == 100000);
  const auto got = j.at("generated").get<std::vector<int64_t>>();
  REQUIRE(!got.empty());
  CHECK(got.size() < 100000);

  // The tokens it printed are the ones an uninterrupted run generates first.
  const int n = static_cast<int>(std::min<size_t>(got.size(), 64));
  const ChildResult full = run_program(generate_argv(n, true), {}, limits(0));
  REQUIRE(full.end == ChildResult::End::exited);
  REQUIRE(full.code == 0);
  const nlohmann::json jf = json_of(full.out);
  CHECK(jf.at("interrupted") == false);
  const auto ref = jf.at("generated").get<std::vector<int64_t>>();
  REQUIRE(ref.size() == static_cast<size_t>(n));
  CHECK(std::equal(ref.begin(), ref.end(), got.begin()));

  // Without --json the text says so before the result.
  const ChildResult t = run_program(generate_argv(100000, false), {}, limits(3.0));
  CHECK(t.code == 130);
  CHECK(t.out.find("interrupted (SIGINT) after ") != std::string::npos);
  CHECK(t.out.find("of 100000 tokens: what was generated so far follows") != std::string::npos);
}

TEST_CASE("generate: Ctrl-C during a long prompt's prefill stops it after the current layer", "[cli][sigint]") {
  // 6000 prompt tokens of the tiny preset: its attention layers take seconds each on the CPU, and
  // the prompt is one forward, so the signal (2 s in) comes during the prefill.
  std::string prompt;
  for (int i = 0; i < 6000; ++i) prompt += (i ? "," : "") + std::to_string(i % 200);
  std::vector<std::string> argv = generate_argv(8, true);
  argv.insert(argv.end(), {"--tokens", prompt});
  std::string out;
  const nlohmann::json j = interrupted_run(argv, 2.0, &out);
  CHECK(j.at("generated").empty());
  // It says where the prefill stopped, short of the model's 6 layers (how far depends on the
  // machine: the signal may come before the first layer ends).
  CHECK(out.find("prefill of 6000 tokens: Ctrl-C: the forward was stopped after layer ") != std::string::npos);
  CHECK(out.find("stopped after layer 6 of 6") == std::string::npos);
  CHECK(out.find("6 / 6 layers") == std::string::npos);
}

TEST_CASE("serve: Ctrl-C ends the run after the step under way and reports what was completed", "[cli][sigint]") {
  // The CPU reference through serve-c32 (32 requests of 1024 prompt and 128 new tokens) runs far
  // longer than the 3 s before the signal.
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "serve", "--cpu", "--trace-preset", "serve-c32", "--json"};
  const nlohmann::json j = interrupted_run(argv, 3.0);
  CHECK(j.at("metrics").at("completed").get<int>() < 32);
  CHECK(j.at("requests").size() == 32);  // every request listed, finished or not
}
