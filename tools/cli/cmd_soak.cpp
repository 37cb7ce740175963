// cmd_soak.cpp: `stepgraph soak`: a long deterministic run of decode-step graph replays that must
// neither drift nor leak (models/soak_gpu.h runs it; models/soak.h keeps the books). A preset's
// synthetic weights (qwen3.5-4b by default, as bench and serve), --max-seqs decode rows, --replays
// graph replays with greedy tokens fed back, cut into periods of --period replays that each start
// from zeroed caches, at position 0 or after a graphed prefill of --prompt tokens a row, so the
// workload repeats exactly and fits a cache of --prompt + --period tokens per slot. Every replay's running period hash
// is compared with a reference period launched eagerly first; device memory in use and host RSS are sampled every
// --check-every replays and must stay within a tolerance of the first sample. A progress bar on stderr when it is a
// terminal. Ctrl-C (SIGINT) ends the run after the current replay; what was measured is still printed (and written to
// --json), marked interrupted, and the exit code is 130. A failure (a hash, memory, an eager fallback) prints the same
// report, then an error naming the replay, and exits with 1. A kernel that faults in a replay ends the run at once with
// the step's report (the graph, the CUDA error, the lost context; --fault-after LAYER:OP is its drill), exit 1. The
// last line on stdout is a one-line summary starting with "soak:". GPU only: without a CUDA driver
// or device it refuses with the reason.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/text.h"
#include "graphs/capture_sizes.h"
#include "models/model_step.h"
#include "models/soak.h"
#include "models/soak_gpu.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

using nlohmann::json;

struct SoakCliOptions {
  std::string preset = "qwen3.5-4b";
  int max_seqs = 32;
  int64_t replays = 100000;
  int period = 1024;
  int prompt = 0;  // prompt tokens a row prefilled (graphed) at every period's start
  int check_every = 1000;
  int device_tolerance_mib = 8;
  int host_tolerance_mib = 16;
  std::string dtype = "bf16";
  uint64_t seed = 1;
  std::string attn_decode = "auto";
  std::string delta_prefill = "auto", attn_prefill = "auto";  // the prompt's prefill (with --prompt)
  bool prefill_setting_given = false;                         // --delta-prefill or --attn-prefill given
  std::string gemm = "auto";
  std::string pdl = "auto", swiglu = "auto", gated_norm = "auto", mix_round = "auto";  // as bench's
  std::string ssm_state = "f32";  // the GDN recurrent state's dtype
  ArmOptions arms;
  std::string json;
  std::string fault_after;  // --fault-after LAYER:OP[@RUN]: a fault drill in the captured graphs
};

SoakCliOptions soak_options;

std::string hex(uint64_t h) { return fmt::format("{:#018x}", h); }

std::string range_text(const MemoryRange& r) {
  return fmt::format("{} .. {} (baseline {}, last {:+.2f} MiB, peak {:+.2f} MiB)",
                     format_mib(static_cast<int64_t>(r.min)), format_mib(static_cast<int64_t>(r.max)),
                     format_mib(static_cast<int64_t>(r.baseline)), static_cast<double>(r.growth()) / (1 << 20),
                     static_cast<double>(r.peak_growth()) / (1 << 20));
}

json range_json(const MemoryRange& r) {
  return {{"baseline", r.baseline}, {"min", r.min},         {"max", r.max},
          {"last", r.last},         {"growth", r.growth()}, {"peak_growth", r.peak_growth()}};
}

