// cmd_ab.cpp: `stepgraph ab --a SEL --b SEL`: two whole-model steps in one process, each built
// from the command line's base (preset, sizes, --arm, settings) changed by its selection
// (ab_selection.h), capturing the same graph key: decode at --max-seqs rows, or the prefill of
// --max-seqs x --context tokens. Both run the same greedy tokens first (hashes of the tokens and of
// the logits bytes), then --reps interleaved repetitions: A then B, each timing --replays whole-step
// replays with CUDA events, then A then B under CUPTI for --node-replays replays (node medians
// summed per op family). Per family and for the whole step: medians, spreads and the verdict of
// ab_compare.h; the GPU's clocks during each side's event-timed replays (gpu_clocks.h, with a
// caution where they differed). --json and --svg write the report. Needs a GPU. Exit 1 when arms alone differ and
// the hashes do not match (arms are byte-identical, docs/ARMS.md). A kernel that faults in a side's
// steps ends the run with that side and its graph named (on_side, ModelStep::check_step);
// --fault-after drills both sides' captured graphs.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/cuda_handles.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/gpu_clocks.h"
#include "engine/text.h"
#include "graphs/arm_tuning.h"
#include "graphs/node_timer.h"
#include "models/model_step.h"
#include "models/serve_trace.h"
#include "tools/cli/ab_compare.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/ab_svg.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

constexpr int kHashSteps = 16;                          // greedy decode steps hashed (decode phase)
constexpr uint64_t kHashBasis = 0xcbf29ce484222325ull;  // token_hash's starting value (FNV-1a)

struct AbOptions {
  BenchOptions b;  // the base: preset, max_seqs, context, phase, arms, settings, reps, replays, node_replays
  std::string a, bsel;
  std::string json, svg;
};

AbOptions ao;

// One side: its choice, its step and the graph it times.
struct Side {
  std::string name;  // "A", "B"
  Selection sel;
  std::unique_ptr<ModelStep> step;
  GraphKey key;
  std::vector<double> step_ms;                            // per repetition
  FamilySamples families;                                 // per repetition, us
  uint64_t tokens_h = kHashBasis, logits_h = kHashBasis;  // chained over the hashed steps
  int unmatched = 0;                                      // CUPTI records outside the graph
  std::vector<ClockSample> clocks;                        // during its event-timed replays, every repetition
};

uint64_t logits_hash(const std::vector<float>& logits, uint64_t h) {
  std::vector<int32_t> words(logits.size());  // the float bytes, as token_hash takes them
  std::memcpy(words.data(), logits.data(), logits.size() * sizeof(float));
  return token_hash(words, h);
}

std::vector<DecodeRequest> decode_batch(const AbOptions& o, int vocab) {
  std::vector<DecodeRequest> batch;
  for (int r = 0; r < o.b.max_seqs; ++r) batch.push_back({r, (r * 7919) % vocab, o.b.context - 1});
  return batch;
}

std::vector<PrefillRequest> prefill_batch(const AbOptions& o, int vocab) {
  std::vector<PrefillRequest> batch;
  for (int r = 0; r < o.b.max_seqs; ++r) {
    PrefillRequest q{r, {}, 0};
    for (int t = 0; t < o.b.context; ++t) q.tokens.push_back((r * 7919 + t * 131) % vocab);
    batch.push_back(std::move(q));
  }
  return batch;
}

// Builds the side's step from `choice` and captures its key (CUPTI attached; with a fault drill,
// the drill's kernel after its node where the graph holds one).
// `arms`: the side's arms and their sources (side_arms): `--arms tune` searches the ops left at
// their defaults only.
void build(Side& s, const AbOptions& o, const Qwen35Config& cfg, const StepChoice& choice, const ResolvedArms& arms) {
  const bool prefill = o.b.phase == "prefill";
  BenchOptions bo = o.b;  // the base's fault drill (o.b.fault) goes to both sides
  apply_settings(bo, choice);
  // Decode: room for the hashed greedy steps after the context.
  s.step = std::make_unique<ModelStep>(cfg, model_step_options(bo, arms, prefill, prefill ? 0 : kHashSteps));
  ModelStep& step = *s.step;
  s.key = prefill ? GraphKey::prefill(step.prefill_keys().back()) : GraphKey::decode(step.keys().back());
  step.capture({s.key}, /*for_timing=*/true);
  if (choice.arms_mode == "tune") {  // what the search timed and kept
    const auto& tuning = step.graphs().manifest(s.key).tuning;
    fmt::print("{} --arms tune: {}\n", s.name, tuning.empty() ? "(no op with two arms here)" : describe_tuning(tuning));
  }
}

