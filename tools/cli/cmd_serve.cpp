// cmd_serve.cpp: `stepgraph serve`: a serving run. A request trace (built in: --trace-preset
// serve-c32 or mixed, seeded; or --trace FILE.jsonl) goes through the continuous-batching
// scheduler (models/scheduler.h: requests admitted into --concurrency cache slots, prompts
// prefilled in chunks under --prefill-budget, prefill and decode steps interleaved, greedy tokens),
// on the GPU model step (prefill buckets and padded decode keys through their captured graphs) or,
// with --cpu or without a GPU, on the CPU reference model of the 'tiny' preset. It prints
// throughput, time to first token and time per output token (p50/p90/p99), steps per key with
// their floors, eager fallbacks and a hash of every request's tokens; on the GPU, the graph-node
// time per op family summed over a second run of the same trace under CUPTI (so that CUPTI's
// overhead never enters the timed run), with the conv and post-conv families by arm. --json prints
// one JSON object instead. Options that cannot apply to the CPU reference are errors naming them.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/host_memory.h"
#include "engine/text.h"
#include "graphs/capture_sizes.h"
#include "graphs/node_timer.h"
#include "models/memory_plan.h"
#include "models/model_step.h"
#include "models/reference_memory.h"
#include "models/reference_model.h"
#include "models/scheduler.h"
#include "models/serve_gpu.h"
#include "models/serve_metrics.h"
#include "models/serve_reference.h"
#include "models/serve_trace.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

using nlohmann::json;

struct ServeOptions {
  BenchOptions b;  // --preset, --concurrency (max_seqs), --cpu, --arm and the model settings
  std::string trace_preset = "serve-c32";
  std::string trace;  // --trace FILE.jsonl
  int requests = 0;   // 0: the preset's count
  uint64_t seed = 1;  // the synthetic trace, made-up prompt ids and synthetic weights
  int context = 0;    // tokens per slot; 0: the most any request of the trace needs
  int prefill_budget = 2048;
  std::string dtype;  // empty: bf16 on the GPU, f32 on the CPU
  bool json = false, eager = false, no_node_time = false;
};

ServeOptions so;

struct Trace {
  std::vector<ServeRequest> requests;
  std::string name;
};

Trace load_trace(const ServeOptions& o) {
  if (!o.trace.empty()) {
    Trace t{read_trace_jsonl(o.trace), printable(o.trace, 4096)};
    t.name += fmt::format(" ({})", count_of(static_cast<long long>(t.requests.size()), "request"));
    return t;
  }
  const SyntheticTraceOptions p = trace_preset(o.trace_preset, o.requests, o.seed);
  auto range = [](int lo, int hi) { return lo == hi ? fmt::format("{}", lo) : fmt::format("{}..{}", lo, hi); };
  return {synthetic_trace(p),
          fmt::format("{} ({}, prompts of {} tokens, {} new tokens, {}, seed {})", o.trace_preset,
                      count_of(p.requests, "request"), range(p.prompt_min, p.prompt_max), range(p.new_min, p.new_max),
                      p.mean_gap_ms > 0 ? fmt::format("Poisson arrivals every {} ms on average", p.mean_gap_ms)
                                        : std::string("all arriving at 0"),
                      o.seed)};
}

// The tokens request i of the trace needs in its slot, and the request that needs the most.
int64_t slot_tokens(const ServeRequest& q) { return int64_t{q.prompt_len} + q.max_new - 1; }
size_t longest_request(const std::vector<ServeRequest>& trace) {
  size_t longest = 0;
  for (size_t i = 1; i < trace.size(); ++i) longest = slot_tokens(trace[i]) > slot_tokens(trace[longest]) ? i : longest;
  return longest;
}