json result_json(const SoakResult& r, const json& header) {
  json samples = json::array();
  for (const MemorySample& s : r.samples) {
    samples.push_back({{"replay", s.replay}, {"device_used", s.device_used}, {"host_rss", s.host_rss}});
  }
  json j = header;
  j["status"] = r.status();
  j["interrupted"] = r.interrupted;
  j["failure"] = r.failure.empty() ? json(nullptr) : json(r.failure);
  j["failed_replay"] = r.failed_replay;
  j["replays_requested"] = r.replays_requested;
  j["replays_done"] = r.replays_done;
  j["rows"] = r.rows;
  j["key"] = r.key;
  j["period"] = r.period;
  j["prompt"] = r.prompt;
  j["prefills_done"] = r.prefills_done;
  j["check_every"] = r.check_every;
  j["reference_steps"] = r.reference_steps;
  j["reference_hash"] = hex(r.reference_hash);
  j["run_hash"] = hex(r.run_hash);
  j["periods_completed"] = r.periods_completed;
  j["distinct_tokens_in_period"] = r.distinct_tokens;
  j["eager_fallbacks"] = r.eager_fallbacks;
  j["reference_seconds"] = r.reference_seconds;
  j["seconds"] = r.seconds;
  j["ms_per_replay"] = r.ms_per_replay();
  j["memory"] = {
      {"device_used", range_json(r.memory.device())},
      {"host_rss", range_json(r.memory.host())},
      {"tolerance",
       {{"device_bytes", r.memory.tolerance().device_bytes}, {"host_bytes", r.memory.tolerance().host_bytes}}},
      {"baseline_replay", r.memory.baseline_replay()},
      {"samples", samples}};
  if (r.mismatch) {
    j["mismatch"] = {{"replay", r.mismatch->replay},
                     {"period", r.mismatch->period},
                     {"position", r.mismatch->position},
                     {"got", hex(r.mismatch->got)},
                     {"want", hex(r.mismatch->want)}};
  }
  return j;
}

std::string summary_line(const SoakResult& r, const std::string& model) {
  std::string s = fmt::format("soak: {}: {}/{} replays of decode b={} ({}), period {}", r.status(), r.replays_done,
                              r.replays_requested, r.rows, model, r.period);
  if (r.prompt > 0)
    s += fmt::format(" after a graphed prefill of {} prompt tokens a row ({} run)", r.prompt, r.prefills_done);
  if (r.memory.samples() > 0) {
    s += fmt::format(
        ", every replay's tokens {} the eager reference (token hash {}), device memory {:+.2f} MiB, host "
        "RSS {:+.2f} MiB (peak over the first sample), {:.3f} ms/replay",
        r.mismatch || r.prefill_mismatch ? "left" : "match", hex(r.run_hash),
        static_cast<double>(r.memory.device().peak_growth()) / (1 << 20),
        static_cast<double>(r.memory.host().peak_growth()) / (1 << 20), r.ms_per_replay());
  }
  if (!r.ok()) s += fmt::format("; FAILED at replay {}", r.failed_replay);
  return s;
}