// Runs the side's greedy tokens through its graph and hashes them, then stages the timed step's
// inputs. The step's own calls wait for its work, so a fault is reported as this side's.
void hash_tokens(Side& s, const AbOptions& o, const Qwen35Config& cfg) {
  ModelStep& step = *s.step;
  if (o.b.phase == "prefill") {
    const auto batch = prefill_batch(o, cfg.vocab);
    const PrefillOutput po = step.prefill(batch, RunMode::graph);  // no history: the caches do not matter
    s.tokens_h = token_hash(po.tokens, s.tokens_h);
    s.logits_h = logits_hash(po.logits, s.logits_h);
    step.stage_prefill(batch);
    step.sync();
    return;
  }
  step.randomize_caches(7);  // the same caches on both sides
  auto batch = decode_batch(o, cfg.vocab);
  for (int t = 0; t < kHashSteps; ++t) {
    const DecodeOutput d = step.decode(batch, RunMode::graph);
    s.tokens_h = token_hash(d.tokens, s.tokens_h);
    s.logits_h = logits_hash(d.logits, s.logits_h);
    for (size_t r = 0; r < batch.size(); ++r) {
      batch[r].token = d.tokens[r];
      ++batch[r].position;
    }
  }
  step.randomize_caches(7);  // time both sides from the same caches
  step.enqueue(decode_batch(o, cfg.vocab), RunMode::graph);
  step.sync();
}

// One replay of the side's graph through its step, which remembers it for a fault's report.
void replay(const Side& s) {
  if (s.key.kind == GraphKind::prefill) {
    s.step->replay_prefill(s.key.tokens);
  } else {
    s.step->replay(s.key.tokens);
  }
}

// Runs `body`, the side's work: a kernel fault there (a KernelFault naming its graph, from the
// side's step) is reported with the side: "side B (postconv=fast): the graph decode 32 failed while
// it ran: ...". Each side's work is waited for before the other side's starts, so a fault is
// reported by the side that ran it (both steps share one CUDA context).
template <class Body>
void on_side(const Side& s, const Body& body) {
  try {
    body();
  } catch (const KernelFault& e) {
    throw KernelFault(fmt::format("{}: {}", side_label(s.name, s.sel), e.what()));
  }
}

// `replays` replays timed with events: ms per replay.
double time_replays(const Side& s, int replays) {
  const ModelStep& step = *s.step;
  Event start, stop;
  step.check_step(cudaEventRecord(start.get(), step.stream()));
  for (int i = 0; i < replays; ++i) replay(s);
  step.check_step(cudaEventRecord(stop.get(), step.stream()));
  step.check_step(cudaEventSynchronize(stop.get()));
  return Event::elapsed_ms(start, stop) / replays;
}

// `replays` replays under CUPTI: one sample per op family (its nodes' medians summed, us).
void time_families(Side& s, int replays) {
  NodeTimerWindow window;  // abandoned if a fault ends the replays
  for (int i = 0; i < replays; ++i) replay(s);
  s.step->sync();  // a fault in the replays is the side's graph's (NodeTimer::stop would report a bare CUDA error)
  const auto records = window.stop();
  int unmatched = 0;
  std::map<std::string, double> sum;
  for (const NodeStats& st : aggregate(s.step->graphs().manifest(s.key), records, &unmatched)) {
    sum[st.node.label.op] += st.median_us;
  }
  for (const auto& [family, us] : sum) s.families[family].push_back(us);
  s.unmatched += unmatched;
}

// With --fault-after: an error when neither side's graph holds the drill's node (before any step
// runs); else the line saying which sides' graphs fault.
void report_drill(const FaultDrill& drill, const Side (&sides)[2], const std::string& model) {
  if (!drill.on()) return;
  const bool a = sides[0].step->fault_drill_matched(), b = sides[1].step->fault_drill_matched();
  check_fault_matched(drill, a || b, "either side's captured graph", model);
  const char* where = a && b ? "in both sides' graphs (A's steps run first, so A's faults)"
                      : a    ? "in A's graph only (B's graph has no such node)"
                             : "in B's graph only (A's graph has no such node)";
  fmt::print("fault drill: {}, {}\n", describe_drill(drill), where);
}

