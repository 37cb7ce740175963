// cmd_drift.cpp: `stepgraph drift --b SEL`: how far a selection of settings that changes the
// arithmetic (ssm-state=bf16, attn-decode=simt, gemm=...) moves the model's logits and greedy tokens
// over a long generation. Two whole-model steps in one process (one row each), built from the base
// like `ab`'s sides; both prefill the same synthetic prompt (graphed), then decode --max-new tokens
// (graphed), both consuming A's greedy token at every position (teacher forcing on A), so the
// errors measure B's drift along A's text rather than two texts. Per window of positions: the
// largest and mean normalised max logit error and the top-1 agreement; the first position where
// the greedy tokens differ (drift_stats.h). Ctrl-C stops after the current position and reports
// what was measured (exit 130). Needs a GPU.
#include <fmt/format.h>
#include <algorithm>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/error.h"
#include "models/model_step.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/drift_stats.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

struct DriftOptions {
  std::string preset = "qwen3.5-4b";
  int prompt = 64, max_new = 2048, window = 256;
  bool window_given = false;  // --window on the command line (else the default, at most --max-new)
  uint64_t seed = 1;
  ArmOptions arms;
  std::string a, b, json;
};

DriftOptions dopt;

// The synthetic prompt: `n` token ids spread over the vocabulary.
std::vector<int32_t> prompt_tokens(int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((int64_t{i} * 7919 + 17) % vocab));
  return t;
}

std::unique_ptr<ModelStep> build_side(const DriftOptions& o, const Qwen35Config& cfg, const StepChoice& choice,
                                      const ResolvedArms& arms) {
  BenchOptions bo;
  bo.max_seqs = 1;
  bo.context = o.prompt;
  apply_settings(bo, choice);
  ModelStepOptions so = model_step_options(bo, arms, /*prefill=*/true, o.max_new);
  so.seed = o.seed;
  auto step = std::make_unique<ModelStep>(cfg, so);
  step->capture_all(/*for_timing=*/false, /*prefill=*/true);
  return step;
}

