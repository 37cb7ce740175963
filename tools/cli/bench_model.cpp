// bench_model.cpp: `stepgraph bench --workload model`: the whole model's steps on the GPU.
//   decode (decode-b32 of docs/BENCHMARKS.md with --max-seqs 32 --context 1024): every sequence continues
//     at position context - 1 over caches filled with random values (attention reads `context`
//     keys); one graph per batch key; graphed and eager step times with events, then per-node
//     times with CUPTI summed per op family, beside the step's bandwidth floor (weights + recurrent
//     state read and written + KV read, over 4.3 TB/s).
//   prefill (prefill-b32: --max-seqs sequences of --context fresh prompt tokens in one step): the
//     bucket's graph and the eager launch sequence, timed the same way, with op-family shares.
// Without a GPU: the CPU reference of the whole model on the tiny preset.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/gpu_clocks.h"
#include "engine/text.h"
#include "graphs/export.h"
#include "graphs/marginal.h"
#include "graphs/node_timer.h"
#include "graphs/step_graphs.h"
#include "kernels/op_bytes.h"
#include "models/lt_choices.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/clock_report.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

constexpr int kCheckSteps = 128;  // decode steps after the prefill whose logits must be finite

size_t count_nonfinite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

// Times `body` (enqueues one step of `step` on its stream): warm-up, then reps x replays, median per
// step in ms. A kernel that faults in a step is reported as that step's (ModelStep::check_step).
Spread time_steps(const ModelStep& step, int reps, int replays, const std::function<void()>& body) {
  for (int i = 0; i < 3; ++i) body();
  Event start, stop;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    step.check_step(cudaEventRecord(start.get(), step.stream()));
    for (int i = 0; i < replays; ++i) body();
    step.check_step(cudaEventRecord(stop.get(), step.stream()));
    step.check_step(cudaEventSynchronize(stop.get()));
    ms.push_back(Event::elapsed_ms(start, stop) / replays);
  }
  return spread(ms);
}

// Per-node CUPTI times of `replays` graph replays, printed and returned per op family.
// With --node-replays 0 (no CUPTI: the run can go under ncu, nsys or compute-sanitizer), only the
// DOT export (from the manifest) is written and the table is empty.
nlohmann::json op_family_table(const BenchOptions& o, const ModelStep& step, int key, const Manifest& m, int replays,
                               const std::function<void()>& replay, const std::vector<FamilyWork>& work,
                               const std::string& note) {
  if (o.node_replays == 0) {
    fmt::print("  per-node timing off (--node-replays 0)\n");
    write_exports(o, key, m, {}, {});
    return nlohmann::json::object();
  }
  NodeTimerWindow window;  // abandoned if a fault ends the replays
  for (int i = 0; i < replays; ++i) replay();
  step.sync();  // a fault in the replays is the graph's (NodeTimer::stop would report a bare CUDA error)
  auto records = window.stop();
  int unmatched = 0;
  auto stats = aggregate(m, records, &unmatched);
  std::vector<FamilyRow> rows = op_families(stats);
  for (const FamilyWork& w : work) add_family_work(rows, w);
  double total = 0;
  for (const auto& r : rows) total += r.us;
  fmt::print("  {} kernel nodes{}; per op family (sum of node medians {:.1f} us):\n", stats.size(),
             unmatched ? fmt::format(", {} unmatched records", unmatched) : "", total);
  fmt::print("{}", format_family_table(rows, kFloorGBps, kGemmTflops, note));
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& r : rows) {
    ops[r.op] = {{"nodes", r.nodes}, {"us", r.us}, {"bytes", r.bytes}, {"flops", r.flops}};
    if (r.waves_max > 0) ops[r.op]["waves"] = {r.waves_min, r.waves_max};
    if (r.us > 0 && r.floor_us(kFloorGBps, kGemmTflops) > 0) {
      ops[r.op]["floor_fraction"] = r.floor_us(kFloorGBps, kGemmTflops) / r.us;
    }
  }
  write_exports(o, key, m, stats, records);
  return ops;
}

}  // namespace

