// cmd_inspect.cpp: `stepgraph inspect`: one captured graph of the whole model, node by node. For a
// decode key (`--key decode-32`) or the prefill bucket (`--key prefill`): every kernel node's
// own CUPTI time grouped by node, op family or layer, and beside each group its marginal cost: the
// step time with the group's nodes disabled in the executable graph, subtracted from the full
// step's (graphs/marginal.h); the GPU's clocks while both are measured (gpu_clocks.h). Table, JSON
// or CSV; --trace / --dot export the graph.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/env.h"
#include "engine/error.h"
#include "engine/gpu_clocks.h"
#include "graphs/export.h"
#include "graphs/marginal.h"
#include "graphs/node_timer.h"
#include "graphs/step_graphs.h"
#include "models/model_step.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/clock_report.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

struct InspectOptions {
  BenchOptions b;              // preset, max_seqs, context, settings, arms, reps/replays, trace/dot
  std::string key = "decode";  // decode (the largest decode key), decode-N, or prefill
  std::string by = "op";       // node, op or layer
  int top = 0;                 // groups shown (0: all; by node: 30)
  std::string format = "table";
  bool no_marginal = false;
  bool replays_given = false, node_replays_given = false;  // else prefill takes its own defaults
};

// A prefill replay of the 4B preset's 32 x 1024 tokens takes ~0.6 s, a decode replay ~5 ms: the
// prefill key's defaults keep the marginal costs (a timed run per group) to about a minute.
constexpr int kPrefillReplays = 2, kPrefillNodeReplays = 3;

InspectOptions io;

struct Group {
  std::string name;
  int nodes = 0;
  double us = 0, bytes = 0;  // summed node medians, summed label bytes
  double marginal_ms = 0;
  bool has_marginal = false;
};

std::string group_of(const ManifestNode& n, const std::string& by) {
  if (by == "op") return n.label.op;
  if (by == "layer")
    return n.label.layer < 0 ? std::string("(outside layers)") : fmt::format("layer {:02d}", n.label.layer);
  return fmt::format("#{:03d} L{} {} [{}] {}", n.index, n.label.layer, n.label.op, n.label.arm,
                     short_kernel_name(n.kernel));
}