int run(const SoakCliOptions& o) {
  const Qwen35Config cfg = preset(o.preset);                // a bad name is an error before anything runs
  const ResolvedArms arms = resolve_cli_arms(o.arms.arms);  // a bad arm name too
  check_writable(o.json, "--json");
  const FaultDrill fault = parse_fault_after(o.fault_after);  // a bad value too
  check_fault_layer(fault, cfg.layers, cfg.name);
  if (o.prompt == 0 && o.prefill_setting_given) {
    throw Error(
        "--delta-prefill and --attn-prefill choose the kernels of the prompt's prefill, and this soak has none: give "
        "--prompt N");
  }
  if (int64_t{o.prompt} + o.period > kMaxNewTokens) {
    throw Error(
        fmt::format("--prompt {} and --period {}: the cache holds --prompt + --period tokens per slot, at "
                    "most {}",
                    o.prompt, o.period, kMaxNewTokens));
  }
  const DeviceInfo dev = probe_device();
  if (!dev.ok) {
    throw Error(fmt::format("soak replays captured CUDA graphs, so it needs a GPU: {}", dev.reason));
  }
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);

  const int context = static_cast<int>(std::min<int64_t>(o.period, o.replays));
  ModelStepOptions mo = soak_step_options(o.max_seqs, context, o.prompt);
  mo.act = o.dtype == "f32" ? DType::f32 : DType::bf16;
  mo.seed = o.seed;
  mo.arms = arms.arms;
  mo.attn_decode = parse_attn_decode(o.attn_decode);
  mo.delta_prefill = parse_delta_prefill(o.delta_prefill);
  mo.attn_prefill = parse_attn_prefill(o.attn_prefill);
  mo.gemm = parse_gemm(o.gemm);
  mo.pdl = parse_pdl(o.pdl);
  mo.swiglu = parse_swiglu(o.swiglu);
  mo.gated_norm = parse_gated_norm(o.gated_norm);
  mo.mix_round = parse_mix_round(o.mix_round);
  mo.ssm_state = parse_ssm_state(o.ssm_state);
  mo.fault_layer = fault.layer;
  mo.fault_op = fault.op;
  mo.fault_run = fault.run;

  const auto t0 = std::chrono::steady_clock::now();
  ModelStep step(cfg, mo);
  step.capture_all(/*for_timing=*/false, /*prefill=*/o.prompt > 0);
  check_fault_matched(fault, step.fault_drill_matched(),
                      o.prompt > 0 ? "the captured decode and prefill graphs" : "the captured decode graphs", cfg.name);
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelStepOptions& r = step.options();  // `auto` settings resolved
  std::string settings = fmt::format(
      "attention decode {}, projections {}, pdl {}, swiglu {}, gated norm {}, mix-round {}, GDN state {}, "
      "arms {}",
      attn_decode_name(r.attn_decode), gemm_name(r.gemm), pdl_name(r.pdl), swiglu_name(r.swiglu),
      gated_norm_name(r.gated_norm), mix_round_name(r.mix_round), ssm_state_name(r.ssm_state), arms.arms.describe());
  if (o.prompt > 0) {
    settings += fmt::format(", delta-rule prefill {}, attention prefill {}", delta_prefill_name(r.delta_prefill),
                            attn_prefill_name(r.attn_prefill));
  }
  fmt::print(
      "device: {}\nmodel: {} ({} layers: {} GDN + {} attention), synthetic {} weights (seed {}); {}\n"
      "workload: {} graphed decode replays of {} rows (key {}), periods of {} replays from zeroed caches{}, greedy "
      "tokens fed back; reference: one period launched eagerly; memory checked every {} replays "
      "(tolerance: device {} MiB, host RSS {} MiB); {} graphs captured in {:.1f} s\n",
      dev.describe(), cfg.name, cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(), dtype_name(mo.act),
      o.seed, settings, o.replays, o.max_seqs, pad_to_key(step.keys(), o.max_seqs).value_or(o.max_seqs), o.period,
      o.prompt > 0 ? fmt::format(", each after one graphed prefill of {} prompt tokens a row", o.prompt)
                   : std::string(" at position 0"),
      o.check_every, o.device_tolerance_mib, o.host_tolerance_mib, step.graphs().captured().size(), setup_s);
  std::fflush(stdout);

  SoakOptions so;
  so.replays = o.replays;
  so.period = o.period;
  so.prompt = o.prompt;
  so.check_every = o.check_every;
  so.rows = o.max_seqs;
  so.tolerance.device_bytes = uint64_t(o.device_tolerance_mib) << 20;
  so.tolerance.host_bytes = uint64_t(o.host_tolerance_mib) << 20;
  so.stop = [] { return sigint_received(); };
  const bool tty = isatty(fileno(stderr)) != 0;
  double last_drawn = -1;
  if (tty) {
    so.on_replay = [&](int64_t done, double secs) {
      if (secs - last_drawn < 0.1 && done != o.replays) return;
      last_drawn = secs;
      std::fprintf(stderr, "\r%s\x1b[K", soak_progress_line(done, o.replays, secs).c_str());
      std::fflush(stderr);
    };
  }
  SoakResult res;
  {
    SigintGuard guard;
    res = run_soak(step, so);
  }
  if (tty && last_drawn >= 0) std::fprintf(stderr, "\n");

  fmt::print("reference: {} eager steps in {:.2f} s, token hash {}, {} different token ids in the period\n",
             res.reference_steps, res.reference_seconds, hex(res.reference_hash), res.distinct_tokens);
  if (res.interrupted)
    fmt::print("interrupted (SIGINT) after replay {}: what was measured so far follows\n", res.replays_done);
  fmt::print("replays: {} of {} in {:.2f} s ({:.3f} ms each{}), {} whole periods, eager fallbacks {}\n",
             res.replays_done, res.replays_requested, res.seconds, res.ms_per_replay(),
             res.prompt > 0 ? fmt::format(", with the {} prefills", res.prefills_done) : std::string(),
             res.periods_completed, res.eager_fallbacks);
  if (res.memory.samples() > 0) {
    fmt::print("memory, {} samples from after replay {}:\n  device in use: {}\n  host RSS:      {}\n",
               res.memory.samples(), res.memory.baseline_replay(), range_text(res.memory.device()),
               range_text(res.memory.host()));
  }
  if (!o.json.empty()) {
    const json header = {{"command", "soak"},  {"device", dev.describe()},
                         {"preset", cfg.name}, {"dtype", std::string(dtype_name(mo.act))},
                         {"seed", o.seed},     {"settings", settings}};
    std::ofstream f(o.json);
    if (!f) throw Error(fmt::format("--json {}: cannot write this file", printable(o.json, 4096)));
    f << result_json(res, header).dump(2) << "\n";
    fmt::print("wrote {}\n", printable(o.json, 4096));
  }
  fmt::print("{}\n", summary_line(res, cfg.name));
  std::fflush(stdout);
  if (!res.ok()) throw Error(fmt::format("soak failed: {}", res.failure));
  if (res.interrupted) return kInterruptedExit;
  check_fault_fired(fault, step.fault_drill_runs(), "in this soak's graphed steps");
  return 0;
}

}  // namespace