// Without a GPU, the model workload runs the CPU reference model on the tiny preset: a prefill of
// `context` tokens per sequence (after `history` tokens prefilled first, untimed), then decode steps
// of the whole batch, timed.
int run_cpu_model(const BenchOptions& o, const std::string& why) {
  fmt::print("stepgraph bench: {}\n", why);
  const Qwen35Config cfg = preset("tiny");
  const int B = std::min(o.max_seqs, 8), ctx = std::min(o.context, 64), hist = std::min(o.history, 64);
  std::vector<std::string> capped;  // the options this run takes less of than given
  if (B < o.max_seqs) capped.push_back(fmt::format("--max-seqs {} to 8", o.max_seqs));
  if (ctx < o.context) capped.push_back(fmt::format("--context {} to 64", o.context));
  if (hist < o.history) capped.push_back(fmt::format("--history {} to 64", o.history));
  fmt::print(
      "Running the CPU reference of the whole model on the 'tiny' preset instead ({} layers, hidden {}, vocab {}): "
      "a prefill of {} of {}{}, then decode steps of {}{}.\n",
      cfg.layers, cfg.hidden, cfg.vocab, count_of(B, "sequence"), count_of(ctx, "token"),
      hist > 0 ? fmt::format(" after {} of history", count_of(hist, "token")) : std::string(), count_of(B, "row"),
      capped.empty() ? std::string() : fmt::format(" (capped here: {})", fmt::join(capped, ", ")));
  ReferenceOptions ro;
  ro.chunked_prefill = chunked_delta_prefill(o.delta_prefill);  // its own chunked form (double); auto runs the scan
  ro.ssm_state = reference_ssm_state(o.ssm_state);
  const std::string delta_form = ro.chunked_prefill ? "chunked" : "scan";
  fmt::print("delta-rule prefill: {} (the CPU reference's form for --delta-prefill {})\n", delta_form, o.delta_prefill);
  ReferenceModel model(cfg, synthetic_weights(cfg, 1), B, hist + ctx + 64, ro);
  // Sequence b's tokens [from, to) of its token stream.
  auto tokens_of = [&](int from, int to) {
    std::vector<Sequence> seqs;
    for (int b = 0; b < B; ++b) {
      Sequence sq;
      sq.slot = b;
      for (int t = from; t < to; ++t) sq.tokens.push_back((b * 131 + t * 17) % cfg.vocab);
      seqs.push_back(std::move(sq));
    }
    return seqs;
  };
  if (hist > 0) model.prefill(tokens_of(0, hist));  // the history, untimed
  const std::vector<Sequence> seqs = tokens_of(hist, hist + ctx);
  auto t0 = std::chrono::steady_clock::now();
  model.prefill(seqs);
  const double prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int> slots(static_cast<size_t>(B));
  std::vector<int64_t> tokens(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    slots[static_cast<size_t>(b)] = b;
    tokens[static_cast<size_t>(b)] = b;
  }
  const int steps = 16;
  double sum = 0;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    auto logits = model.decode(slots, tokens);
    for (int b = 0; b < B; ++b) {  // greedy: feed back the argmax
      const float* row = logits.data() + static_cast<size_t>(b) * cfg.vocab;
      tokens[static_cast<size_t>(b)] = std::max_element(row, row + cfg.vocab) - row;
      sum += row[tokens[static_cast<size_t>(b)]];
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  fmt::print("prefill {} x {} tokens{}: {:.2f} ms; decode step (batch {}): {:.3f} ms; checksum {:.6f}\n", B, ctx,
             hist > 0 ? fmt::format(" after {} of history", hist) : std::string(), prefill_ms, B, ms, sum);
  write_cpu_json(o, {{"implementation", "cpu-reference"},
                     {"why", why},
                     {"preset", cfg.name},
                     {"workload", "model"},
                     {"sequences", B},
                     {"context", ctx},
                     {"history", hist},
                     {"prefill_ms", prefill_ms},
                     {"decode_steps", steps},
                     {"decode_step_ms", ms},
                     {"ssm_state", o.ssm_state},
                     {"delta_prefill", delta_form},
                     {"checksum", sum}});
  return 0;
}

void print_tuning(const ModelStep& step) {
  if (!step.options().tune_arms) return;
  for (const GraphKey& key : step.graphs().captured()) {
    const Manifest& m = step.graphs().manifest(key);
    fmt::print("tuned arms, {}: {}\n", describe(key),
               m.tuning.empty() ? "(no op with two arms here)" : describe_tuning(m.tuning));
  }
}

void add_lt_choices_option(const std::string& path, const DeviceInfo& dev, std::FILE* log) {
  if (path.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fmt::print(log, "cuBLASLt choices: {} does not exist yet; the shapes are timed and their choices written to it\n",
               printable(path, 4096));
    return;
  }
  const size_t added = load_lt_choices(path, dev.ordinal, dev.name);
  fmt::print(log, "cuBLASLt choices: {} read from {} (those shapes are not timed)\n", added, printable(path, 4096));
}

void write_lt_choices_option(const std::string& path, const DeviceInfo& dev, std::FILE* log) {
  if (path.empty()) return;
  write_output_file(path, "--lt-choices", lt_choices_json(dev.ordinal, dev.name).dump(1) + "\n", log);
}

ModelStepOptions model_step_options(const BenchOptions& o, const ResolvedArms& arms, bool prefill, int extra_context) {
  ModelStepOptions opts;
  opts.num_slots = o.max_seqs;
  opts.max_context = o.context + extra_context;
  opts.max_decode_batch = o.max_seqs;
  const int64_t prefill_tokens = int64_t{o.max_seqs} * o.context;
  require(!prefill || prefill_tokens <= (int64_t{1} << 30), "a prefill of {} x {} tokens is too large for one step",
          o.max_seqs, o.context);
  opts.max_prefill_tokens = prefill ? static_cast<int>(prefill_tokens) : 0;
  opts.max_prefill_seqs = o.max_seqs;
  opts.arms = arms.arms;
  opts.delta_prefill = parse_delta_prefill(o.delta_prefill);
  opts.attn_prefill = parse_attn_prefill(o.attn_prefill);
  opts.attn_decode = parse_attn_decode(o.attn_decode);
  opts.gemm = parse_gemm(o.gemm);
  opts.pdl = parse_pdl(o.pdl);
  opts.swiglu = parse_swiglu(o.swiglu);
  opts.gated_norm = parse_gated_norm(o.gated_norm);
  opts.mix_round = parse_mix_round(o.mix_round);
  opts.ssm_state = parse_ssm_state(o.ssm_state);
  opts.tune_arms = o.arms_mode == "tune";
  for (size_t i = 0; i < kNumOps; ++i) opts.fixed_ops[i] = arms.source[i] != "default";  // the user's choice
  opts.seed = 1;
  opts.fault_layer = o.fault.layer;
  opts.fault_op = o.fault.op;
  opts.fault_run = o.fault.run;
  return opts;
}

void check_fault_drill(const BenchOptions& o, const std::string& command) {
  if (!o.fault.on()) return;
  std::vector<std::string> bad;
  if (o.arms_mode == "tune") {
    bad.push_back("--arms tune (the arms are timed on graphs of their own at capture, which the drill would fault)");
  }
  if (bad.empty()) return;
  std::string list;
  for (const auto& b : bad) list += "\n  " + b;
  throw Error(fmt::format("{} --fault-after drills the captured graphs, so it cannot go with:{}", command, list));
}

void check_history(const BenchOptions& o, const std::string& command, bool gpu) {
  if (o.history <= 0) return;
  if (o.workload != "model") {
    throw Error(fmt::format("{} --history applies to the whole model's prefill step; --workload {} runs none", command,
                            o.workload));
  }
  if (o.phase == "decode") {
    throw Error(
        fmt::format("{} --history applies to the prefill step; --phase decode runs none (use --phase "
                    "prefill)",
                    command));
  }
  if (gpu && o.phase != "prefill") {
    throw Error(
        fmt::format("{} --history on the GPU sizes every slot's caches for the history, the prompt and the "
                    "decode steps after it, and the decode graphs' attention splits follow that size, so "
                    "their times would not be those of --history 0: use --phase prefill",
                    command));
  }
}

nlohmann::json report_clocks(const std::optional<ClockSummary>& c) {
  if (c) fmt::print("  clocks during the graph's timed replays: {}\n", describe_clocks(*c));
  return clocks_json(c);
}

namespace {

// "  (SM 1485 MHz median, held down by the power cap)" after a graph's summary line where a limit
// held its clock down; empty otherwise.
std::string summary_clocks(const std::optional<ClockSummary>& c) {
  const std::string note = c ? clock_limit_note(*c) : "";
  return note.empty() ? note : "  (" + note + ")";
}

}  // namespace

int run_gpu_model(const BenchOptions& o, const DeviceInfo& dev) {
  // Ctrl-C: the graph being measured finishes, then the run stops and reports (and writes) what it
  // measured, marked interrupted, and exits with 130. A second Ctrl-C ends the process.
  const SigintGuard guard;
  const Qwen35Config cfg = preset(o.preset);
  ResolvedArms arms = resolve_cli_arms(o.arms.arms);
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  const bool do_decode = o.phase != "prefill", do_prefill = o.phase != "decode";
  // Prefill: room for the history before the prompt and the 128 decode steps of the finiteness check after it.
  const ModelStepOptions opts = model_step_options(o, arms, do_prefill, do_prefill ? o.history + kCheckSteps : 0);
  fmt::print("device: {}\n", dev.describe());
  fmt::print(
      "workload: {} whole-model steps ({}), {} layers ({} GDN + {} attention), {} sequences, context {} per "
      "sequence{}, synthetic bf16 weights\narms: {}\n",
      cfg.name, o.phase, cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(), o.max_seqs, o.context,
      o.history > 0 ? fmt::format(" (prefill: after {} tokens of history)", o.history) : "", arms.arms.describe());
  add_lt_choices_option(o.lt_choices, dev);
  auto t0 = std::chrono::steady_clock::now();
  ModelStep step(cfg, opts);
  const std::string delta_prefill = delta_prefill_name(step.options().delta_prefill);  // `auto` resolved
  fmt::print("delta-rule prefill: {}{}\n", delta_prefill, o.delta_prefill == "auto" ? " (auto)" : "");
  const std::string attn_prefill = attn_prefill_name(step.options().attn_prefill);  // `auto` resolved
  fmt::print("attention prefill: {}{}\n", attn_prefill, o.attn_prefill == "auto" ? " (auto)" : "");
  const std::string attn_decode = attn_decode_name(step.options().attn_decode);  // `auto` resolved
  fmt::print("attention decode: {}{}\n", attn_decode, o.attn_decode == "auto" ? " (auto)" : "");
  const std::string gemm = gemm_name(step.options().gemm);  // `auto` resolved
  fmt::print("projections: {}{}\n", gemm, o.gemm == "auto" ? " (auto)" : "");
  const std::string pdl = pdl_name(step.options().pdl);  // `auto` resolved
  fmt::print("programmatic dependent launch: {}{}\n", pdl, o.pdl == "auto" ? " (auto)" : "");
  const std::string swiglu = swiglu_name(step.options().swiglu);
  fmt::print("MLP activation: {}\n", swiglu == "gemm" ? "in the gate_up GEMM's epilogue (gemm)"
                                     : swiglu == "kernel"
                                         ? "the swiglu kernel (kernel)"
                                         : "the gate_up GEMM's epilogue where it measured faster (auto)");
  const std::string gated_norm = gated_norm_name(step.options().gated_norm);
  fmt::print("GDN gated norm (decode): {}\n", gated_norm == "delta" ? "in the delta rule's epilogue (delta)"
                                              : gated_norm == "kernel"
                                                  ? "the gated_rmsnorm kernel (kernel)"
                                                  : "the delta rule's epilogue on small steps, else the kernel (auto)");
  const std::string mix_round = mix_round_name(step.options().mix_round);  // `auto` resolved
  fmt::print("residual projections' output rounded: {}{}\n",
             mix_round == "norm" ? "in the RMSNorm after them, from f32 (norm)"
             : mix_round == "partials"
                 ? "in the RMSNorm after them, which sums a skinny GEMM's split-K partials (partials)"
             : mix_round == "residual" ? "as partials, and cublasGemmEx adds them to the residual stream (residual)"
                                       : "in the GEMM (gemm)",
             o.mix_round == "auto" ? " (auto)" : "");
  const std::string ssm_state = ssm_state_name(step.options().ssm_state);
  fmt::print("GDN recurrent state: {}\n",
             ssm_state == "bf16" ? "bf16 (rounded after each token; half the bytes)" : "f32");
  fmt::print("arena: {} (weights {}, caches, activations) in {:.1f} s; capturing {} decode + {} prefill graphs...\n",
             format_bytes(static_cast<double>(step.arena_bytes())), format_bytes(step.weight_bytes()),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), step.keys().size(),
             step.prefill_keys().size());
  t0 = std::chrono::steady_clock::now();
  step.capture_all(/*for_timing=*/o.node_replays > 0, do_prefill);
  fmt::print("captured in {:.1f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  write_lt_choices_option(o.lt_choices, dev);  // every shape was tuned before its capture
  check_fault_matched(o.fault, step.fault_drill_matched(), "the captured graphs", cfg.name);
  if (o.fault.on()) fmt::print("fault drill: {}\n", describe_drill(o.fault));
  print_tuning(step);
  step.randomize_caches(7);  // after the capture: tuning (--arms tune) runs steps on the caches
  std::vector<std::string> summary;
  nlohmann::json graphs = nlohmann::json::array();
  cudaStream_t s = step.stream();
  // The clocks, power and clock limits while each graph's replays are timed (gpu_clocks.h).
  ClockSampler clocks(dev.ordinal);
  if (!clocks.available()) fmt::print("clocks: not sampled ({})\n", clocks.unavailable_reason());

  const size_t planned = (do_decode ? step.keys().size() : 0) + (do_prefill ? 1 : 0);
  if (do_decode) {
    for (auto it = step.keys().rbegin(); it != step.keys().rend() && !sigint_received(); ++it) {
      const int key = *it;
      std::vector<DecodeRequest> batch;
      for (int r = 0; r < key; ++r) batch.push_back({r, (r * 7919) % cfg.vocab, o.context - 1});
      step.enqueue(batch, RunMode::graph);
      clocks.start();
      const Spread g = time_steps(step, o.reps, o.replays, [&] { step.replay(key); });
      const std::optional<ClockSummary> clock_summary = clocks.summarize(clocks.stop());
      // Eager: the same launches from the host each step, metadata upload included (the caches
      // keep changing, which changes no launch).
      const Spread e =
          time_steps(step, o.reps, std::max(1, o.replays / 4), [&] { step.enqueue(batch, RunMode::eager); });
      step.enqueue(batch, RunMode::graph);
      const double floor_bytes = step.weight_bytes() + 2.0 * key * step.state_bytes_per_slot() +
                                 double(key) * o.context * step.kv_bytes_per_token();
      const double floor_ms = floor_bytes / (kFloorGBps * 1e6);
      fmt::print(
          "\ngraph decode b={}: step {:.3f} ms median (min {:.3f}, max {:.3f}; {} reps x {} replays); eager "
          "{:.3f} ms; floor {:.3f} ms ({} at 4.3 TB/s) = {:.0f}% of the graphed step\n",
          key, g.median, g.min, g.max, o.reps, o.replays, e.median, floor_ms, format_bytes(floor_bytes),
          100 * floor_ms / g.median);
      const nlohmann::json clock_json = report_clocks(clock_summary);
      // The KV bytes of the workload's context, which the graph's node labels cannot know.
      const FamilyWork kv{"attention.decode", double(key) * o.context * step.kv_bytes_per_token(), 0};
      nlohmann::json ops = op_family_table(
          o, step, key, step.manifest(key), o.node_replays, [&] { step.replay(key); }, {kv},
          fmt::format("attention.decode's KV reads of {} positions a sequence added", o.context));
      if (o.marginal && (key == step.keys().front() || key == step.keys().back())) {
        // A kernel that faults in these replays is reported as the graph's (ModelStep::check_replays).
        const MarginalReport mr = marginal_costs(
            step.graph(key), step.manifest(key), s, [](const ManifestNode& n) { return n.label.op; }, o.reps, o.replays,
            terminal_progress(fmt::format("marginal costs, decode b={}", key)), {},
            [&](cudaError_t e, const std::string& group) {
              step.check_replays(GraphKey::decode(key), e, marginal_replay_note(group));
            });
        std::map<std::string, double> node_us;  // the op-family table's node time a step
        for (const auto& [op, row] : ops.items()) node_us[op] = row.value("us", 0.0);
        fmt::print("{}", format_marginal_table(mr, node_us));
        for (const auto& g : mr.groups) {
          if (ops.contains(g.group)) ops[g.group]["marginal_us"] = 1000.0 * g.marginal_ms;
        }
      }
      summary.push_back(fmt::format("  decode b={:<5} graph {:>9.3f} ms  eager {:>9.3f} ms  floor {:>7.3f} ms{}", key,
                                    g.median, e.median, floor_ms, summary_clocks(clock_summary)));
      graphs.push_back({{"kind", "decode"},
                        {"batch", key},
                        {"step_ms", {{"median", g.median}, {"min", g.min}, {"max", g.max}}},
                        {"eager_ms", e.median},
                        {"floor_ms", floor_ms},
                        {"floor_bytes", floor_bytes},
                        {"clocks", clock_json},
                        {"ops", ops},
                        {"manifest", to_json(step.manifest(key))}});
    }
  }
  if (do_prefill && !sigint_received()) {
    std::vector<PrefillRequest> batch;
    for (int r = 0; r < o.max_seqs; ++r) {
      PrefillRequest q{r, {}, o.history};  // history: the randomized caches' first o.history positions
      for (int t = 0; t < o.context; ++t) q.tokens.push_back((r * 7919 + t * 131) % cfg.vocab);
      batch.push_back(std::move(q));
    }
    const int bucket = step.stage_prefill(batch);
    const int reps = std::max(1, std::min(o.reps, 3)), replays = std::max(1, std::min(o.replays, 3));
    // Every replay prefills the same sequences again: without history the states are rewritten; with
    // it each replay continues from the states the previous one left and rewrites the same KV
    // positions (the same work).
    clocks.start();
    const Spread g = time_steps(step, reps, replays, [&] { step.replay_prefill(bucket); });
    const std::optional<ClockSummary> clock_summary = clocks.summarize(clocks.stop());
    const Spread e = time_steps(step, reps, replays, [&] { step.launch_prefill_eager(bucket); });
    // Weights, the states (written; read too with history), the prompt's KV written and the
    // history's KV read.
    const double seqs = o.max_seqs;
    const double floor_bytes = step.weight_bytes() + (o.history > 0 ? 2.0 : 1.0) * seqs * step.state_bytes_per_slot() +
                               seqs * (double(o.context) + o.history) * step.kv_bytes_per_token();
    const double floor_ms = floor_bytes / (kFloorGBps * 1e6);
    const std::string after = o.history > 0 ? fmt::format(" after {} of history", o.history) : "";
    fmt::print(
        "\ngraph prefill {} x {} tokens{} (bucket {}): step {:.2f} ms median (min {:.2f}, max {:.2f}; {} reps x {} "
        "replays); eager {:.2f} ms; bandwidth floor {:.3f} ms ({})\n",
        o.max_seqs, o.context, after, bucket, g.median, g.min, g.max, reps, replays, e.median, floor_ms,
        format_bytes(floor_bytes));
    const nlohmann::json clock_json = report_clocks(clock_summary);
    // The causal products of the workload's sequences (q K^T and P V: 4 Hq D FLOPs a query-key pair
    // at or before the query, the history's keys included), which the graph's node labels cannot know.
    const int attn_layers = cfg.num_full_attention();
    const double pairs = seqs * op_bytes::causal_pairs(o.context, o.history);
    const FamilyWork causal{"attention.prefill", 0, 4.0 * cfg.Hq * cfg.D * pairs * attn_layers};
    // The delta rule's products in the chunked WY form (op_bytes.h), per the workload's sequences.
    const FamilyWork wy{"delta_rule.prefill", 0,
                        double(o.max_seqs) * cfg.num_linear_attention() *
                            op_bytes::delta_rule_wy_flops(o.context, cfg.gdn.Hv, cfg.gdn.Dk, cfg.gdn.Dv)};
    nlohmann::json ops = op_family_table(
        o, step, bucket, step.prefill_manifest(bucket), std::max(1, std::min(o.node_replays, 3)),
        [&] { step.replay_prefill(bucket); }, {causal, wy},
        "attention.prefill's causal q K^T and P V FLOPs and delta_rule.prefill's WY-form products added; attention's "
        "KV reads are not labelled");
    // A prefill step is bound by its products, not its bytes: its FLOPs (the nodes' labelled
    // products, and the causal and WY products above) at 790 TFLOP/s.
    double flops = causal.flops + wy.flops;
    for (const ManifestNode& n : step.prefill_manifest(bucket).nodes) flops += n.label.flops;
    const double compute_ms = flops / (kGemmTflops * 1e9);
    fmt::print("compute floor: {:.1f} TFLOP at {:.0f} TFLOP/s = {:.1f} ms = {:.0f}% of the graphed step\n",
               flops / 1e12, kGemmTflops, compute_ms, 100 * compute_ms / g.median);
    summary.push_back(fmt::format(
        "  prefill {}x{}{} graph {:>9.2f} ms  eager {:>9.2f} ms  floor {:>7.3f} ms  compute floor {:.1f} ms{}",
        o.max_seqs, o.context, o.history > 0 ? fmt::format("+h{}", o.history) : "", g.median, e.median, floor_ms,
        compute_ms, summary_clocks(clock_summary)));
    // The synthetic weights must keep every activation finite: the prefill's logits, then those of
    // kCheckSteps greedy decode steps of the whole batch.
    const PrefillOutput po = step.prefill(batch, RunMode::graph);
    size_t bad = count_nonfinite(po.logits);
    std::vector<int32_t> toks = po.tokens;
    for (int t = 0; t < kCheckSteps; ++t) {
      std::vector<DecodeRequest> dec;
      for (int r = 0; r < o.max_seqs; ++r) dec.push_back({r, toks[static_cast<size_t>(r)], o.history + o.context + t});
      const DecodeOutput d = step.decode(dec, RunMode::graph);
      bad += count_nonfinite(d.logits);
      toks = d.tokens;
    }
    fmt::print("finiteness: logits of the prefill and {} greedy decode steps after it: {}\n", kCheckSteps,
               bad == 0 ? std::string("all finite") : fmt::format("{} NaN or Inf values", bad));
    summary.push_back(
        fmt::format("  logits finite after prefill + {} decode steps: {}", kCheckSteps, bad == 0 ? "yes" : "NO"));
    graphs.push_back({{"kind", "prefill"},
                      {"bucket", bucket},
                      {"sequences", o.max_seqs},
                      {"tokens_per_sequence", o.context},
                      {"history", o.history},
                      {"step_ms", {{"median", g.median}, {"min", g.min}, {"max", g.max}}},
                      {"eager_ms", e.median},
                      {"floor_ms", floor_ms},
                      {"compute_floor_ms", compute_ms},
                      {"flops", flops},
                      {"clocks", clock_json},
                      {"ops", ops},
                      {"manifest", to_json(step.prefill_manifest(bucket))}});
  }
  const bool interrupted = sigint_received();
  if (interrupted) {
    fmt::print("\ninterrupted (SIGINT) after {} of {} graphs: what was measured so far follows\n", graphs.size(),
               planned);
  }
  fmt::print("\nsummary (median step times; eager fallbacks: {}):\n", step.eager_fallbacks());
  for (const auto& line : summary) fmt::print("{}\n", line);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    require(static_cast<bool>(f), "cannot write {}", o.json);
    f << nlohmann::json{{"device", dev.describe()},
                        {"preset", cfg.name},
                        {"arms", arms.arms.describe()},
                        {"delta_prefill", delta_prefill},
                        {"attn_prefill", attn_prefill},
                        {"attn_decode", attn_decode},
                        {"gemm", gemm},
                        {"pdl", pdl},
                        {"swiglu", swiglu},
                        {"gated_norm", gated_norm},
                        {"mix_round", mix_round},
                        {"ssm_state", ssm_state},
                        {"workload", "model"},
                        {"context", o.context},
                        {"history", o.history},
                        {"interrupted", interrupted},
                        {"graphs", graphs}}
             .dump(2)
      << "\n";
    fmt::print("wrote {}\n", o.json);
  }
  // Every result is out: a drill that never came is the run's error.
  if (!interrupted) check_fault_fired(o.fault, step.fault_drill_runs(), "in this run's captured graphs");
  return interrupted ? kInterruptedExit : 0;
}

}  // namespace sg::cli