int run(DriftOptions o) {
  if (!o.window_given) o.window = std::min(o.window, o.max_new);  // the default: one row at most
  const Selection sel_a = parse_selection(o.a, "--a"), sel_b = parse_selection(o.b, "--b");
  for (const Selection* s : {&sel_a, &sel_b}) {
    for (const SelectionItem& it : s->items) {
      if (it.key == "arms" && it.value != "fixed") {
        throw Error("drift: arms=tune times arms at capture; the arms are byte-identical, so compare settings");
      }
    }
  }
  if (o.window > o.max_new) {  // only a --window given can be (the default was cut to --max-new)
    throw Error(
        fmt::format("drift: --window {} is more than the {} positions compared (--max-new): give a window of "
                    "at most {} positions, or more positions",
                    o.window, o.max_new, o.max_new));
  }
  const ResolvedArms base_arms = resolve_cli_arms(o.arms.arms);
  const Qwen35Config cfg = preset(o.preset);
  check_positions("drift", o.prompt, o.max_new, cfg.max_positions, cfg.name, "the preset's context length");
  check_writable(o.json, "--json");
  const DeviceInfo dev = probe_device();
  if (!dev.ok) throw Error(fmt::format("drift runs the model's captured graphs, so it needs a GPU: {}", dev.reason));
  for (const auto& w : base_arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  StepChoice base = settings_choice(BenchOptions{});
  base.arms = base_arms.arms;
  fmt::print("device: {}\nmodel: {} ({} layers), synthetic weights (seed {}); prompt {} tokens, then {} generated\n",
             dev.describe(), cfg.name, cfg.layers, o.seed, o.prompt, o.max_new);
  std::unique_ptr<ModelStep> steps[2];
  const Selection* sels[2] = {&sel_a, &sel_b};
  std::string settings[2];
  for (int i = 0; i < 2; ++i) {
    const char* name = i == 0 ? "A" : "B";
    fmt::print("building and capturing {}: {}...\n", name, sels[i]->describe());
    std::fflush(stdout);
    steps[i] = build_side(o, cfg, apply(*sels[i], base), side_arms(base_arms, *sels[i], i == 0 ? "--a" : "--b"));
    settings[i] = resolved_choice(*steps[i]).describe_settings();
    fmt::print("{}: {}\n", name, settings[i]);
  }
  const bool same = same_arithmetic(resolved_choice(*steps[0]), resolved_choice(*steps[1]), false) &&
                    same_arithmetic(resolved_choice(*steps[0]), resolved_choice(*steps[1]), true);
  if (same) fmt::print("note: A and B run the same arithmetic (arms are byte-identical): expect no drift\n");

  const std::vector<int32_t> prompt = prompt_tokens(o.prompt, cfg.vocab);
  DriftStats stats(o.window);
  const SigintGuard guard;
  Progress progress("drift", o.max_new);
  int32_t token = 0;  // A's greedy token: the next input of both sides
  {
    const PrefillOutput pa = steps[0]->prefill({PrefillRequest{0, prompt, 0}}, RunMode::graph);
    const PrefillOutput pb = steps[1]->prefill({PrefillRequest{0, prompt, 0}}, RunMode::graph);
    stats.add(pa.logits, pb.logits, pa.tokens[0], pb.tokens[0]);
    token = pa.tokens[0];
  }
  progress.update(1);
  for (int i = 1; i < o.max_new && !sigint_received(); ++i) {
    const DecodeRequest req{0, token, o.prompt + i - 1};
    const DecodeOutput da = steps[0]->decode({req}, RunMode::graph);
    const DecodeOutput db = steps[1]->decode({req}, RunMode::graph);
    stats.add(da.logits, db.logits, da.tokens[0], db.tokens[0]);
    token = da.tokens[0];
    progress.update(i + 1);
  }
  progress.finish();
  const bool interrupted = stats.positions() < o.max_new;
  fmt::print("\nB against A, teacher-forced on A's greedy tokens (position 0: the prompt's last token):\n{}",
             format_drift(stats));
  if (interrupted) fmt::print("interrupted (SIGINT) after {} of {} positions\n", stats.positions(), o.max_new);
  if (!o.json.empty()) {
    nlohmann::json j = drift_json(stats);
    j["device"] = dev.describe();
    j["preset"] = cfg.name;
    j["seed"] = o.seed;
    j["prompt"] = o.prompt;
    j["max_new"] = o.max_new;
    j["a"] = {{"selection", sel_a.describe()}, {"settings", settings[0]}};
    j["b"] = {{"selection", sel_b.describe()}, {"settings", settings[1]}};
    j["interrupted"] = interrupted;
    write_output_file(o.json, "--json", j.dump(2) + "\n");
  }
  return interrupted ? kInterruptedExit : 0;
}

}  // namespace

void register_drift(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "drift",
      "How far selection B (settings that change the arithmetic, e.g. ssm-state=bf16) moves the model's logits and "
      "greedy tokens from selection A over a long generation: both prefill the same synthetic prompt and then "
      "decode, each position fed A's greedy token; per window of positions the largest and mean normalised logit "
      "error and the top-1 agreement, and the first position where the greedy tokens differ. Needs a GPU.");
  DriftOptions& o = dopt;
  cmd->add_option("--preset", o.preset, "model preset (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv)")
      ->capture_default_str();
  const std::string grammar =
      fmt::format("comma-separated key=value items; keys: {}; unnamed ops and settings keep the defaults and --arm",
                  valid_selection_keys());
  cmd->add_option("--a", o.a, "Selection A, the reference (default: the defaults): " + grammar);
  cmd->add_option("--b", o.b, "Selection B, e.g. ssm-state=bf16")->required();
  cmd->add_option("--prompt", o.prompt, "Prompt tokens (synthetic ids), prefilled in one graphed step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-new", o.max_new, "Positions compared: the prompt's last token and the generated ones")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxNewTokens));
  cmd->add_option("--window", o.window,
                  "Positions per row of the table (at most --max-new; by default 256 or --max-new)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxNewTokens));
  cmd->add_option("--seed", o.seed, "Seed of the synthetic weights (an integer in [0, 2^64 - 1])")
      ->capture_default_str()
      ->check(unsigned_integer_check());
  add_arm_options(cmd, o.arms);
  cmd->add_option("--json", o.json, "Write the result as JSON to this file");
  cmd->callback([cmd, &action] {
    dopt.window_given = cmd->count("--window") > 0;
    action = [] { return run(dopt); };
  });
}

}  // namespace sg::cli