void register_soak(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "soak",
      "A long deterministic run of decode-step graph replays (greedy tokens fed back; periods from zeroed caches) that "
      "must neither drift nor leak: every replay's tokens are checked against a period launched eagerly, device memory "
      "and host RSS against their first sample. Needs a GPU. Ctrl-C ends it early and still reports.");
  SoakCliOptions& o = soak_options;
  cmd->add_option("--preset", o.preset,
                  "Model preset with synthetic weights (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", o.max_seqs, "Decode rows of every replay (one cache slot each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--replays", o.replays, "Graphed decode replays")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--period", o.period,
                  fmt::format("Replays per period: each period starts from zeroed caches (at position 0, or after the "
                              "--prompt prefill), so the cache holds --prompt + --period tokens per slot (at most {})",
                              kMaxNewTokens))
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxNewTokens));
  cmd->add_option(
         "--prompt", o.prompt,
         fmt::format("Prompt tokens a row, prefilled in one graphed prefill step at the start of every period "
                     "(as a server runs a request), whose greedy tokens start the decode replays and must "
                     "equal the eager reference's; 0: no prefill, the periods start at position 0 (at most {})",
                     kMaxNewTokens))
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxNewTokens));
  cmd->add_option("--check-every", o.check_every,
                  "Replays between memory samples (device memory in use, host RSS); tokens are checked every replay")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--device-tolerance-mib", o.device_tolerance_mib,
                  "Growth of device memory in use over the first sample that fails the run, MiB")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--host-tolerance-mib", o.host_tolerance_mib,
                  "Growth of the host resident set over the first sample that fails the run, MiB")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--dtype", o.dtype, "Activations and weights: bf16 or f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--seed", o.seed, "Seed of the synthetic weights (an integer in [0, 2^64 - 1])")
      ->capture_default_str()
      ->check(unsigned_integer_check());
  add_arm_options(cmd, o.arms);
  cmd->add_option("--attn-decode", o.attn_decode, "Attention in the decode steps: auto, simt or mma (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma"}));
  cmd->add_option("--ssm-state", o.ssm_state, "The GDN recurrent state's dtype: f32 or bf16 (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("ssm-state")));
  cmd->add_option(
         "--delta-prefill", o.delta_prefill,
         "The prompt's prefill (with --prompt): the delta rule, auto, scan, chunked, mma, wgmma or wgmma-t (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("delta-prefill")));
  cmd->add_option("--attn-prefill", o.attn_prefill,
                  "The prompt's prefill (with --prompt): attention, auto, simt, mma or wgmma (as bench)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma", "wgmma"}));
  cmd->add_option("--gemm", o.gemm,
                  "The projections: auto, cublas, skinny, mixed, lt, lt-all, wgmma or wgmma-large (as bench; the "
                  "prompt's prefill with --prompt too)")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<std::string>(kGemmNames.begin(), kGemmNames.end())));
  add_step_setting_options(cmd, {o.pdl, o.swiglu, o.gated_norm, o.mix_round}, "GPU: ");
  cmd->add_option("--json", o.json, "Write the results (status, hashes, every memory sample) to this file");
  add_fault_after_option(cmd, o.fault_after,
                         "in the captured graphs (decode, and prefill with --prompt; the eager reference period runs "
                         "without it), so the first graphed replay (or prefill) faults, or with @RUN the node's run "
                         "RUN (a replay deep in the soak); the error names the graph "
                         "(find the node with generate --check-nodes)");
  cmd->callback([cmd, &action] {
    soak_options.prefill_setting_given = cmd->count("--delta-prefill") + cmd->count("--attn-prefill") > 0;
    action = [] { return run(soak_options); };
  });
}

}  // namespace sg::cli