// --context, or the most tokens any request of the trace needs in its slot.
int context_for(const ServeOptions& o, const std::vector<ServeRequest>& trace) {
  if (o.context > 0) return o.context;
  const int64_t most = trace.empty() ? 1 : std::max<int64_t>(1, slot_tokens(trace[longest_request(trace)]));
  if (most > kMaxTraceTokens) {
    throw Error(
        fmt::format("serve: a request of the trace needs {} tokens of context, more than {}; pass --context "
                    "to reject such requests instead",
                    most, kMaxTraceTokens));
  }
  return static_cast<int>(most);
}

// Without --context the context is the longest request's (context_for): a sentence naming it, for
// an error that the context's memory causes. The trace holds a request (read_trace_jsonl).
std::string context_source(const std::vector<ServeRequest>& trace) {
  const size_t i = longest_request(trace);
  return fmt::format(
      "the context, {} tokens a slot, is what the trace's longest request needs (request {}{}): pass --context "
      "to run the others and reject the longer ones",
      slot_tokens(trace[i]), i, trace[i].line > 0 ? fmt::format(", line {}", trace[i].line) : "");
}

// A progress bar on stderr when it is a terminal (redrawn at most every 100 ms); nothing otherwise.
std::function<void(const Scheduler&, const StepRecord&)> progress_bar() {
  if (!isatty(fileno(stderr))) return {};
  auto last = std::make_shared<double>(-1e9);
  return [last](const Scheduler& s, const StepRecord& r) {
    const int total = static_cast<int>(s.requests().size());
    if (r.end_ms - *last < 100 && !s.done()) return;
    *last = r.end_ms;
    std::fprintf(stderr, "\r%s\x1b[K%s",
                 serve_progress_line(s.resolved(), total, s.generated_tokens(), r.end_ms).c_str(),
                 s.done() ? "\n" : "");
    std::fflush(stderr);
  };
}

// Prints the run: one JSON object (header fields + metrics + requests + extra), or text.
void report(const ServeOptions& o, json header, const ServeResult& res, const ServeMetrics& m, json extra,
            const std::string& text) {
  if (res.slots_busy_at_end != 0 && !res.interrupted) {
    throw Error(fmt::format("serve: {} slots still busy at the end of the run", res.slots_busy_at_end));
  }
  header["interrupted"] = res.interrupted;
  if (res.interrupted && !o.json) {
    fmt::print("\ninterrupted (SIGINT) after {}: the metrics below cover the {} completed by then\n",
               count_of(static_cast<long long>(res.steps.size()), "step"),
               count_of(static_cast<long long>(m.completed), "request"));
  }
  if (o.json) {
    header["metrics"] = metrics_json(m);
    header["requests"] = requests_json(res);
    for (auto it = extra.begin(); it != extra.end(); ++it) header[it.key()] = it.value();
    fmt::print("{}\n", header.dump(2));
    return;
  }
  fmt::print("\n{}{}", format_metrics(m, res), text);
}

// 130 after a Ctrl-C; 1 (with the reason on stderr) when requests were rejected and none
// completed: a run that served nothing failed, though each rejection is reported with the rest.
int exit_code(const ServeResult& res, const ServeMetrics& m) {
  if (res.interrupted) return kInterruptedExit;
  if (m.completed == 0 && m.rejected > 0) {
    fmt::print(stderr,
               "stepgraph: error: serve: every request was rejected ({} of {}; each one's reason is in the "
               "report)\n",
               m.rejected, m.requests);
    return 1;
  }
  return 0;
}

void print_header(const ServeOptions& o, const std::string& text) {
  if (!o.json) fmt::print("{}", text);
}

