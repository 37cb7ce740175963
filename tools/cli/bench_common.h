// bench_common.h: what `stepgraph bench`'s workloads share (tools/cli/cmd_bench.cpp registers the
// command; bench_model.cpp runs the whole-model workload), and what the other commands that build
// one whole-model step (inspect, capture, ab) take from it: BenchOptions, model_step_options and
// add_model_step_options (step_options.cpp).
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/device.h"
#include "engine/gpu_clocks.h"
#include "graphs/node_timer.h"
#include "kernels/arms.h"
#include "kernels/ref/ref_common.h"
#include "models/model_step.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/spread.h"

namespace sg::cli {

constexpr double kFloorGBps = 4300.0;  // docs/BENCHMARKS.md: 4.3 TB/s for every byte
constexpr double kPeakTflops = 989.0;  // the H200's dense bf16 tensor-core peak (compute floors)
// docs/BENCHMARKS.md: the bf16 GEMM rate measured on the H200 (8192^3), the per-family floors of bench
constexpr double kGemmTflops = 790.0;

struct BenchOptions {
  std::string workload = "model";
  int context = 1024;          // model workload: tokens of context per sequence (decode) / prompt tokens (prefill)
  int history = 0;             // model workload, prefill: tokens in each sequence's caches before its prompt
  std::string phase = "both";  // model workload: decode, prefill or both
  std::string preset = "qwen3.5-4b";
  int max_seqs = 32;
  int replays = 200;      // replays per timed repetition
  int reps = 5;           // timed repetitions
  int node_replays = 50;  // replays under CUPTI
  std::string json;
  std::string csv, trace, dot;  // per-graph exports (the key is added to each file name)
  bool cpu = false;
  ArmOptions arms;
  std::string delta_prefill = "auto";  // model workload: the delta rule in prefill (auto, scan, chunked or mma)
  std::string attn_prefill = "auto";   // model workload: attention in prefill (auto, simt, mma or wgmma)
  std::string attn_decode = "auto";    // model workload: attention in decode (auto, simt or mma)
  std::string gemm = "auto";           // model workload: the projections (one of kGemmNames)
  std::string pdl = "auto";            // model workload: programmatic dependent launch (auto, off or on)
  std::string swiglu = "auto";         // model workload: where the MLP activation is computed (auto, gemm, kernel)
  std::string gated_norm =
      "auto";  // model workload: where the GDN gated norm is computed in decode (auto, delta, kernel)
  std::string mix_round =
      "auto";  // model workload: where the residual projections' output is rounded (auto, gemm, norm)
  std::string ssm_state = "f32";    // model workload: the GDN recurrent state's dtype (f32 or bf16)
  std::string arms_mode = "fixed";  // model workload: fixed (as chosen) or tune (timed per graph key at capture)
  bool marginal = false;            // model workload: marginal cost per op family (largest and smallest decode key)
  std::string lt_choices;           // model workload (bench, ab): --lt-choices FILE (models/lt_choices.h)
  std::string fault_after;          // bench and inspect: --fault-after LAYER:OP as given
  FaultDrill fault;                 // ... parsed (parse_fault_after) before anything runs
};

// Writes the per-graph exports the user asked for (CSV of node stats, Chrome trace, DOT); the key
// is added to each file name.
void write_exports(const BenchOptions& o, int key, const Manifest& m, const std::vector<NodeStats>& stats,
                   const std::vector<KernelRecord>& records);

// --lt-choices FILE (models/lt_choices.h; bench, ab, capture, inspect): add_lt_choices_option
// reads FILE when it exists, before any step is built, so that those shapes are not timed;
// write_lt_choices_option writes every choice of the process back to FILE after the captures
// (write_output_file). Both say what they did on `log` (stderr where
// stdout carries a report format) and do nothing for "". The help text of the option:
inline constexpr const char* kLtChoicesHelp =
    "Keep cuBLASLt's per-shape algorithm choices (gemm lt, lt-all, mixed) in FILE: read when it exists, so that "
    "those shapes are not timed again and this run executes the same algorithms as the run that wrote it (same "
    "cuBLASLt version and device model, else an error), and written back with every choice after the captures";
void add_lt_choices_option(const std::string& path, const DeviceInfo& dev, std::FILE* log = stdout);
void write_lt_choices_option(const std::string& path, const DeviceInfo& dev, std::FILE* log = stdout);

// Writes a CPU reference run's results to --json (nothing when it is not given).
void write_cpu_json(const BenchOptions& o, const nlohmann::json& result);
// A graph's clock line ("  clocks during the graph's timed replays: ...", gpu_clocks.h) and its JSON
// from its summary (ClockSampler::summarize); null, and no line, where NVML could not sample (the
// run says so once).
nlohmann::json report_clocks(const std::optional<ClockSummary>& clocks);

// The model step's options for a bench-like run: --max-seqs slots and decode rows, --context (+
// extra_context) positions, a prefill of max_seqs x context tokens when `prefill`, the arms, the
// settings (--delta-prefill, --attn-prefill, --attn-decode, --gemm, --pdl, --swiglu, --gated-norm, --mix-round,
// --ssm-state) and the fault drill (o.fault).
ModelStepOptions model_step_options(const BenchOptions& o, const ResolvedArms& arms, bool prefill, int extra_context);

// The options of the commands that build one whole-model step from a preset (inspect, capture,
// ab): --preset, --max-seqs, --context, --arm and the settings --delta-prefill, --attn-prefill,
// --attn-decode, --gemm, --pdl, --swiglu, --gated-norm, --mix-round, --ssm-state, --arms (values from ab_selection.h's
// setting_table()).
void add_model_step_options(CLI::App* cmd, BenchOptions& o);

// The settings of `o` as a StepChoice (its arms left empty), and back: `o` with `c`'s settings
// (the commands that compare two selections, ab and drift, build each side from the base so).
StepChoice settings_choice(const BenchOptions& o);
// The CPU reference model's SSM state for an --ssm-state value ("f32" or "bf16"; else an Error).
ref::Store reference_ssm_state(const std::string& name);
void apply_settings(BenchOptions& o, const StepChoice& c);

// With --arms tune, one line per captured graph: the arms timed and the ones kept.
void print_tuning(const ModelStep& step);

// What `step` runs: its arms and its settings with `auto` resolved (ab_selection.h StepChoice).
// With `key`, the arms that key's graph runs (tuned ones with --arms tune).
StepChoice resolved_choice(const ModelStep& step, const GraphKey* key = nullptr);

// bench and inspect with --fault-after: throws sg::Error when the options cannot go with a drill
// (--arms tune times the arms on graphs that would fault).
void check_fault_drill(const BenchOptions& o, const std::string& command);
// bench with --history N > 0: throws sg::Error when nothing would run a prefill (--workload
// gdn-layer, --phase decode) and, on the GPU (`gpu`), unless --phase is prefill: the caches sized
// for the history would change the decode graphs (their attention splits follow the cache length).
void check_history(const BenchOptions& o, const std::string& command, bool gpu);

int run_cpu_model(const BenchOptions& o, const std::string& why);
int run_gpu_model(const BenchOptions& o, const DeviceInfo& dev);

}  // namespace sg::cli