int run(InspectOptions o) {
  // Ctrl-C: during the capture, the command stops after the graph being captured (nothing was
  // measured yet); during the marginal costs, after the group being timed, and prints (or writes)
  // the table with the marginal costs measured so far. Both exit with 130.
  const SigintGuard guard;
  // User-facing errors are plain sentences (sg::Error without a source location).
  const ResolvedArms arms = resolve_cli_arms(o.b.arms.arms);  // a bad arm name is an error on every path
  const Qwen35Config cfg = preset(o.b.preset);
  check_writable(o.b.trace, "--trace");  // before the run, so that its results are never lost
  check_writable(o.b.dot, "--dot");
  check_writable(o.b.lt_choices, "--lt-choices");
  o.b.fault = parse_fault_after(o.b.fault_after);  // before the device: a bad value is an error everywhere
  check_fault_layer(o.b.fault, cfg.layers, cfg.name);
  check_fault_drill(o.b, "inspect");
  const bool prefill = o.key == "prefill";
  const int replays = prefill && !o.replays_given ? kPrefillReplays : o.b.replays;
  const int node_replays = prefill && !o.node_replays_given ? kPrefillNodeReplays : o.b.node_replays;
  int rows = o.b.max_seqs;
  if (!prefill && o.key != "decode") {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(o.key.substr(7), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!(o.key.rfind("decode-", 0) == 0 && used == o.key.size() - 7 && n >= 1 && n <= o.b.max_seqs)) {
      throw Error(
          fmt::format("--key {}: expected decode, decode-N (1 <= N <= --max-seqs {}) or prefill", o.key, o.b.max_seqs));
    }
    rows = n;
  }
  const DeviceInfo dev = probe_device();
  if (!dev.ok)
    throw Error(fmt::format("inspect times captured CUDA graphs, and this machine has none to run: {}", dev.reason));
  FILE* log = o.format == "table" ? stdout : stderr;  // json and csv keep stdout to their format
  add_lt_choices_option(o.b.lt_choices, dev, log);
  ModelStep step(cfg, model_step_options(o.b, arms, prefill, 0));
  step.set_capture_stop(sigint_received);
  step.capture_all(/*for_timing=*/true, prefill);
  write_lt_choices_option(o.b.lt_choices, dev, log);
  if (sigint_received()) {  // on stderr for json and csv, whose stdout keeps its format
    fmt::print(o.format == "table" ? stdout : stderr,
               "interrupted (SIGINT) while capturing the graphs: nothing was measured\n");
    return kInterruptedExit;
  }
  check_fault_matched(o.b.fault, step.fault_drill_matched(), "the captured graphs", cfg.name);
  if (o.format == "table") print_tuning(step);  // JSON carries it as "tuning"; CSV is the node table only
  step.randomize_caches(7);                     // after the capture: tuning (--arms tune) runs steps on the caches
  cudaStream_t s = step.stream();
  int key = 0;
  std::string name;
  if (prefill) {
    std::vector<PrefillRequest> batch;
    for (int r = 0; r < o.b.max_seqs; ++r) {
      PrefillRequest q{r, {}, 0};
      for (int t = 0; t < o.b.context; ++t) q.tokens.push_back((r * 7919 + t * 131) % cfg.vocab);
      batch.push_back(std::move(q));
    }
    key = step.stage_prefill(batch);
    name = fmt::format("prefill {} x {} tokens (bucket {})", o.b.max_seqs, o.b.context, key);
  } else {
    // The padded decode key that holds `rows` rows.
    key = *std::lower_bound(step.keys().begin(), step.keys().end(), rows);
    std::vector<DecodeRequest> batch;
    for (int r = 0; r < rows; ++r) batch.push_back({r, (r * 7919) % cfg.vocab, o.b.context - 1});
    step.enqueue(batch, RunMode::graph);
    name = fmt::format("decode b={} ({} live rows, context {})", key, rows, o.b.context);
  }
  const Manifest& m = prefill ? step.prefill_manifest(key) : step.manifest(key);
  const CapturedGraph& g = prefill ? step.prefill_graph(key) : step.graph(key);
  // Through the step, so that a kernel that faults is reported with the graph (ModelStep::sync).
  auto replay = [&] { prefill ? step.replay_prefill(key) : step.replay(key); };
  for (int i = 0; i < 2; ++i) replay();
  step.sync();
  // The clocks, power and clock limits while the node times and the marginal costs are measured
  // (gpu_clocks.h): under a power cap a group's marginal cost includes what its power did to the clock.
  ClockSampler clocks(dev.ordinal);
  clocks.start();
  NodeTimerWindow window;  // abandoned if a fault ends the replays
  for (int i = 0; i < node_replays; ++i) replay();
  step.sync();
  const auto records = window.stop();
  const auto stats = aggregate(m, records);

  std::map<std::string, Group> groups;
  for (const auto& st : stats) {
    const std::string name = group_of(st.node, o.by);
    Group& gr = groups[name];
    gr.name = name;
    ++gr.nodes;
    gr.us += st.median_us;
    gr.bytes += st.node.label.bytes;
  }
  std::vector<Group> rows_out;
  for (auto& [k, v] : groups) rows_out.push_back(v);
  std::sort(rows_out.begin(), rows_out.end(), [](const Group& a, const Group& b) { return a.us > b.us; });
  const int top = o.top > 0 ? o.top : (o.by == "node" ? 30 : 0);
  if (top > 0 && static_cast<int>(rows_out.size()) > top) rows_out.resize(static_cast<size_t>(top));
  MarginalReport mr;
  if (!o.no_marginal) {
    std::map<std::string, bool> shown;
    for (const auto& r : rows_out) shown[r.name] = true;
    mr = marginal_costs(
        g, m, s,
        [&](const ManifestNode& n) {
          const std::string gname = group_of(n, o.by);
          return shown.count(gname) ? gname : std::string();
        },
        o.b.reps, std::max(1, replays), terminal_progress("marginal costs"), sigint_received,
        [&](cudaError_t e, const std::string& group) {  // a fault there is the graph's, as in the replays above
          step.check_replays(prefill ? GraphKey::prefill(key) : GraphKey::decode(key), e, marginal_replay_note(group));
        });
    for (auto& r : rows_out) {
      for (const auto& mg : mr.groups) {
        if (mg.group == r.name) r.marginal_ms = mg.marginal_ms, r.has_marginal = true;
      }
    }
  }
  const std::optional<ClockSummary> clock_summary = clocks.summarize(clocks.stop());
  const std::string clock_line =
      clock_summary ? describe_clocks(*clock_summary) : fmt::format("not sampled ({})", clocks.unavailable_reason());
  double total_us = 0;
  for (const auto& st : stats) total_us += st.median_us;
  const bool interrupted = sigint_received();
  int marginal_groups = 0;
  for (const auto& r : rows_out) marginal_groups += r.has_marginal;
  const std::string stopped =
      o.no_marginal
          ? std::string("interrupted (SIGINT) after the node times were measured")
          : fmt::format(
                "interrupted (SIGINT) during the marginal costs: {} of {} groups measured (the others show none)",
                marginal_groups, rows_out.size());
  if (interrupted && o.format != "table") fmt::print(stderr, "{}\n", stopped);  // stdout keeps its format

  if (o.format == "json") {
    nlohmann::json j = {{"device", dev.describe()}, {"preset", cfg.name}, {"graph", name},
                        {"arms", m.arms},           {"by", o.by},         {"nodes", stats.size()},
                        {"node_time_us", total_us}};
    if (!m.tuning.empty()) j["tuning"] = to_json(m)["tuning"];
    if (!o.no_marginal) j["step_ms"] = {{"median", mr.baseline_ms}, {"spread", mr.spread_ms}};
    j["interrupted"] = interrupted;
    j["clocks"] = clocks_json(clock_summary);
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : rows_out) {
      nlohmann::json e = {{"group", r.name}, {"nodes", r.nodes}, {"us", r.us}, {"bytes", r.bytes}};
      if (r.has_marginal) e["marginal_us"] = 1000.0 * r.marginal_ms;
      arr.push_back(e);
    }
    j["groups"] = arr;
    fmt::print("{}\n", j.dump(2));
  } else if (o.format == "csv") {
    fmt::print("group,nodes,us,share,bytes,GBps,marginal_us\n");
    for (const auto& r : rows_out) {
      const std::string gname = r.name.find_first_of(",\"") == std::string::npos ? r.name : "\"" + r.name + "\"";
      fmt::print("{},{},{:.3f},{:.4f},{:.0f},{:.1f},{}\n", gname, r.nodes, r.us, total_us > 0 ? r.us / total_us : 0.0,
                 r.bytes, r.us > 0 ? r.bytes / (r.us * 1e3) : 0.0,
                 r.has_marginal ? fmt::format("{:.3f}", 1000.0 * r.marginal_ms) : "");
    }
  } else {
    if (interrupted) fmt::print("{}\n", stopped);
    fmt::print("device: {}\ngraph: {} of {}; {} kernel nodes, node times sum {:.1f} us (CUPTI, {} replays)\n",
               dev.describe(), name, cfg.name, stats.size(), total_us, node_replays);
    fmt::print("clocks during the timing: {}\n", clock_line);
    if (!o.no_marginal) {
      fmt::print(
          "step {:.3f} ms (median; spread {:.3f} ms): marginal = step minus the step with the group's nodes "
          "disabled\n",
          mr.baseline_ms, mr.spread_ms);
    }
    fmt::print("{:<48} {:>5} {:>10} {:>6} {:>9} {:>12}\n", "group", "nodes", "node us", "share", "GB/s", "marginal us");
    for (const auto& r : rows_out) {
      fmt::print("{:<48} {:>5} {:>10.1f} {:>5.1f}% {:>9.0f} {:>12}\n", r.name, r.nodes, r.us,
                 total_us > 0 ? 100 * r.us / total_us : 0.0, r.us > 0 ? r.bytes / (r.us * 1e3) : 0.0,
                 r.has_marginal ? fmt::format("{:.1f}", 1000.0 * r.marginal_ms) : "-");
    }
  }
  if (!o.b.trace.empty()) {
    std::ofstream f(o.b.trace);
    if (!f) throw Error(fmt::format("cannot write {}", o.b.trace));
    f << to_chrome_trace(m, records).dump() << "\n";
  }
  if (!o.b.dot.empty()) {
    std::ofstream f(o.b.dot);
    if (!f) throw Error(fmt::format("cannot write {}", o.b.dot));
    f << to_dot(m);
  }
  if (interrupted) return kInterruptedExit;
  check_fault_fired(o.b.fault, step.fault_drill_runs(), "in this run's replays of the graph");
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, Action& action) {
  io.b.reps = 3;  // inspect's defaults (before the options capture them for --help)
  io.b.replays = 20;
  io.b.node_replays = 20;
  auto* cmd = app.add_subcommand(
      "inspect",
      "One captured graph of the whole model, node by node: each node's own CUPTI time (overlap with the node before "
      "counted once) grouped by node, op family or "
      "layer, beside the group's marginal cost (the step with the group's nodes disabled, subtracted from the full "
      "step), and the GPU's clocks during that timing (NVML; JSON: \"clocks\"). Ctrl-C ends the run after the graph "
      "being captured (nothing measured) or after the group being timed and "
      "one more timing of the whole step (the table with the marginal costs measured so far), exit 130. Needs a GPU.");
  add_model_step_options(cmd, io.b);  // --preset, --max-seqs, --context, --arm, the settings
  cmd->add_option("--key", io.key,
                  "the graph: decode (the largest decode key), decode-N (the key holding N rows) or prefill")
      ->capture_default_str();
  cmd->add_option("--by", io.by, "group nodes by node, op or layer")
      ->capture_default_str()
      ->check(CLI::IsMember({"node", "op", "layer"}));
  cmd->add_option("--top", io.top, "show the N largest groups (0: all; by node: 30)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--format", io.format, "table, json or csv")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_flag("--no-marginal", io.no_marginal, "skip the marginal costs (they replay the graph once more per group)");
  cmd->add_option(
         "--node-replays", io.b.node_replays,
         fmt::format("replays under CUPTI for the node times (--key prefill: {} unless given)", kPrefillNodeReplays))
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--reps", io.b.reps, "timed repetitions per marginal cost")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--replays", io.b.replays,
                  fmt::format("replays per timed repetition (--key prefill: {} unless given)", kPrefillReplays))
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--trace", io.b.trace, "write a Chrome/Perfetto trace of the CUPTI replays");
  cmd->add_option("--dot", io.b.dot, "write the graph's kernel nodes and dependencies as Graphviz DOT");
  add_fault_after_option(cmd, io.b.fault_after,
                         "in the captured graphs (with @RUN also deep in the marginal costs' replays, whose report "
                         "names the group of nodes disabled then); the error names the graph that faulted (find the "
                         "node with generate --check-nodes)");
  cmd->callback([&action, cmd] {
    io.replays_given = cmd->count("--replays") > 0;
    io.node_replays_given = cmd->count("--node-replays") > 0;
    action = [] { return run(io); };
  });
}

}  // namespace sg::cli
