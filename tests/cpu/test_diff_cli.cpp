// `stepgraph diff` run as a subprocess (tests/support/bad_input.h: a time limit, no GPU): two bench
// reports compared end to end (the text and --json), and the files and options it refuses: a
// missing file, a FIFO, a folder, invalid or deeply nested JSON, a key twice, an `ab` report, an
// unwritable --json (refused before the reports are read) or one naming a report, a negative or
// NaN --min-us, a missing report.
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tests/support/bad_input.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;

namespace {

constexpr int kCli11Invalid = 105;
constexpr int kCli11Required = 106;
constexpr int kCli11Excludes = 108;

json bench_report(double step_ms, double prep_us, const std::string& gemm) {
  json ops = {{"attn_prep", {{"us", prep_us}, {"nodes", 8}}}, {"mlp.gate_up", {{"us", 900.0}, {"nodes", 32}}}};
  return {{"preset", "qwen3.5-4b"},
          {"workload", "model"},
          {"gemm", gemm},
          {"graphs", json::array({{{"kind", "decode"},
                                   {"batch", 32},
                                   {"step_ms", {{"median", step_ms}, {"min", step_ms - 0.01}, {"max", step_ms + 0.01}}},
                                   {"ops", ops}}})}};
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

void write_reports(const fs::path& dir) {
  write(dir / "old.json", bench_report(4.35, 50.0, "mixed").dump());
  write(dir / "new.json", bench_report(4.32, 20.0, "lt").dump());
}

std::vector<CliCase> diff_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::vector<std::string> args, int code, std::vector<std::string> fragments) {
    return add_cli_case(v, std::move(name), std::move(args), code, std::move(fragments));
  };
  auto* ok =
      add("diff of two bench reports", {"diff", "{dir}/old.json", "{dir}/new.json", "--json", "{dir}/diff.json"}, 0,
          {"* gemm           mixed -> lt", "decode b=32", "-0.030 (-0.7%)", "faster", "attn_prep", "-30.0 (-60.0%)",
           "wrote {dir}/diff.json"});
  ok->setup = write_reports;
  ok->after = [](const fs::path& dir, const std::string&) {
    std::ifstream in(dir / "diff.json");
    const json j = json::parse(in);
    CHECK(j["graphs"][0]["verdict"] == "faster");
    CHECK(j["graphs"][0]["families"][0]["family"] == "attn_prep");
  };
  add("diff with a missing report", {"diff", "{dir}/nope.json", "{dir}/new.json"}, 1, {"{dir}/nope.json: cannot open"})
      ->setup = write_reports;
  add("diff of a FIFO", {"diff", "{dir}/fifo.json", "{dir}/new.json"}, 1, {"not a regular file"})->setup =
      [](const fs::path& dir) {
        write_reports(dir);
        make_fifo(dir / "fifo.json");
      };
  add("diff of a folder", {"diff", "{dir}", "{dir}/new.json"}, 1, {"not a regular file"})->setup = write_reports;
  add("diff of a file that is not JSON", {"diff", "{dir}/old.json", "{dir}/bad.json"}, 1,
      {"{dir}/bad.json: the file is not valid JSON"})
      ->setup = [](const fs::path& dir) {
    write_reports(dir);
    write(dir / "bad.json", "{\"graphs\": [");
  };
  add("diff of JSON nested 100,000 deep", {"diff", "{dir}/deep.json", "{dir}/new.json"}, 1,
      {"{dir}/deep.json: the file nests deeper than 64 levels"})
      ->setup = [](const fs::path& dir) {
    write_reports(dir);
    write(dir / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
  };
  add("diff of a report with a key twice", {"diff", "{dir}/old.json", "{dir}/twice.json"}, 1,
      {"{dir}/twice.json: key 'graphs' appears twice"})
      ->setup = [](const fs::path& dir) {
    write_reports(dir);
    write(dir / "twice.json", "{\"graphs\": [], \"graphs\": []}");
  };
  add("diff of a report with no graph", {"diff", "{dir}/old.json", "{dir}/empty.json"}, 1,
      {"{dir}/empty.json: \"graphs\" is empty: the report measured no graph"})
      ->setup = [](const fs::path& dir) {
    write_reports(dir);
    write(dir / "empty.json", "{\"graphs\": []}");
  };
  add("diff of an ab report", {"diff", "{dir}/ab.json", "{dir}/new.json"}, 1,
      {"{dir}/ab.json: a `stepgraph ab` report"})
      ->setup = [](const fs::path& dir) {
    write_reports(dir);
    write(dir / "ab.json", json{{"a", 1}, {"b", 2}, {"families_us", 3}}.dump());
  };
  add("diff --json into a missing folder, before the reports are read",
      {"diff", "{dir}/nope.json", "{dir}/new.json", "--json", "{dir}/missing/diff.json"}, 1,
      {"--json {dir}/missing/diff.json: cannot write this file"});
  add("diff --json naming one of the reports", {"diff", "{dir}/old.json", "{dir}/new.json", "--json", "{dir}/new.json"},
      1, {"--json {dir}/new.json is one of the reports compared"})
      ->after = [](const fs::path& dir, const std::string&) {
    std::ifstream in(dir / "new.json");
    CHECK(json::parse(in)["gemm"] == "lt");  // left as it was
  };
  v.back().setup = write_reports;
  add("diff --min-us -1", {"diff", "a.json", "b.json", "--min-us", "-1"}, kCli11Invalid, {"--min-us"});
  // strtod would read hex, inf and nan; a word was "not in range".
  for (const char* bad : {"nan", "0x10", "inf", "abc", "1e", ".", " 3"}) {
    add(fmt::format("diff --min-us '{}'", bad), {"diff", "{dir}/old.json", "{dir}/new.json", "--min-us", bad},
        kCli11Invalid, {fmt::format("--min-us: '{}' is not a decimal number", bad)});
  }
  add("diff --min-us 1e1 (runs)", {"diff", "{dir}/old.json", "{dir}/new.json", "--min-us", "1e1"}, 0, {})->setup =
      write_reports;
  add("diff with one report", {"diff", "a.json"}, kCli11Required, {"NEW"});
  add("diff --all with --min-us (a threshold --all would ignore)",
      {"diff", "a.json", "b.json", "--all", "--min-us", "50"}, kCli11Excludes, {"--all excludes --min-us"});
  return v;
}

}  // namespace

TEST_CASE("diff: two bench reports compared, and the files and options it refuses", "[diff][cli]") {
  for (const CliCase& c : diff_cases()) check_cli_case(c);
}