// The options a CPU reference run cannot apply, each with the reason.
std::vector<std::string> cpu_inapplicable(const ServeOptions& o, const CLI::App& cmd) {
  std::vector<std::string> bad;
  auto given = [&](const char* opt) { return cmd.count(opt) > 0; };
  if (given("--preset") && o.b.preset != "tiny") {
    bad.push_back(fmt::format("--preset {} (the CPU reference runs the 'tiny' preset only)", printable(o.b.preset)));
  }
  if (given("--attn-prefill")) bad.push_back("--attn-prefill (chooses a GPU attention kernel)");
  if (given("--attn-decode")) bad.push_back("--attn-decode (chooses a GPU attention kernel)");
  if (given("--gemm")) bad.push_back("--gemm (chooses a GPU projection kernel)");
  if (given("--pdl")) bad.push_back("--pdl (how GPU kernels are launched)");
  if (given("--swiglu")) bad.push_back("--swiglu (where GPU kernels compute the MLP activation)");
  if (given("--gated-norm")) bad.push_back("--gated-norm (where GPU kernels compute the GDN gated norm)");
  if (given("--mix-round")) bad.push_back("--mix-round (where GPU projections round their output)");
  if (o.eager) bad.push_back("--eager (runs GPU steps without their CUDA graphs)");
  if (o.no_node_time) bad.push_back("--no-node-time (graph-node times are measured with CUPTI on a GPU)");
  return bad;
}

int run_cpu(const ServeOptions& o, const CLI::App& cmd, const ResolvedArms& arms, const std::string& why, Trace trace) {
  if (const auto bad = cpu_inapplicable(o, cmd); !bad.empty()) {
    std::string list;
    for (const auto& b : bad) list += "\n  " + b;
    throw Error(
        fmt::format("serve: this run is the CPU reference model ({}), which cannot apply:{}\nDrop these "
                    "options, or run on a machine with a GPU.",
                    why, list));
  }
  reject_arms_on_cpu(arms, "serve");
  const Qwen35Config cfg = preset("tiny");
  prepare_prompts(trace.requests, cfg.vocab, o.seed);
  const int ctx = context_for(o, trace.requests), slots = o.b.max_seqs;
  const ReferenceMemory need = reference_memory(cfg, slots, ctx, o.prefill_budget);
  check_host_memory(need.total(), "the CPU reference model of 'tiny'",
                    need.describe() + (o.context > 0 ? "" : "; " + context_source(trace.requests)));
  ReferenceOptions ro;
  ro.act = o.dtype == "bf16" ? ref::Store::bf16 : ref::Store::f32;
  ro.chunked_prefill = chunked_delta_prefill(o.b.delta_prefill);  // its own chunked form; auto runs the scan
  ro.ssm_state = reference_ssm_state(o.b.ssm_state);
  const std::string dtype = o.dtype.empty() ? "f32" : o.dtype;
  // Before the model's caches are allocated and zeroed (seconds for thousands of slots).
  print_header(
      o, fmt::format("stepgraph serve: {}; running the CPU reference model of the 'tiny' preset ({} layers, "
                     "hidden {}, vocab {}, {} activations, GDN state {}, {} delta-rule prefill, synthetic weights, "
                     "seed {})\ntrace: {}\nslots {}, context {} per slot, prefill budget {} per step\n"
                     "host memory: {} in all: {}\n",
                     why, cfg.layers, cfg.hidden, cfg.vocab, dtype, o.b.ssm_state,
                     ro.chunked_prefill ? "chunked" : "scan", o.seed, trace.name, slots, count_of(ctx, "token"),
                     count_of(o.prefill_budget, "token"), format_host_bytes(need.total()), need.describe()));
  std::fflush(stdout);
  ReferenceModel model(cfg, synthetic_weights(cfg, o.seed), slots, ctx, ro);
  SchedulerOptions sch;
  sch.slots = slots;
  sch.prefill_budget = o.prefill_budget;
  sch.max_context = ctx;
  sch.decode_keys = decode_capture_sizes(slots);  // the keys a GPU step would capture
  sch.prefill_buckets = prefill_buckets(o.prefill_budget);
  ServeExecutor exec = wall_clock_executor([&](const ScheduledStep& s) { return run_reference_step(model, s); });
  exec.on_step = progress_bar();
  const SigintGuard guard;  // Ctrl-C: the step under way finishes, then the report covers what was done (exit 130)
  exec.stop = [] { return sigint_received(); };
  const ServeResult res = run_serve(trace.requests, sch, exec);
  const ServeMetrics m = serve_metrics(res);
  report(o,
         {{"implementation", "cpu-reference"},
          {"why", why},
          {"preset", cfg.name},
          {"dtype", dtype},
          {"ssm_state", o.b.ssm_state},
          {"trace", trace.name},
          {"slots", slots},
          {"context", ctx},
          {"prefill_budget", o.prefill_budget}},
         res, m, json::object(), "");
  return exit_code(res, m);
}