int run(AbOptions o) {
  const bool prefill = o.b.phase == "prefill";
  if (o.b.replays == 0) o.b.replays = prefill ? 5 : 100;
  if (o.b.node_replays == 0) o.b.node_replays = prefill ? 2 : 10;
  // Everything the user typed is checked before the device is looked for.
  const Selection sel_a = parse_selection(o.a, "--a"), sel_b = parse_selection(o.bsel, "--b");
  const ResolvedArms base_arms = resolve_cli_arms(o.b.arms.arms);
  const Qwen35Config cfg = preset(o.b.preset);
  check_writable(o.json, "--json");  // before the run, so that its results are never lost
  check_writable(o.svg, "--svg");
  check_writable(o.b.lt_choices, "--lt-choices");
  o.b.fault = parse_fault_after(o.b.fault_after);  // a drill in both sides' graphs (model_step_options)
  check_fault_layer(o.b.fault, cfg.layers, cfg.name);
  if (o.b.fault.on()) {
    if (const auto bad = drill_conflicts(sel_a, sel_b, o.b.arms_mode); !bad.empty()) {
      std::string list;
      for (const auto& b : bad) list += "\n  " + b;
      throw Error(fmt::format("ab --fault-after drills both sides' captured graphs, so it cannot go with:{}", list));
    }
  }
  const DeviceInfo dev = probe_device();
  if (!dev.ok)
    throw Error(fmt::format("ab: timing CUDA graphs needs a GPU, and none can be used here: {}", dev.reason));
  for (const auto& w : base_arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  StepChoice base = settings_choice(o.b);
  base.arms = base_arms.arms;
  Side sides[2];
  sides[0].name = "A";
  sides[0].sel = sel_a;
  sides[1].name = "B";
  sides[1].sel = sel_b;
  fmt::print("device: {}\nmodel: {} ({} layers), {} sequences, context {}; phase {}\n", dev.describe(), cfg.name,
             cfg.layers, o.b.max_seqs, o.b.context, o.b.phase);
  add_lt_choices_option(o.b.lt_choices, dev);
  for (Side& s : sides) {
    fmt::print("building and capturing {}: {}...\n", s.name, s.sel.describe());
    std::fflush(stdout);
    on_side(s,
            [&] { build(s, o, cfg, apply(s.sel, base), side_arms(base_arms, s.sel, s.name == "A" ? "--a" : "--b")); });
  }
  write_lt_choices_option(o.b.lt_choices, dev);
  report_drill(o.b.fault, sides, cfg.name);  // both graphs captured, no step run yet
  for (Side& s : sides) on_side(s, [&] { hash_tokens(s, o, cfg); });
  const bool tty = isatty(fileno(stderr));
  for (Side& s : sides) {
    on_side(s, [&] {
      for (int i = 0; i < 3; ++i) replay(s);  // warm-up
      s.step->sync();
    });
  }
  // The clocks, power and clock limits during each side's event-timed replays (gpu_clocks.h).
  ClockSampler clocks(dev.ordinal);
  // Ctrl-C: the repetition under way finishes, then the report covers the repetitions done (exit 130).
  const SigintGuard guard;
  int done = 0;  // repetitions measured
  for (; done < o.b.reps && !sigint_received(); ++done) {
    if (tty) {
      std::fprintf(stderr, "\rab: repetition %d/%d\x1b[K%s", done + 1, o.b.reps, done + 1 == o.b.reps ? "\n" : "");
    }
    for (Side& s : sides) {
      clocks.start();
      on_side(s, [&] { s.step_ms.push_back(time_replays(s, o.b.replays)); });
      const std::vector<ClockSample> got = clocks.stop();
      s.clocks.insert(s.clocks.end(), got.begin(), got.end());
    }
    for (Side& s : sides) on_side(s, [&] { time_families(s, o.b.node_replays); });
  }
  if (done == 0) {
    fmt::print("\ninterrupted (SIGINT) before the first repetition: nothing was measured\n");
    return kInterruptedExit;
  }
  AbReport rep;
  rep.device = dev.describe();
  rep.preset = cfg.name;
  rep.graph = o.b.phase == "prefill"
                  ? fmt::format("prefill {} x {} tokens (bucket {})", o.b.max_seqs, o.b.context, sides[0].key.tokens)
                  : fmt::format("decode b={} (context {})", sides[0].key.tokens, o.b.context);
  rep.reps = done;
  rep.planned_reps = o.b.reps;
  rep.replays = o.b.replays;
  rep.node_replays = o.b.node_replays;
  rep.hash_steps = o.b.phase == "prefill" ? 1 : kHashSteps;
  AbSide* out[2] = {&rep.a, &rep.b};
  StepChoice resolved[2];
  for (int i = 0; i < 2; ++i) {
    resolved[i] = resolved_choice(*sides[i].step, &sides[i].key);
    *out[i] = {sides[i].sel.describe(), resolved[i].arms.describe(), resolved[i].describe_settings(),
               sides[i].tokens_h,       sides[i].logits_h,           std::nullopt};
  }
  // Arms are byte-identical: with the same resolved settings (those this graph uses), the bytes must match.
  rep.hashes_must_match = same_arithmetic(resolved[0], resolved[1], o.b.phase == "prefill");
  rep.step = compare_row("whole step (ms)", sides[0].step_ms, sides[1].step_ms);
  for (int i = 0; i < 2; ++i) out[i]->clocks = clocks.summarize(sides[i].clocks);
  rep.clocks_unavailable = clocks.unavailable_reason();  // empty when sampled
  rep.families = compare_families(sides[0].families, sides[1].families);
  fmt::print("\n{}", format_ab_report(rep));
  if (sides[0].unmatched + sides[1].unmatched > 0) {
    fmt::print("note: {} (A) and {} (B) kernel records matched no node of the graph\n", sides[0].unmatched,
               sides[1].unmatched);
  }
  if (!o.json.empty()) write_output_file(o.json, "--json", ab_json(rep).dump(2) + "\n");
  if (!o.svg.empty()) write_output_file(o.svg, "--svg", ab_svg(rep));
  if (o.b.fault.on() && done == o.b.reps) {  // every result is out: a drill that never came is the run's error
    uint64_t runs[2] = {};
    for (int i = 0; i < 2; ++i) on_side(sides[i], [&] { runs[i] = sides[i].step->fault_drill_runs(); });
    check_fault_fired(o.b.fault, std::max(runs[0], runs[1]),
                      fmt::format("in one side's steps (A's: {}, B's: {})", runs[0], runs[1]));
  }
  return rep.hash_failure() ? 1 : done < o.b.reps ? kInterruptedExit : 0;
}

}  // namespace

