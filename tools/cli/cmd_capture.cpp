// cmd_capture.cpp: `stepgraph capture`: builds the whole-model step of a preset (the options of
// bench's model workload) and captures its graph keys (the decode keys, the prefill buckets of
// --max-seqs x --context tokens, or both), then prints per graph its kernel and other nodes, the
// capture and instantiation times and the device memory instantiation took (graphs/graph.h
// CaptureStats), and the totals; --json writes the same. Needs a GPU.
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "engine/text.h"
#include "models/model_step.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/capture_report.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

struct CaptureOptions {
  BenchOptions b;  // preset, max_seqs, context, phase, arms, settings
  std::string json;
};

CaptureOptions co;

int run(const CaptureOptions& o) {
  // Ctrl-C: the graph being captured finishes, then the command reports (and writes) the graphs
  // captured so far, marked interrupted, and exits with 130. A second Ctrl-C ends the process.
  const SigintGuard guard;
  const ResolvedArms arms = resolve_cli_arms(o.b.arms.arms);  // a bad arm name is an error on every path
  const Qwen35Config cfg = preset(o.b.preset);
  check_writable(o.json, "--json");  // before the run, so that its results are never lost
  check_writable(o.b.lt_choices, "--lt-choices");
  const DeviceInfo dev = probe_device();
  if (!dev.ok)
    throw Error(fmt::format("capture: capturing CUDA graphs needs a GPU, and none can be used here: {}", dev.reason));
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  const bool decode = o.b.phase != "prefill", prefill = o.b.phase != "decode";
  add_lt_choices_option(o.b.lt_choices, dev);
  auto t0 = std::chrono::steady_clock::now();
  ModelStep step(cfg, model_step_options(o.b, arms, prefill, 0));
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StepChoice c = resolved_choice(step);
  std::vector<GraphKey> keys;
  if (decode) {
    for (int k : step.keys()) keys.push_back(GraphKey::decode(k));
  }
  if (prefill) {
    for (int b : step.prefill_keys()) keys.push_back(GraphKey::prefill(b));
  }
  fmt::print(
      "device: {}\nmodel: {} ({} layers: {} GDN + {} attention), {} sequences, context {}, synthetic bf16 "
      "weights; arena {} built in {:.1f} s\narms: {}\nsettings: {}\ncapturing {} graphs ({})...\n",
      dev.describe(), cfg.name, cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(), o.b.max_seqs,
      o.b.context, format_bytes(static_cast<double>(step.arena_bytes())), build_s, c.arms.describe(),
      c.describe_settings(), keys.size(), o.b.phase);
  t0 = std::chrono::steady_clock::now();
  step.set_capture_stop(sigint_received);
  step.capture(keys, /*for_timing=*/false);
  const bool interrupted = sigint_received();
  write_lt_choices_option(o.b.lt_choices, dev);  // the shapes of the graphs captured (all, unless interrupted)
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<CaptureRow> rows;
  for (const GraphKey& k : step.graphs().captured()) {
    const CapturedGraph& g = step.graphs().graph(k);
    rows.push_back({describe(k), g.name(), g.stats()});
  }
  print_tuning(step);
  if (interrupted) {
    fmt::print("\ninterrupted (SIGINT) after {} of {} graphs: the graphs captured so far follow\n", rows.size(),
               keys.size());
  }
  fmt::print("\n{}", format_capture_table(rows));
  const CaptureStats t = capture_totals(rows);
  fmt::print(
      "\nsummary: {} graphs of {} ({}), {} kernel nodes and {} others; capture {:.1f} ms + instantiation {:.1f} "
      "ms of {:.1f} ms in all (warm-up and manifests included); instantiation took {} of device memory "
      "(free memory before minus after, per graph)\n",
      rows.size(), cfg.name, o.b.phase, t.kernel_nodes, t.other_nodes, t.capture_ms, t.instantiate_ms, wall_ms,
      format_signed_bytes(t.instantiate_bytes));
  if (!o.json.empty()) {
    nlohmann::json j = capture_json(rows);
    j["device"] = dev.describe();
    j["preset"] = cfg.name;
    j["phase"] = o.b.phase;
    j["max_seqs"] = o.b.max_seqs;
    j["context"] = o.b.context;
    j["arms"] = c.arms.describe();
    j["settings"] = c.describe_settings();
    j["wall_ms"] = wall_ms;
    j["interrupted"] = interrupted;
    j["planned_graphs"] = keys.size();
    if (step.options().tune_arms) {
      nlohmann::json tuned = nlohmann::json::array();
      for (const GraphKey& k : step.graphs().captured()) {
        const Manifest& m = step.graphs().manifest(k);
        nlohmann::json t = to_json(m);
        tuned.push_back(
            {{"graph", describe(k)}, {"arms", m.arms}, {"tuning", t.value("tuning", nlohmann::json::array())}});
      }
      j["tuned_arms"] = tuned;
    }
    write_output_file(o.json, "--json", j.dump(2) + "\n");
  }
  return interrupted ? kInterruptedExit : 0;
}

}  // namespace

void register_capture(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "capture",
      "Build the whole-model step of a preset and capture its graph keys (decode keys, prefill buckets or both): per "
      "graph its kernel and other nodes, capture and instantiation times and the device memory instantiation took, "
      "and the totals. Ctrl-C ends the run after the graph being captured and reports (and writes) the graphs "
      "captured so far, exit 130. Needs a GPU.");
  add_model_step_options(cmd, co.b);
  cmd->add_option("--phase", co.b.phase,
                  "decode (the decode keys 1, 2, 4, 8, ... --max-seqs), prefill (the token buckets 16, 32, ... up to "
                  "--max-seqs x --context) or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill", "both"}));
  cmd->add_option("--json", co.json, "Also write the table and totals to this JSON file");
  cmd->callback([&action] { action = [] { return run(co); }; });
}

}  // namespace sg::cli