int run_gpu(const ServeOptions& o, const DeviceInfo& dev, const ResolvedArms& arms, Trace trace) {
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  const Qwen35Config cfg = preset(o.b.preset);
  prepare_prompts(trace.requests, cfg.vocab, o.seed);
  BenchOptions b = o.b;
  b.context = context_for(o, trace.requests);
  ModelStepOptions mo = model_step_options(b, arms, /*prefill=*/false, 0);
  mo.max_prefill_tokens = o.prefill_budget;
  mo.max_prefill_seqs = std::min(b.max_seqs, o.prefill_budget);
  mo.act = o.dtype == "f32" ? DType::f32 : DType::bf16;
  mo.seed = o.seed;
  const bool node_time = !o.no_node_time && !o.eager;
  const RunMode mode = o.eager ? RunMode::eager : RunMode::graph;
  auto t0 = std::chrono::steady_clock::now();
  // The step's plan refuses a context the device cannot hold: with the context taken from the
  // trace, the error names the request that set it.
  std::optional<ModelStep> held;
  try {
    held.emplace(cfg, mo);
  } catch (const PlanDoesNotFit& e) {
    if (o.context > 0) throw;
    throw Error(fmt::format("serve: {}\n{}", context_source(trace.requests), e.what()));
  }
  ModelStep& step = *held;
  step.capture_all(/*for_timing=*/node_time, /*prefill=*/true);
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelStepOptions& r = step.options();  // `auto` settings resolved
  const std::string settings = fmt::format(
      "delta-rule prefill {}, attention prefill {}, attention decode {}, projections {}, pdl {}, swiglu {}, gated "
      "norm {}, mix-round {}, GDN state {}, arms {}",
      delta_prefill_name(r.delta_prefill), attn_prefill_name(r.attn_prefill), attn_decode_name(r.attn_decode),
      gemm_name(r.gemm), pdl_name(r.pdl), swiglu_name(r.swiglu), gated_norm_name(r.gated_norm),
      mix_round_name(r.mix_round), ssm_state_name(r.ssm_state), arms.arms.describe());
  print_header(
      o, fmt::format("device: {}\nmodel: {} ({} layers: {} GDN + {} attention), synthetic {} weights (seed {}); "
                     "{}\ntrace: {}\nslots {}, context {} per slot, prefill budget {} per step "
                     "(buckets up to {}), {} steps; {} graphs captured in {:.1f} s\n",
                     dev.describe(), cfg.name, cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(),
                     dtype_name(mo.act), o.seed, settings, trace.name, r.num_slots, count_of(r.max_context, "token"),
                     count_of(r.max_prefill_tokens, "token"), step.prefill_keys().back(), o.eager ? "eager" : "graphed",
                     step.graphs().captured().size(), setup_s));
  const SchedulerOptions sch = scheduler_options_for(step);
  ServeExecutor exec = wall_clock_executor([&](const ScheduledStep& s) { return run_model_step(step, s, mode); });
  exec.floor_ms = [&](const ScheduledStep& s) { return step_floor_ms(step, s, kFloorGBps, kPeakTflops); };
  exec.on_step = progress_bar();
  const SigintGuard guard;  // Ctrl-C: the step under way finishes, then the report covers what was done (exit 130)
  exec.stop = [] { return sigint_received(); };
  const ServeResult res = run_serve(trace.requests, sch, exec);
  const ServeMetrics m = serve_metrics(res);
  json extra = {{"eager_fallbacks", step.eager_fallbacks()}};
  std::string text = fmt::format(
      "eager fallbacks: {}\nfloor: every weight byte, the recurrent state and the cached "
      "K/V each step touches at 4.3 TB/s, or its FLOPs at {:.0f} TFLOP/s, the larger\n",
      step.eager_fallbacks(), kPeakTflops);
  if (node_time && !res.interrupted) {
    // The same trace again, under CUPTI: node times for the whole run; the timed run above had no
    // profiler attached.
    exec.floor_ms = {};
    NodeTimerWindow window;  // abandoned if a fault ends the run
    const ServeResult again = run_serve(trace.requests, sch, exec);
    const std::vector<KernelRecord> records = window.stop();
    int64_t unmatched = 0;
    const std::vector<FamilyTime> families = family_times(node_samples(step.graphs(), records, &unmatched));
    const bool same = serve_metrics(again).token_hash == m.token_hash;
    // Arrivals after 0 may fall between other steps in the second run: another schedule, other
    // batches. With the same steps, the tokens must be the same.
    const bool same_schedule =
        std::equal(res.steps.begin(), res.steps.end(), again.steps.begin(), again.steps.end(),
                   [](const StepRecord& a, const StepRecord& b) {
                     return a.kind == b.kind && a.key == b.key && a.seqs == b.seqs && a.tokens == b.tokens;
                   });
    extra["node_time"] = {{"families", families_json(families)}, {"kernel_records", records.size()},
                          {"unmatched_records", unmatched},      {"wall_ms", again.wall_ms},
                          {"same_schedule", same_schedule},      {"token_hash_matches", same}};
    text += fmt::format(
        "\ngraph-node time per op family over the whole run (CUPTI, a second run of the same trace: "
        "{:.1f} ms, {} kernel records, {} outside the graphs; {} schedule, token hash {}):\n{}",
        again.wall_ms, records.size(), unmatched, same_schedule ? "the same" : "another",
        same ? "the same" : "different", format_family_table(families));
    if (same_schedule && !same) text += "warning: the same schedule gave other tokens in the second run\n";
  }
  report(o,
         {{"implementation", "gpu"},
          {"device", dev.describe()},
          {"preset", cfg.name},
          {"dtype", std::string(dtype_name(mo.act))},
          {"ssm_state", ssm_state_name(r.ssm_state)},
          {"settings", settings},
          {"trace", trace.name},
          {"slots", r.num_slots},
          {"context", r.max_context},
          {"prefill_budget", r.max_prefill_tokens},
          {"mode", o.eager ? "eager" : "graph"}},
         res, m, extra, text);
  return exit_code(res, m);
}