void register_ab(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "ab",
      "Compare two selections of arms and settings on one graph of the whole model: two steps in one process, "
      "interleaved repetitions (A, B, A, B, ...) of whole-step replays (CUDA events) and per-node times (CUPTI) per op "
      "family, medians and spreads, a verdict per row, each side's GPU clocks (with a caution where they differed), "
      "and "
      "the hashes of the same greedy tokens. Needs a GPU.");
  AbOptions& o = ao;
  o.b.phase = "decode";
  o.b.replays = 0;       // 0: 100 in decode, 5 in prefill (run() fills it in)
  o.b.node_replays = 0;  // 0: 10 in decode, 2 in prefill
  add_model_step_options(cmd, o.b);
  const std::string grammar = fmt::format(
      "comma-separated key=value items; keys: {}; values: the op's arms (stepgraph arms) or the setting's values; "
      "unnamed ops and settings keep the base (the defaults, --arm and the setting options)",
      valid_selection_keys());
  cmd->add_option("--a", o.a, "Selection A (default: the base itself): " + grammar);
  cmd->add_option("--b", o.bsel, "Selection B, e.g. postconv=fast or attn-decode=simt,gemm=skinny")->required();
  cmd->add_option("--phase", o.b.phase,
                  "decode (the decode graph of --max-seqs rows) or prefill (--max-seqs x --context "
                  "tokens)")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill"}));
  cmd->add_option("--reps", o.b.reps, "Interleaved repetitions (A then B in each); at least 3, for a spread")
      ->capture_default_str()
      ->check(CLI::Range(3, 1000));
  cmd->add_option("--replays", o.b.replays,
                  "Whole-step replays timed with CUDA events per side and repetition (default: 100 in decode, 5 in "
                  "prefill)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--node-replays", o.b.node_replays,
                  "Replays under CUPTI per side and repetition (default: 10 in decode, 2 in prefill)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--json", o.json, "Also write the report (samples, medians, spreads, verdicts, hashes) as JSON");
  cmd->add_option("--svg", o.svg, "Also write a bar chart of the op families, A against B, as SVG");
  add_fault_after_option(cmd, o.b.fault_after,
                         "in both sides' captured graphs (A's steps run first, so where both graphs hold the node "
                         "A's faults); the error names the side and the graph that faulted (find the node with "
                         "generate --check-nodes)");
  cmd->callback([&action] { action = [] { return run(ao); }; });
}

}  // namespace sg::cli
