// cmd_bench.cpp: `stepgraph bench`: the main job. The default workload, the whole model, is in
// bench_model.cpp; this file registers the command and runs `--workload gdn-layer`: one GDN
// layer's decode step per padded batch size, captured into CUDA graphs: whole-graph replay times
// (CUDA events, no profiler attached) and then per-node times through CUPTI, with the bytes each
// node must move and the fraction of the 4.3 TB/s bandwidth floor.
// Without a GPU it says so and runs the CPU reference of the same step on the tiny preset; every
// option that cannot apply there (CUPTI exports, replay counts, kernel arms, ...) is an error naming
// it, and --json gets the CPU run's results. Output files are checked to be writable before a run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/cuda_handles.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/nccl.h"
#include "engine/text.h"
#include "graphs/capture_sizes.h"
#include "graphs/export.h"
#include "graphs/node_timer.h"
#include "kernels/ref/conv_ref.h"
#include "kernels/ref/delta_rule_ref.h"
#include "kernels/ref/postconv_ref.h"
#include "models/gdn_decode_step.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"

namespace sg::cli {
namespace {

DecodeBatch random_batch(const GdnDims& d, int B, int num_slots, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  DecodeBatch b;
  for (int r = 0; r < B; ++r) b.slots.push_back(num_slots - 1 - r);  // distinct, in reverse order
  b.x.resize(static_cast<size_t>(B) * d.C());
  b.a.resize(static_cast<size_t>(B) * d.Hv);
  b.b.resize(b.a.size());
  for (auto* v : {&b.x, &b.a, &b.b}) {
    for (auto& x : *v) x = round_bf16(2.f * u(rng));
  }
  return b;
}

int run_cpu(const BenchOptions& o, const std::string& why) {
  fmt::print("stepgraph bench: {}\n", why);
  fmt::print(
      "Running the CPU reference of the same step (one GDN layer's decode: conv update, post-conv, delta "
      "rule) on the 'tiny' preset instead.\n\n");
  const Qwen35Config cfg = preset("tiny");
  const GdnDims d = cfg.gdn;
  // The reference's time grows with the batches' sum (every size up to --max-seqs), so it stops at
  // the default's 32 rows (4096 would take a quarter of an hour).
  constexpr int kCpuMaxSeqs = 32;
  const int max_seqs = std::min(o.max_seqs, kCpuMaxSeqs);
  const int slots_n = 2 * max_seqs;
  fmt::print("tiny GDN layer: C={} Hk={} Hv={} Dk={} Dv={} K={}{}\n", d.C(), d.Hk, d.Hv, d.Dk, d.Dv, d.K,
             max_seqs < o.max_seqs
                 ? fmt::format(" (--max-seqs {} capped at {} on the CPU reference)", o.max_seqs, kCpuMaxSeqs)
                 : std::string());
  fmt::print("{:>6} {:>12} {:>14}\n", "batch", "ms/step", "output sum");
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(static_cast<size_t>(d.C()) * d.K), A_log(d.Hv), dt_bias(d.Hv);
  for (auto& x : w) x = round_bf16(u(rng) * 1.5f / d.K);
  for (auto& x : A_log) x = std::log(1.f + 15.f * 0.5f * (u(rng) + 1.f));
  for (auto& x : dt_bias) x = u(rng);
  std::vector<float> conv_state(static_cast<size_t>(slots_n) * d.C() * (d.K - 1), 0.f);
  std::vector<float> ssm(static_cast<size_t>(slots_n) * d.Hv * d.Dk * d.Dv, 0.f);
  nlohmann::json rows = nlohmann::json::array();
  for (int B : decode_capture_sizes(max_seqs)) {
    auto batch = random_batch(d, B, slots_n, 100 + B);
    std::vector<float> conv_out(static_cast<size_t>(B) * d.C()), q(static_cast<size_t>(B) * d.Hk * d.Dk), k(q.size()),
        v(static_cast<size_t>(B) * d.Hv * d.Dv), g(static_cast<size_t>(B) * d.Hv), beta(g.size()), out(v.size());
    const int steps = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      ref::conv_update(ref::ConvShape{d.C(), d.K}, B, batch.x.data(), d.C(), batch.slots.data(), conv_state.data(),
                       w.data(), nullptr, conv_out.data());
      ref::postconv(ref::PostconvShape{d.Hk, d.Hv, d.Dk, d.Dv}, B, conv_out.data(), d.C(), batch.a.data(), d.Hv,
                    batch.b.data(), d.Hv, A_log.data(), dt_bias.data(), q.data(), k.data(), v.data(), g.data(),
                    beta.data());
      ref::delta_rule_decode(ref::DeltaShape{d.Hk, d.Hv, d.Dk, d.Dv}, B, q.data(), k.data(), v.data(), g.data(),
                             beta.data(), batch.slots.data(), ssm.data(), out.data());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
    double sum = 0;
    for (float x : out) sum += x;
    fmt::print("{:>6} {:>12.3f} {:>14.6f}\n", B, ms, sum);
    rows.push_back({{"batch", B}, {"ms_per_step", ms}, {"output_sum", sum}});
  }
  write_cpu_json(o, {{"implementation", "cpu-reference"},
                     {"why", why},
                     {"preset", cfg.name},
                     {"workload", "gdn-decode-layer"},
                     {"steps_per_batch", 20},
                     {"batches", rows}});
  return 0;
}

constexpr const char* kLayerSsmState =
    "--ssm-state bf16 (the gdn-layer workload keeps an f32 state; use --workload model)";

// The options a CPU reference run cannot apply, each with the reason; empty when every option given
// is one it honours.
std::vector<std::string> cpu_inapplicable(const BenchOptions& o, const CLI::App& cmd) {
  std::vector<std::string> bad;
  auto given = [&](const char* opt) { return cmd.count(opt) > 0; };
  if (!o.csv.empty()) bad.push_back("--csv (per-node statistics are measured with CUPTI on a GPU)");
  if (!o.trace.empty()) bad.push_back("--trace (the trace is of graph replays on a GPU)");
  if (!o.dot.empty()) bad.push_back("--dot (the graphs are CUDA graphs captured on a GPU)");
  for (const char* opt : {"--replays", "--reps", "--node-replays"}) {
    if (given(opt)) bad.push_back(fmt::format("{} (a count of CUDA graph replays)", opt));
  }
  if (given("--attn-prefill")) bad.push_back("--attn-prefill (chooses a GPU attention kernel)");
  if (given("--attn-decode")) bad.push_back("--attn-decode (chooses a GPU attention kernel)");
  if (given("--gemm")) bad.push_back("--gemm (chooses a GPU projection kernel)");
  if (given("--pdl")) bad.push_back("--pdl (how GPU kernels are launched)");
  if (given("--swiglu")) bad.push_back("--swiglu (where GPU kernels compute the MLP activation)");
  if (given("--gated-norm")) bad.push_back("--gated-norm (where GPU kernels compute the GDN gated norm)");
  if (given("--mix-round")) bad.push_back("--mix-round (where the GPU step rounds its projections' output)");
  if (o.arms_mode == "tune") bad.push_back("--arms tune (times the GPU kernels' arms)");
  if (o.marginal) bad.push_back("--marginal (disables nodes of captured CUDA graphs)");
  if (!o.lt_choices.empty()) bad.push_back("--lt-choices (cuBLASLt's algorithm choices on a GPU)");
  if (o.fault.on()) bad.push_back("--fault-after (a fault drill in the GPU step's captured graphs)");
  if (given("--preset") && o.preset != "tiny") {
    bad.push_back(fmt::format("--preset {} (the CPU reference runs the 'tiny' preset only)", o.preset));
  }
  if (o.workload == "model" && given("--phase") && o.phase != "both") {
    bad.push_back(fmt::format("--phase {} (the CPU reference runs a prefill and then decode steps)", o.phase));
  }
  return bad;
}

// What the gdn-layer workload (one GDN layer's decode step, GPU or CPU reference) cannot apply:
// every setting of the model workload's steps, given explicitly.
std::vector<std::string> layer_inapplicable(const BenchOptions& o, const CLI::App& cmd) {
  std::vector<std::string> bad;
  if (o.arms_mode == "tune") bad.push_back("--arms tune (tunes the whole model's graphs; use --workload model)");
  if (o.ssm_state != "f32") bad.push_back(kLayerSsmState);
  if (!o.lt_choices.empty())
    bad.push_back("--lt-choices (the gdn-layer workload runs no projection; use --workload model)");
  if (o.marginal) bad.push_back("--marginal (per op family of the whole model's graphs; use --workload model)");
  if (cmd.count("--phase") && o.phase != "decode") {
    bad.push_back(fmt::format("--phase {} (the gdn-layer workload is decode only)", o.phase));
  }
  if (cmd.count("--context")) bad.push_back("--context (the gdn-layer workload reads no KV cache)");
  if (cmd.count("--delta-prefill")) bad.push_back("--delta-prefill (the gdn-layer workload has no prefill)");
  for (const char* opt :
       {"--attn-prefill", "--attn-decode", "--gemm", "--pdl", "--swiglu", "--gated-norm", "--mix-round"}) {
    if (cmd.count(opt)) {
      bad.push_back(
          fmt::format("{} (a setting of the whole model's step; the gdn-layer workload runs the GDN "
                      "layer's kernels by their arms, --arm)",
                      opt));
    }
  }
  return bad;
}

int run_gpu(const BenchOptions& o, const DeviceInfo& dev) {
  const Qwen35Config cfg = preset(o.preset);
  ResolvedArms arms = resolve_cli_arms(o.arms.arms);
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  GdnDecodeOptions opts;
  opts.max_seqs = o.max_seqs;
  opts.graph_max = o.max_seqs;
  opts.num_slots = 2 * o.max_seqs;
  opts.arms = arms.arms;
  opts.fault_op = o.fault.op;  // layer 0, the step's only one (checked before the device)
  opts.fault_run = o.fault.run;
  const GdnDims& d = cfg.gdn;
  fmt::print("device: {}\n", dev.describe());
  fmt::print(
      "workload: one GDN layer's decode step of {} (C={} Hk={} Hv={} Dk={} Dv={} K={}), bf16 activations, "
      "bf16 conv state, f32 delta-rule state\n",
      cfg.name, d.C(), d.Hk, d.Hv, d.Dk, d.Dv, d.K);
  fmt::print("arms: {}\n", arms.arms.describe());
  GdnDecodeStep step(d, opts);
  fmt::print("arena: {}; capturing {} graphs (largest first)...\n",
             format_bytes(static_cast<double>(step.arena_bytes())), step.keys().size());
  auto t0 = std::chrono::steady_clock::now();
  step.capture_all(/*for_timing=*/true);
  fmt::print("captured in {:.1f} ms\n",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  check_fault_matched(o.fault, step.fault_drill_matched(), "the gdn-layer workload's captured graphs", cfg.name);
  if (o.fault.on()) fmt::print("fault drill: {}\n", describe_drill(o.fault));
  fmt::print("\n");

  // The clocks, power and clock limits while each graph's replays are timed (gpu_clocks.h).
  ClockSampler clocks(dev.ordinal);
  if (!clocks.available()) fmt::print("clocks: not sampled ({})\n\n", clocks.unavailable_reason());
  nlohmann::json graphs = nlohmann::json::array();
  std::vector<std::string> summary;
  for (int key : step.keys()) {
    // A kernel that faults in these steps is reported as the step's graph (GdnDecodeStep::check_step,
    // sync), as the model workload's are; each key's replays are waited for before the next key runs.
    step.run(random_batch(d, key, opts.num_slots, key), RunMode::graph);  // real inputs in the static buffers
    Event start, stop;
    for (int i = 0; i < 10; ++i) step.replay(key);  // warm-up
    std::vector<double> per_replay_us;
    clocks.start();
    for (int r = 0; r < o.reps; ++r) {
      step.check_step(cudaEventRecord(start.get(), step.stream()));
      for (int i = 0; i < o.replays; ++i) step.replay(key);
      step.check_step(cudaEventRecord(stop.get(), step.stream()));
      step.check_step(cudaEventSynchronize(stop.get()));
      per_replay_us.push_back(1000.0 * Event::elapsed_ms(start, stop) / o.replays);
    }
    const std::optional<ClockSummary> clock_summary = clocks.summarize(clocks.stop());
    Spread sp = spread(per_replay_us);
    const double bytes = step.step_bytes(key);
    // Per-node times, in a separate run with CUPTI enabled.
    NodeTimerWindow window;  // abandoned if a fault ends the replays
    for (int i = 0; i < o.node_replays; ++i) step.replay(key);
    step.sync();  // a fault in the replays is the graph's (NodeTimer::stop would report a bare CUDA error)
    auto records = window.stop();
    int unmatched = 0;
    auto stats = aggregate(step.manifest(key), records, &unmatched);
    fmt::print(
        "graph gdn-decode b={}: replay {:.2f} us median (min {:.2f}, max {:.2f}; {} reps x {} replays), "
        "{} moved, {:.0f} GB/s = {:.1f}% of the floor\n",
        key, sp.median, sp.min, sp.max, o.reps, o.replays, format_bytes(bytes), bytes / (sp.median * 1e3),
        100 * bytes / (sp.median * 1e3) / kFloorGBps);
    const nlohmann::json clock_json = report_clocks(clock_summary);
    fmt::print("{}", format_node_table(stats, kFloorGBps));
    write_exports(o, key, step.manifest(key), stats, records);
    if (unmatched) fmt::print("  ({} kernel records did not match a node of this graph)\n", unmatched);
    fmt::print("\n");
    summary.push_back(fmt::format("  b={:<3} {:>9.2f} us  ({:.1f}% of floor)", key, sp.median,
                                  100 * bytes / (sp.median * 1e3) / kFloorGBps));
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& s : stats) {
      nodes.push_back({{"index", s.node.index},
                       {"op", s.node.label.op},
                       {"arm", s.node.label.arm},
                       {"kernel", s.node.kernel},
                       {"calls", s.calls},
                       {"median_us", s.median_us},
                       {"min_us", s.min_us},
                       {"max_us", s.max_us},
                       {"span_median_us", s.span_median_us},
                       {"bytes", s.node.label.bytes},
                       {"gbps", s.gbps}});
    }
    graphs.push_back({{"batch", key},
                      {"replay_us", {{"median", sp.median}, {"min", sp.min}, {"max", sp.max}}},
                      {"bytes", bytes},
                      {"clocks", clock_json},
                      {"manifest", to_json(step.manifest(key))},
                      {"nodes", nodes}});
  }
  fmt::print("summary (median replay time per graph; eager fallbacks: {}):\n", step.eager_fallbacks());
  for (const auto& s : summary) fmt::print("{}\n", s);
  if (!o.json.empty()) {
    nlohmann::json out = {{"device", dev.describe()},
                          {"preset", cfg.name},
                          {"arms", arms.arms.describe()},
                          {"workload", "gdn-decode-layer"},
                          {"graphs", graphs}};
    std::ofstream f(o.json);
    require(static_cast<bool>(f), "cannot write {}", o.json);
    f << out.dump(2) << "\n";
    fmt::print("wrote {}\n", o.json);
  }
  check_fault_fired(o.fault, step.fault_drill_runs(), "in this run's captured graphs");
  return 0;
}

}  // namespace

void write_cpu_json(const BenchOptions& o, const nlohmann::json& result) {
  if (!o.json.empty()) write_output_file(o.json, "--json", result.dump(2) + "\n");
}

void write_exports(const BenchOptions& o, int key, const Manifest& m, const std::vector<NodeStats>& stats,
                   const std::vector<KernelRecord>& records) {
  auto write = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    const std::string file = with_key(path, key);
    std::ofstream f(file);
    require(static_cast<bool>(f), "cannot write {}", file);
    f << text;
    fmt::print("  wrote {}\n", file);
  };
  write(o.csv, to_csv(stats));
  write(o.trace, o.trace.empty() ? "" : to_chrome_trace(m, records).dump() + "\n");
  write(o.dot, o.dot.empty() ? "" : to_dot(m));
}

