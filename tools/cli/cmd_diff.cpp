// cmd_diff.cpp: `stepgraph diff OLD.json NEW.json`: two `stepgraph bench --json` reports of the
// whole-model workload side by side (tools/cli/bench_diff.h says what is compared and the
// verdict's rule). Reads the files with the checks every JSON stepgraph reads gets
// (models/json_read.h: a regular file of at most 64 MiB, nesting, repeated keys); needs no GPU.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/text.h"
#include "models/json_read.h"
#include "tools/cli/bench_diff.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"

namespace sg::cli {
namespace {

struct DiffOptions {
  std::string old_path, new_path, json;
  bool all = false;
  double min_us = 1.0;
};

DiffOptions dopt;

// True when `a` and `b` name the same existing file.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

int run(const DiffOptions& o) {
  if (!std::isfinite(o.min_us)) throw Error("--min-us must be a finite number of microseconds");
  for (const std::string* in : {&o.old_path, &o.new_path}) {
    if (!o.json.empty() && same_file(o.json, *in))
      throw Error(fmt::format("--json {} is one of the reports compared: give another file", printable(o.json, 4096)));
  }
  check_writable(o.json, "--json");
  const std::string old_name = printable(o.old_path, 4096), new_name = printable(o.new_path, 4096);
  const nlohmann::json a = read_json_file(o.old_path), b = read_json_file(o.new_path);
  const BenchDiff d = diff_bench_reports(a, b, old_name, new_name);
  fmt::print("old: {}\nnew: {}\n{}", old_name, new_name,
             format_bench_diff(d, {o.all, o.min_us + 0.0}));  // -0 prints as 0
  if (!o.json.empty()) {
    nlohmann::json j = bench_diff_json(d);
    j["old"] = old_name;
    j["new"] = new_name;
    write_output_file(o.json, "--json", j.dump(2) + "\n");  // the text made before the file is opened
  }
  return 0;
}

}  // namespace

void register_diff(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "diff",
      "Compare two `stepgraph bench --json` reports of the whole-model workload (two commits, two machines, two "
      "settings): the settings that differ, then per graph (decode batch, prefill shape) the step time old -> new "
      "with a verdict against the reports' spreads (the rule of `ab`), and the op families whose node time moved, "
      "the largest change first; where both reports hold the manifests, the ops whose nodes ran other arms (the "
      "GEMMs' cuBLASLt algorithms and skinny splits, which each process may choose differently: --lt-choices on "
      "bench carries cuBLASLt's over); a caution under a graph whose clocks differed between the reports (another SM "
      "clock, or one held down by the power cap). Reads the two files only; needs no GPU. For two selections on one "
      "build, "
      "`ab` measures both in one process, which is the fairer comparison.");
  cmd->add_option("OLD", dopt.old_path, "The report to compare against (bench --json)")->required();
  cmd->add_option("NEW", dopt.new_path, "The report compared with it (bench --json)")->required();
  auto* all = cmd->add_flag("--all", dopt.all, "List every op family, not only those that moved by --min-us or more");
  cmd->add_option("--min-us", dopt.min_us, "Smallest change of an op family's time listed, us a step")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9))
      ->excludes(all);  // --all lists every family: a threshold would be ignored
  cmd->add_option("--json", dopt.json, "Also write the comparison to this JSON file");
  cmd->callback([&action] { action = [] { return run(dopt); }; });
}

}  // namespace sg::cli