int run(const ServeOptions& o, const CLI::App& cmd) {
  preset(o.b.preset);                                         // validate the name before anything else
  const ResolvedArms arms = resolve_cli_arms(o.b.arms.arms);  // a bad arm name is an error on every path
  if (!o.trace.empty() && cmd.count("--requests") > 0) {
    throw Error("serve: --requests sizes a built-in trace (--trace-preset); a --trace file holds its own requests");
  }
  Trace trace = load_trace(o);
  std::string why;
  DeviceInfo dev;
  if (o.b.cpu) {
    why = "--cpu given";
  } else {
    dev = probe_device();
    if (!dev.ok) why = dev.reason;
  }
  if (!why.empty()) return run_cpu(o, cmd, arms, why, std::move(trace));
  return run_gpu(o, dev, arms, std::move(trace));
}

}  // namespace

void register_serve(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "serve",
      "A serving run: a request trace through the continuous-batching scheduler (slots, chunked prefill, decode steps "
      "interleaved, greedy tokens) on the GPU model step's captured graphs, or on the CPU reference model of the "
      "'tiny' preset (--cpu, or without a GPU). Prints tokens/s, time to first token and time per output token "
      "(p50/p90/p99), steps per key, eager fallbacks and, on the GPU, the graph-node time per op family over the run.");
  ServeOptions& o = so;
  o.b.preset = "qwen3.5-4b";
  cmd->add_option("--preset", o.b.preset,
                  "Model preset (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv); the CPU reference "
                  "runs 'tiny' only")
      ->capture_default_str();
  auto* tp =
      cmd->add_option("--trace-preset", o.trace_preset,
                      "Built-in trace: serve-c32 (32 requests of 1024 prompt + 128 new tokens, all at 0) or "
                      "mixed (64 requests, prompts of 16..2048 tokens, 8..256 new, Poisson arrivals every 20 ms)")
          ->capture_default_str()
          ->check(CLI::IsMember(trace_preset_names()));
  cmd->add_option("--trace", o.trace,
                  "JSON Lines trace, one request per line: {\"prompt\": [ids] or \"prompt_len\": n, \"max_new\": m, "
                  "\"arrival_ms\": t}")
      ->excludes(tp);
  cmd->add_option("--requests", o.requests, "Requests of the built-in trace (default: the preset's count)")
      ->check(CLI::Range(1, kMaxTraceRequests));
  cmd->add_option("--seed", o.seed, "Seed of the built-in trace, of made-up prompt ids and of the synthetic weights")
      ->capture_default_str()
      ->check(unsigned_integer_check());
  o.b.max_seqs = 32;
  cmd->add_option("--concurrency", o.b.max_seqs, "Cache slots: requests running at once (and the largest decode key)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--prefill-budget", o.prefill_budget,
                  "Prompt tokens per prefill step (the largest prefill bucket); longer prompts are prefilled in chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--context", o.context,
                  "Tokens per cache slot (default: the most any request needs, prompt + max_new - 1); a request that "
                  "needs more is rejected with an error while the others run")
      ->check(CLI::Range(1, kMaxTraceTokens));
  cmd->add_option("--dtype", o.dtype, "Activations and weights: bf16 (default on the GPU) or f32 (default on the CPU)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_flag("--json", o.json, "Print the results as one JSON object (metrics, every request, node times)");
  cmd->add_flag("--cpu", o.b.cpu, "Run the CPU reference model on the tiny preset even when a GPU is present");
  cmd->add_flag("--eager", o.eager, "GPU: run every step eagerly instead of replaying its graph (no node times)");
  cmd->add_flag("--no-node-time", o.no_node_time,
                "GPU: skip the second run under CUPTI (graph-node time per op family)");
  add_arm_options(cmd, o.b.arms);
  cmd->add_option("--delta-prefill", o.b.delta_prefill,
                  "The delta rule in prefill steps: auto, scan, chunked, mma, wgmma or wgmma-t (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("delta-prefill")));
  cmd->add_option("--attn-prefill", o.b.attn_prefill,
                  "GPU: attention in prefill steps: auto, simt, mma or wgmma (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma", "wgmma"}));
  cmd->add_option("--attn-decode", o.b.attn_decode, "GPU: attention in decode steps: auto, simt or mma (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma"}));
  cmd->add_option("--ssm-state", o.b.ssm_state, "The GDN recurrent state's dtype: f32 or bf16 (as bench; GPU and CPU)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("ssm-state")));
  cmd->add_option("--gemm", o.b.gemm,
                  "GPU: the projections: auto, cublas, skinny, mixed, lt, lt-all, wgmma or wgmma-large (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<std::string>(kGemmNames.begin(), kGemmNames.end())));
  add_step_setting_options(cmd, {o.b.pdl, o.b.swiglu, o.b.gated_norm, o.b.mix_round}, "GPU: ");
  cmd->callback([&action, cmd] { action = [cmd] { return run(so, *cmd); }; });
}

}  // namespace sg::cli