void register_bench(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "bench",
      "The main job: capture one CUDA graph per step shape (decode batch sizes, prefill token buckets), replay them, "
      "and print whole-step times (graphed and eager) beside the bandwidth floor, then per-node times (CUPTI) summed "
      "per op family. The default workload is the whole model (decode-b32 and prefill-b32 of the 4B preset); "
      "--workload gdn-layer times one GDN layer's decode step node by node. Without a GPU it runs the CPU reference "
      "on the tiny preset.");
  static BenchOptions o;
  cmd->add_option("--workload", o.workload,
                  "model: the whole model's decode steps (one graph per batch key) and its prefill step (--max-seqs "
                  "sequences of --context tokens); gdn-layer: one GDN layer's decode step (the walking skeleton)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gdn-layer", "model"}));
  cmd->add_option("--phase", o.phase, "model workload: decode, prefill or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill", "both"}));
  cmd->add_option("--context", o.context,
                  "model workload: tokens of context per sequence in decode, prompt tokens per sequence in prefill")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--history", o.history,
                  "model workload, prefill: tokens already in each sequence's caches before its --context prompt "
                  "tokens (a chunked prefill's later chunk, a follow-up turn): attention reads them from the KV "
                  "cache, the delta rule and the conv start from the slot's state. On the GPU the caches hold "
                  "random finite values and every replay continues from the state the previous one left (the "
                  "same work); the CPU reference prefills that many tokens first (capped at 64 there). On the GPU "
                  "it needs --phase prefill (caches sized for the history would change the decode graphs). 0: "
                  "fresh prompts")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--preset", o.preset, "Model preset (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", o.max_seqs, "Largest decode batch; graphs for 1, 2, 4, multiples of 8 up to it")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--replays", o.replays, "Replays per timed repetition")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--reps", o.reps, "Timed repetitions (median, min, max reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--node-replays", o.node_replays,
                  "Replays timed per node under CUPTI; 0 (model workload): no per-node timing and CUPTI left "
                  "free, so the run can go under ncu, nsys or compute-sanitizer")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--json", o.json, "Also write results (manifests, node stats) to this JSON file");
  cmd->add_option("--csv", o.csv, "Write each graph's per-node statistics as CSV (FILE gets -bN before the extension)");
  cmd->add_option("--trace", o.trace, "Write each graph's timed replays as a Chrome/Perfetto trace (JSON)");
  cmd->add_option("--dot", o.dot, "Write each graph's kernel nodes and dependencies as Graphviz DOT");
  cmd->add_flag("--cpu", o.cpu, "Run the CPU reference on the tiny preset even when a GPU is present");
  add_arm_options(cmd, o.arms);
  cmd->add_option(
         "--delta-prefill", o.delta_prefill,
         "model workload: how prefill runs the gated delta rule: scan (the reference-exact sequential "
         "scan), chunked (the chunked WY form, 64-token chunks; within f32 tolerance of the scan, not "
         "byte-identical, so a setting rather than an arm), mma (the chunked WY form with its products on "
         "the tensor cores, bf16 operands split in two parts: within 1e-4 normalised f32 error of the "
         "double reference; the CPU reference runs its chunked form), wgmma (the same products on the "
         "warpgroup tensor cores, the state in registers: bf16, Dk = Dv = 128, compute capability 9.0, within "
         "the same tolerance), wgmma-t (the same products in two kernels, every chunk's T and P first, then the "
         "recurrence with the state transposed; where wgmma runs, with a workspace of chunk records; "
         "wgmma's bytes, 19% faster on the 4B) or auto (wgmma-t for bf16 where it runs, unless --gated-norm delta asks "
         "for the "
         "norm inside the prefill's delta rule, which only mma has; else mma for bf16 and chunked for f32 "
         "where the kernel is built for the model's Dk and fits the device, else scan; the CPU reference "
         "runs the scan)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("delta-prefill")));
  cmd->add_option("--attn-prefill", o.attn_prefill,
                  "model workload: how prefill runs attention: simt (the f32 CUDA-core kernel), mma (bf16 tensor "
                  "cores, P split into two bf16 halves; within the bf16 attention tolerance of simt, not "
                  "byte-identical, so a setting rather than an arm), wgmma (the same on the warpgroup tensor cores "
                  "of compute capability 9.0, D 64/128/256, K and V streamed by TMA and shared by two query heads; "
                  "the same tolerance) or auto (wgmma where it runs and fits, else mma for bf16 with D "
                  "32/64/128/256 where the device allows it, else simt)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma", "wgmma"}));
  cmd->add_option("--attn-decode", o.attn_decode,
                  "model workload: how decode runs attention: simt (the f32 CUDA-core split-K kernel), mma (bf16 "
                  "tensor cores, a K/V ring per warp, P split into two bf16 halves; within the bf16 attention "
                  "tolerance of simt, not byte-identical, so a setting rather than an arm) or auto (mma for bf16 "
                  "with D 64/128/256 and at most 8 query heads per kv head where the device allows it, else simt)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma"}));
  cmd->add_option(
         "--gemm", o.gemm,
         "model workload: how steps run their projections: cublas (cublasGemmEx), skinny (the "
         "tensor-core weight-streaming kernel for at most 32 rows, K % 64 == 0; within the GEMM "
         "tolerance of cuBLAS, not byte-identical, so a setting rather than an arm; cuBLAS for other "
         "shapes), mixed (skinny for steps of at most 24 rows, for the LM head and, up to 32 rows, for "
         "weights of at most 4096 columns in wide blocks and for the projections whose split-K partials "
         "the RMSNorm after sums (--mix-round partials), where it measures faster; "
         "lt for the other decode projections, cublasGemmEx for prefill), lt (cuBLASLt with the fastest of "
         "its top heuristic algorithms, timed "
         "per shape before capture and named in the manifest, for steps of at most 32 rows; "
         "cublasGemmEx above), lt-all (the same cuBLASLt choice for every projection of every step, "
         "prefill included), wgmma (mixed up to 32 rows; above, the own wgmma GEMM on compute capability "
         "9.0 for the projections cublasGemmEx would run, gate_up with SwiGLU in its epilogue unless "
         "--swiglu kernel, the residual projections of --mix-round residual still on cuBLAS; as fast as "
         "cuBLAS on steps of thousands of tokens, slower on a few hundred), wgmma-large (wgmma for steps "
         "of at least 8192 tokens, where it measured faster, cublasGemmEx between 33 and that, mixed up "
         "to 32 rows) or auto (wgmma-large for bf16 on compute capability 9.0 where the own GEMM is built, mixed "
         "on other sm_90+, else cublas)")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<std::string>(kGemmNames.begin(), kGemmNames.end())));
  cmd->add_option(
         "--arms", o.arms_mode,
         "model workload: " +
             std::string(
                 "fixed (the arms of --arm, STEPGRAPH_ARMS, the seed's flags and the defaults) or tune (at capture, "
                 "each graph key times the arms of the ops it runs on its own shapes and keeps the fastest; ops "
                 "named by --arm, STEPGRAPH_ARMS or a seed flag stay as chosen; arms are byte-identical, so outputs "
                 "do not change; the choices and their times are in the manifests)"))
      ->capture_default_str()
      ->check(CLI::IsMember({"fixed", "tune"}));
  cmd->add_option("--pdl", o.pdl,
                  "model workload: programmatic dependent launch: on (each kernel's blocks start while the "
                  "previous kernel finishes and wait for it before touching its data; the skinny GEMM streams "
                  "its first weight tiles meanwhile; the same output bytes as off), off, or auto (on for sm_90+)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "off", "on"}));
  cmd->add_option("--swiglu", o.swiglu,
                  "model workload: where the MLP activation silu(gate) * up is computed: gemm (in the gate_up "
                  "GEMM's epilogue wherever the skinny kernel or the wgmma GEMM runs gate_up), kernel (the swiglu "
                  "kernel after "
                  "gate_up), or auto (gemm except on steps of at most 8 rows over a gate_up larger than 64 Mi "
                  "values, where it measured slower); the same output bytes every way")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "gemm", "kernel"}));
  cmd->add_option("--gated-norm", o.gated_norm,
                  "model workload: where a step computes the GDN layer's gated RMSNorm: delta (in the delta "
                  "rule's epilogue wherever the unfused GDN decode path runs on bf16 with Dv 64, 128 or 256, one "
                  "block a head, and wherever the mma delta-rule prefill runs on bf16 with Dv 64 or 128), kernel "
                  "(the gated_rmsnorm kernel after the delta rule), or auto (delta on decode steps of at most 8 "
                  "rows whose GDN layers have at most 4096 output values a row, the 4B's, where it measured "
                  "faster; kernel elsewhere, prefill included); the same output bytes every way")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "delta", "kernel"}));
  cmd->add_option("--mix-round", o.mix_round,
                  "model workload: where the projections before each RMSNorm (attn.o_proj, gdn.out_proj, "
                  "mlp.down) round their output to bf16: gemm (the GEMM stores bf16), norm (on steps of at most "
                  "32 rows the GEMM stores f32 and the RMSNorm rounds it before adding it to the residual stream: "
                  "the same arithmetic, and cuBLASLt may then sum split-K partials in place, one kernel instead "
                  "of two; cuBLASLt's algorithm may differ, so its bytes may), partials (where the skinny kernel "
                  "runs such a projection with its K split, it leaves its f32 partials and the RMSNorm sums them "
                  "in split order, then rounds: gemm's bytes with one split-K sum fewer on the chain; elsewhere as "
                  "gemm), residual (partials, and where cublasGemmEx runs such a projection, prefill steps of more "
                  "than 32 rows among them, it adds its product to the residual stream in place and the RMSNorm "
                  "reads the stream alone: half its bytes; whether cuBLAS rounds the product before the add "
                  "depends on its kernel, so within the GEMM tolerance of gemm there) or auto (residual, measured "
                  "faster in decode and prefill; gemm with tensor parallelism over several ranks)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("mix-round")));
  cmd->add_option("--ssm-state", o.ssm_state,
                  "model workload: the dtype the GDN layers keep their recurrent state in between steps: f32 (the "
                  "default) or bf16 (half the bytes: the arithmetic stays f32, the state is rounded to bf16 after "
                  "each decode token and at the end of each sequence's prefill step; changes the numbers, see "
                  "docs/BENCHMARKS.md "
                  "for its drift against f32)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("ssm-state")));
  add_fault_after_option(cmd, o.fault_after,
                         "in the captured graphs (the model workload's decode keys and prefill bucket; the "
                         "gdn-layer workload's decode keys, its one layer being layer 0); the error names the graph "
                         "that faulted (find the node with generate --check-nodes)");
  cmd->add_option("--lt-choices", o.lt_choices, std::string("model workload: ") + kLtChoicesHelp);
  cmd->add_flag("--marginal", o.marginal,
                "model workload: also the marginal cost of every op family in the largest and the smallest decode "
                "graph: the step time with the family's nodes disabled (cudaGraphNodeSetEnabled), subtracted from "
                "the full step's (timing only; outputs are not used), beside the family's node time and their "
                "difference, the overlap");
  cmd->callback([&action, cmd] {
    action = [cmd] {
      const Qwen35Config cfg = preset(o.preset);  // validate the name before anything else
      // Every source of arms is parsed first: a bad name is an error on either path.
      const ResolvedArms arms = resolve_cli_arms(o.arms.arms);
      check_writable(o.json, "--json");  // before the run, so that its results are never lost
      check_writable(o.lt_choices, "--lt-choices");
      o.fault = parse_fault_after(o.fault_after);  // on either path, as the checks below
      check_fault_drill(o, "bench");
      check_history(o, "bench", false);
      if (o.workload == "model") {
        check_fault_layer(o.fault, cfg.layers, cfg.name);
      } else if (o.fault.on() && o.fault.layer != 0) {
        throw Error(fmt::format(
            "--fault-after {}: the gdn-layer workload's step is one GDN layer, labelled layer 0 (e.g. --fault-after "
            "0:conv.update)",
            printable(o.fault.text)));
      }
      if (o.workload != "model") {  // on either path
        if (const auto bad = layer_inapplicable(o, *cmd); !bad.empty()) {
          std::string list;
          for (const auto& b : bad) list += "\n  " + b;
          throw Error(fmt::format("bench --workload {} cannot apply:{}", o.workload, list));
        }
      }
      if (o.node_replays == 0) {  // on either path: these ask for what --node-replays 0 turns off
        std::vector<std::string> bad;
        if (o.workload != "model") bad.push_back("--workload " + o.workload + " (its result is the per-node table)");
        if (!o.csv.empty()) bad.push_back("--csv (per-node statistics)");
        if (!o.trace.empty()) bad.push_back("--trace (the timed replays of every node)");
        if (!bad.empty()) {
          std::string list;
          for (const auto& b : bad) list += "\n  " + b;
          throw Error(fmt::format("bench --node-replays 0 turns per-node timing off, so it cannot go with:{}", list));
        }
      }
      std::string why;
      DeviceInfo dev;
      if (o.cpu) {
        why = "--cpu given.";
      } else {
        dev = probe_device();
        if (!dev.ok) why = dev.reason + ".";
      }
      if (!why.empty()) {
        if (const auto bad = cpu_inapplicable(o, *cmd); !bad.empty()) {
          std::string list;
          for (const auto& b : bad) list += "\n  " + b;
          const std::string reason = why.substr(0, why.size() - 1);  // without the final '.'
          throw Error(
              fmt::format("bench: this run is the CPU reference model ({}), which cannot apply:{}\nDrop "
                          "these options, or run on a machine with a GPU.",
                          reason, list));
        }
        reject_arms_on_cpu(arms, "bench");
        return o.workload == "model" ? run_cpu_model(o, why) : run_cpu(o, why);
      }
      check_history(o, "bench", true);
      const std::pair<std::string, const char*> exports[] = {{o.csv, "--csv"}, {o.trace, "--trace"}, {o.dot, "--dot"}};
      for (const auto& [path, option] : exports) {
        if (!path.empty()) check_writable(with_key(path, 1), option);  // as the first graph's file is named
      }
      return o.workload == "model" ? run_gpu_model(o, dev) : run_gpu(o, dev);
    };
  });
}

void register_info(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("info", "Show the CUDA device, the built-in presets and the build.");
  cmd->callback([&action] {
    action = [] {
      DeviceInfo dev = probe_device();
      fmt::print("device: {}\n", dev.describe());
      fmt::print("NCCL: {}\n", nccl_available() ? nccl_version() + " (tensor-parallel collectives)"
                                                : std::string("none in this build (no tensor parallelism)"));
      for (const auto& name : preset_names()) {
        auto c = preset(name);
        fmt::print("preset {:<12} hidden={} layers={} GDN C={} Hk={} Hv={} Dk={} Dv={} K={}\n", name, c.hidden,
                   c.layers, c.gdn.C(), c.gdn.Hk, c.gdn.Hv, c.gdn.Dk, c.gdn.Dv, c.gdn.K);
      }
      return 0;
    };
  });
}

}  // namespace sg::cli
