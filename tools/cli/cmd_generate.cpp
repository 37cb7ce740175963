// cmd_generate.cpp: `stepgraph generate`: greedy generation from token ids on the GPU model step
// (models/model_step.h: one prefill step, then decode steps replaying captured graphs), or on the
// CPU reference model (models/reference_model.h) with --cpu or when no GPU is found.
// Weights: a Hugging Face checkpoint folder (--weights DIR: config.json + safetensors), or the
// synthetic weights of a preset (--preset; default 'qwen3.5-4b' on the GPU, 'tiny' on the CPU,
// since the CPU reference of the real sizes is very slow). The GPU's synthetic weights are
// generated on the GPU and are not the CPU reference's values for the same seed.
// Kernel arms (--arm, STEPGRAPH_ARMS, VT_*) are resolved as `bench` does and used by the GPU step;
// the CPU reference runs no kernels, so there a selected arm is an error naming it. The CPU path
// checks the host memory the model needs before allocating it (models/reference_memory.h); runs
// longer than two seconds report progress on stderr.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/host_memory.h"
#include "engine/text.h"
#include "kernels/ref/mlp_ref.h"
#include "models/hf_config.h"
#include "models/model_step.h"
#include "models/qwen35_config.h"
#include "models/reference_memory.h"
#include "models/reference_model.h"
#include "models/safetensors.h"
#include "models/tp_plan.h"
#include "models/tp_reference.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

struct GenerateOptions {
  std::string weights;
  std::string preset;  // empty: the default (see below)
  std::string tokens = "1,2,3";
  int max_new = 12;
  bool json = false;
  bool cpu = false;
  std::string dtype;  // empty: bf16 on the GPU, f32 on the CPU
  uint64_t seed = 1;
  bool chunked = false;
  std::string delta_prefill = "auto";  // the delta rule in the prefill step (auto, scan, chunked or mma)
  std::string attn_prefill = "auto";   // attention in the prefill step (auto, simt, mma or wgmma)
  std::string attn_decode = "auto";    // attention in the decode steps (auto, simt or mma)
  std::string gemm = "auto";           // the projections (kGemmNames)
  std::string pdl = "auto", swiglu = "auto", gated_norm = "auto", mix_round = "auto";  // as bench's
  std::string ssm_state = "f32";  // the GDN recurrent state's dtype (f32 or bf16), GPU and CPU
  ArmOptions arms;
  std::vector<std::string> gpu_settings_given;  // --attn-prefill, --gemm, ... as given (no CPU meaning)
  bool seed_given = false;                      // --seed given (it seeds synthetic weights only)
  bool check_nodes = false;                     // eager steps, every kernel node synchronised and checked
  std::string fault_after;                      // a fault drill's node, "LAYER:OP[@RUN]" (empty: none)
  int tp = 1;                                   // tensor-parallel ranks (CPU reference only, models/tp_reference.h)
};

// True when Ctrl-C stopped the generation before max_new tokens.
bool stopped_early(const GenerateOptions& o, const std::vector<int64_t>& out) {
  return sigint_received() && static_cast<int64_t>(out.size()) < o.max_new;
}

void print_result(const GenerateOptions& o, const char* implementation, const Qwen35Config& cfg,
                  const std::string& source, const std::string& dtype, const std::string& detail,
                  const std::vector<int64_t>& prompt, const std::vector<int64_t>& out, double secs,
                  const std::vector<std::string>& notes) {
  const bool interrupted = stopped_early(o, out);
  if (o.json) {
    nlohmann::json j;
    j["implementation"] = implementation;
    j["model"] = cfg.name;
    j["source"] = source;
    j["dtype"] = dtype;
    j["detail"] = detail;
    j["prompt"] = prompt;
    j["generated"] = out;
    j["seconds"] = secs;
    j["max_new"] = o.max_new;
    j["interrupted"] = interrupted;
    j["notes"] = notes;
    fmt::print("{}\n", j.dump(2));
  } else {
    for (const auto& n : notes) fmt::print(stderr, "note: {}\n", n);
    if (interrupted) {
      fmt::print("interrupted (SIGINT) after {} of {} tokens: what was generated so far follows\n", out.size(),
                 o.max_new);
    }
    fmt::print("model: {} (hidden {}, {} layers: {} GDN + {} attention, vocab {}), {}\n", printable(cfg.name),
               cfg.hidden, cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(), cfg.vocab, source);
    fmt::print("implementation: {}, {} activations, {}\n", implementation, dtype, detail);
    fmt::print("prompt ({}): {}\n", count_of(static_cast<long long>(prompt.size()), "token"), fmt::join(prompt, ","));
    fmt::print("generated ({}, greedy, {:.2f} s): {}\n", count_of(static_cast<long long>(out.size()), "token"), secs,
               fmt::join(out, ","));
  }
}

// The prompt against the model: its ids in the vocabulary, it and --max-new within the positions
// (before any weight is read or generated).
void check_prompt(const GenerateOptions& o, const std::vector<int64_t>& prompt, const Qwen35Config& cfg) {
  check_token_range(prompt, cfg.vocab, cfg.name);
  const std::string source =
      o.weights.empty() ? "the preset's context length"
                        : fmt::format("max_position_embeddings in {}",
                                      printable((std::filesystem::path(o.weights) / "config.json").string(), 4096));
  check_positions("generate", static_cast<int64_t>(prompt.size()), o.max_new, cfg.max_positions, cfg.name, source);
}

// How the run names a checkpoint: its folder, its shards and the tensors it holds that the model
// does not read (vision, MTP, and those unused_text_tensor allows; load_weights refuses any other).
std::string checkpoint_source(const std::filesystem::path& dir, const Checkpoint& ck, const Qwen35Config& cfg) {
  const std::vector<std::string> names = ck.names();
  const auto unused =
      std::count_if(names.begin(), names.end(), [&](const std::string& n) { return unused_text_tensor(n, cfg); });
  return fmt::format("checkpoint {} ({} shard(s), {} tensors ignored)", printable(dir.string(), 4096), ck.num_shards(),
                     ck.ignored().size() + static_cast<size_t>(unused));
}

// The GPU path: one slot, a prefill step of the whole prompt, then max_new - 1 decode steps (each
// replays the batch-1 graph), feeding back the GPU's argmax.
// `fault`: the drill parsed from --fault-after (off: none).
int run_gpu(const GenerateOptions& o, const DeviceInfo& dev, const ResolvedArms& arms, const FaultDrill& fault,
            std::vector<std::string> notes) {
  for (const auto& w : arms.warnings) fmt::print(stderr, "warning: {}\n", w);
  const std::vector<int64_t> prompt = parse_token_list(o.tokens);
  Qwen35Config cfg;
  std::optional<HostWeights> weights;
  std::string source;
  if (!o.weights.empty()) {
    const std::filesystem::path dir(o.weights);
    if (!o.preset.empty()) notes.push_back(fmt::format("--preset {} ignored: --weights gives the config", o.preset));
    if (o.seed_given) notes.push_back(fmt::format("--seed {} ignored: --weights gives the weights", o.seed));
    cfg = load_hf_config(dir / "config.json");
    const Checkpoint ck = Checkpoint::open(dir);
    check_prompt(o, prompt, cfg);  // before reading gigabytes of weights
    weights = load_weights(ck, cfg);
    source = checkpoint_source(dir, ck, cfg);
  } else {
    cfg = preset(o.preset.empty() ? "qwen3.5-4b" : o.preset);
    source = fmt::format("synthetic weights of preset '{}' generated on the GPU (seed {})", cfg.name, o.seed);
    check_prompt(o, prompt, cfg);
  }
  check_fault_layer(fault, cfg.layers, cfg.name);  // before the step is built
  const std::string dtype = o.dtype.empty() ? "bf16" : o.dtype;
  ModelStepOptions so;
  so.num_slots = 1;
  so.max_context = static_cast<int>(prompt.size()) + std::max(o.max_new, 1);
  so.max_decode_batch = 1;
  so.max_prefill_tokens = static_cast<int>(prompt.size());
  so.max_prefill_seqs = 1;
  so.act = dtype == "f32" ? DType::f32 : DType::bf16;
  so.synthetic = !weights.has_value();
  so.seed = o.seed;
  so.delta_prefill = o.chunked ? DeltaPrefill::chunked : parse_delta_prefill(o.delta_prefill);
  so.attn_prefill = parse_attn_prefill(o.attn_prefill);
  so.attn_decode = parse_attn_decode(o.attn_decode);
  so.gemm = parse_gemm(o.gemm);
  so.pdl = parse_pdl(o.pdl);
  so.swiglu = parse_swiglu(o.swiglu);
  so.gated_norm = parse_gated_norm(o.gated_norm);
  so.mix_round = parse_mix_round(o.mix_round);
  so.ssm_state = parse_ssm_state(o.ssm_state);
  so.arms = arms.arms;
  so.check_nodes = o.check_nodes;
  so.fault_layer = fault.layer;
  so.fault_op = fault.op;
  so.fault_run = fault.run;
  ModelStep step(cfg, so);
  if (weights) step.load_host_weights(*weights);
  // With --check-nodes the steps run eagerly (a graph cannot stop between its nodes).
  const RunMode mode = o.check_nodes ? RunMode::eager : RunMode::graph;
  if (!o.check_nodes) step.capture_all();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> out;
  if (o.max_new > 0) {
    const PrefillOutput p =
        step.prefill({PrefillRequest{0, std::vector<int32_t>(prompt.begin(), prompt.end()), 0}}, mode);
    out.push_back(p.tokens[0]);
    Progress progress("generate", o.max_new);
    while (static_cast<int>(out.size()) < o.max_new && !sigint_received()) {
      const int pos = static_cast<int>(prompt.size() + out.size()) - 1;
      const DecodeOutput d = step.decode({DecodeRequest{0, static_cast<int32_t>(out.back()), pos}}, mode);
      out.push_back(d.tokens[0]);
      progress.update(static_cast<int64_t>(out.size()));
    }
    progress.finish();
  }
  check_fault_matched(fault, step.fault_drill_matched(), "the captured graphs or checked steps", cfg.name);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_result(
      o, "gpu", cfg, source, dtype,
      fmt::format("{}; KV cache {}; GDN state {}; {} delta-rule prefill; {} attention prefill; {} attention decode; {} "
                  "projections; pdl {}; swiglu {}; gated norm {}; mix-round {}; arms {}; {}",
                  dev.describe(), dtype_name(step.kv_cache_dtype()), ssm_state_name(step.options().ssm_state),
                  delta_prefill_name(step.options().delta_prefill), attn_prefill_name(step.options().attn_prefill),
                  attn_decode_name(step.options().attn_decode), gemm_name(step.options().gemm),
                  pdl_name(step.options().pdl), swiglu_name(step.options().swiglu),
                  gated_norm_name(step.options().gated_norm), mix_round_name(step.options().mix_round),
                  arms.arms.describe(),
                  o.check_nodes ? "eager steps, every kernel node synchronised and checked (--check-nodes)"
                                : "graphs captured (prefill bucket, decode b=1)"),
      prompt, out, secs, notes);
  if (stopped_early(o, out)) return kInterruptedExit;
  check_fault_fired(fault, step.fault_drill_runs(), "in this run's steps");  // the tokens are out
  return 0;
}

int run(const GenerateOptions& o) {
  // Ctrl-C stops the generation after the current token; the tokens so far are printed.
  const SigintGuard guard;
  std::vector<std::string> notes;
  // Every source of arms is parsed first: a bad name is an error on either path.
  const ResolvedArms arms = resolve_cli_arms(o.arms.arms);
  // Parsed on either path: a bad value is an error even where the CPU reference runs.
  const FaultDrill fault = parse_fault_after(o.fault_after);
  if (o.tp > 1 && !o.cpu) {
    throw Error(fmt::format(
        "generate: --tp {} splits the model over tensor-parallel ranks on the CPU reference only (the GPU side is "
        "not built yet); add --cpu",
        o.tp));
  }
  if (!o.cpu) {
    const DeviceInfo dev = probe_device();
    if (dev.ok) return run_gpu(o, dev, arms, fault, notes);
    notes.push_back(fmt::format("{}: running the CPU reference model instead", dev.reason));
  }
  reject_arms_on_cpu(arms, "generate");
  if (o.check_nodes || !o.fault_after.empty()) {
    throw Error(
        "generate: --check-nodes and --fault-after check the GPU step's kernel nodes, but this run is the CPU "
        "reference model, so they cannot apply. Drop them, or run on a machine with a GPU.");
  }
  if (!o.gpu_settings_given.empty()) {
    throw Error(fmt::format(
        "generate: {} {} GPU kernels and how they launch, but this run is the CPU reference model (its own "
        "attention, projections and norms), so {} cannot apply. Drop {}, or run on a machine with a GPU.",
        fmt::join(o.gpu_settings_given, ", "), o.gpu_settings_given.size() == 1 ? "chooses" : "choose",
        o.gpu_settings_given.size() == 1 ? "it" : "they", o.gpu_settings_given.size() == 1 ? "it" : "them"));
  }
  const std::vector<int64_t> prompt = parse_token_list(o.tokens);
  Qwen35Config cfg;
  std::optional<Checkpoint> ck;
  std::string source;
  if (!o.weights.empty()) {
    const std::filesystem::path dir(o.weights);
    if (!o.preset.empty()) notes.push_back(fmt::format("--preset {} ignored: --weights gives the config", o.preset));
    if (o.seed_given) notes.push_back(fmt::format("--seed {} ignored: --weights gives the weights", o.seed));
    cfg = load_hf_config(dir / "config.json");
    ck = Checkpoint::open(dir);
    source = checkpoint_source(dir, *ck, cfg);
  } else {
    std::string name = o.preset;
    if (name.empty()) {
      name = "tiny";
      notes.push_back(
          "no --weights: using the synthetic weights of preset 'tiny' (the CPU reference of the real "
          "sizes is very slow; pass --preset to choose another)");
    }
    cfg = preset(name);
    source = fmt::format("synthetic weights of preset '{}' (seed {})", name, o.seed);
  }
  check_prompt(o, prompt, cfg);
  if (o.tp > 1) tp_plan(cfg, o.tp);  // a rank count the model does not divide: the error before loading
  const int64_t ctx = static_cast<int64_t>(prompt.size()) + std::max(o.max_new, 1);
  // Everything the CPU reference will hold, against the memory there is, before any allocation
  // (over ranks: the ranks' tensors as well as the whole model's, about twice the weights).
  const ReferenceMemory need = reference_memory(cfg, 1, ctx, static_cast<int64_t>(prompt.size()));
  check_host_memory(need.total() + (o.tp > 1 ? need.weights : 0),
                    fmt::format("the CPU reference model of '{}'", printable(cfg.name)), need.describe());
  if (need.weights > (uint64_t{2} << 30)) {
    fmt::print(stderr, "note: the f32 weights of '{}' take {} of host memory; the CPU reference is slow at this size\n",
               printable(cfg.name), format_host_bytes(need.weights));
  }
  HostWeights weights = ck ? load_weights(*ck, cfg) : synthetic_weights(cfg, o.seed);
  ReferenceOptions ro;
  ro.act = o.dtype == "bf16" ? ref::Store::bf16 : ref::Store::f32;  // default f32 on the CPU
  ro.chunked_prefill = o.chunked || chunked_delta_prefill(o.delta_prefill);
  ro.ssm_state = reference_ssm_state(o.ssm_state);
  std::string detail =
      fmt::format("{} delta-rule prefill; GDN state {}", ro.chunked_prefill ? "chunked" : "recurrent", o.ssm_state);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> out;
  if (o.tp > 1) detail += fmt::format("; tensor parallel over {} CPU ranks", o.tp);
  std::optional<ReferenceModel> model;  // one model; over ranks tp_generate holds one a rank
  // The prompt's prefill is one forward: while it runs, its progress is by layer, and Ctrl-C stops
  // it after the current layer (then nothing was generated).
  Progress* prefill_layers = nullptr;
  if (o.tp == 1) {
    ReferenceOptions one = ro;
    one.on_layer = [&prefill_layers](int done, int) {
      if (!prefill_layers) return true;
      prefill_layers->update(done);
      return !sigint_received();
    };
    model.emplace(cfg, std::move(weights), 1, ctx, one);
  }

  if (o.max_new > 0) {
    Progress progress("generate", o.max_new);
    if (o.tp > 1) {  // one ReferenceModel a rank, on threads, summed where GPUs would all-reduce
      out = tp_generate(cfg, weights, o.tp, prompt, o.max_new, ro, {}, [&](int done) {
              progress.update(done);
              return !sigint_received();
            }).tokens;
    } else {  // greedy generation as ReferenceModel::generate does it, with progress for long runs
      std::vector<float> logits;
      {
        const std::string label =
            fmt::format("prefill of {}", count_of(static_cast<long long>(prompt.size()), "token"));
        Progress layers(label, cfg.layers, "layers");
        prefill_layers = &layers;
        try {
          logits = model->prefill({Sequence{0, prompt}});
        } catch (const ReferenceInterrupted& e) {  // Ctrl-C: no logits, nothing generated
          fmt::print(stderr, "{}: Ctrl-C: {}\n", label, e.what());
        }
        prefill_layers = nullptr;
        layers.finish();
      }
      for (int i = 0; i < o.max_new && !logits.empty(); ++i) {
        const int64_t next = ref::argmax(logits.data(), cfg.vocab);
        out.push_back(next);
        progress.update(i + 1);
        if (sigint_received()) break;
        if (i + 1 < o.max_new) logits = model->decode({0}, {next});
      }
    }
    progress.finish();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  print_result(o, "cpu-reference", cfg, source, o.dtype.empty() ? "f32" : o.dtype, detail, prompt, out, secs, notes);
  return stopped_early(o, out) ? kInterruptedExit : 0;
}

}  // namespace

void register_generate(CLI::App& app, Action& action) {
  auto* cmd =
      app.add_subcommand("generate",
                         "Greedy generation from token ids on the GPU model step (prefill, then "
                         "graphed decode steps), or on the CPU reference model (--cpu, or when no "
                         "GPU is found). Ctrl-C stops after the current token (on the CPU, during the prompt's "
                         "prefill: after the current layer), prints the tokens generated so far and exits with 130.");
  static GenerateOptions o;
  cmd->add_option("--weights", o.weights,
                  "Hugging Face checkpoint folder (config.json + model.safetensors or "
                  "shards); without it, a preset's synthetic weights")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--preset", o.preset,
                  "Preset for synthetic weights (default qwen3.5-4b on the GPU, tiny on the "
                  "CPU; `stepgraph info` lists them)");
  cmd->add_option("--tokens", o.tokens,
                  "Prompt token ids, comma separated (non-negative integers below the vocabulary size)")
      ->capture_default_str();
  cmd->add_option("--max-new", o.max_new,
                  fmt::format("Tokens to generate, at most {} (the Qwen3.5 context length; with the prompt, at most "
                              "the checkpoint's max_position_embeddings); runs longer than two seconds report "
                              "progress on stderr",
                              kMaxNewTokens))
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxNewTokens));
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  cmd->add_flag("--cpu", o.cpu, "Run the CPU reference model instead of the GPU");
  cmd->add_option("--tp", o.tp,
                  "Tensor-parallel ranks: split the model's heads, MLP rows and LM head over this many ranks "
                  "(a divisor of its key, query and KV heads and MLP size) and sum their outputs where GPUs would "
                  "all-reduce. The CPU reference only for now (--cpu; a thread a rank); its tokens are those of "
                  "--tp 1")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--dtype", o.dtype,
                  "Compute dtype: bf16 (default on the GPU) or f32 (parity with HF; default on "
                  "the CPU, where bf16 emulates a bf16 step with weights rounded to bf16)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--seed", o.seed, "Seed of the synthetic weights (an integer in [0, 2^64 - 1])")
      ->capture_default_str()
      ->check(unsigned_integer_check());
  add_arm_options(cmd, o.arms);
  auto* chunked = cmd->add_flag("--chunked", o.chunked, "Same as --delta-prefill chunked (GPU and CPU reference)");
  cmd->add_option(
         "--delta-prefill", o.delta_prefill,
         "How the prefill step runs the gated delta rule: scan (the reference-exact sequential scan), "
         "chunked (the chunked WY form, 64-token chunks, within f32 tolerance of the scan; on the CPU the "
         "same as --chunked), mma (GPU: the chunked WY form with its products on the tensor cores, bf16 "
         "operands split in two parts, within 1e-4 normalised f32 error of the double reference; on the "
         "CPU the same as --chunked), wgmma (GPU: the same products on the warpgroup tensor cores, bf16, "
         "Dk = Dv = 128, compute capability 9.0; on the CPU the same as --chunked), wgmma-t (GPU: the same "
         "products in two kernels, every chunk's T and P first, then the recurrence with the state transposed, "
         "where wgmma runs; on the CPU the same as --chunked) or auto (on the GPU wgmma-t for bf16 where it "
         "runs, else mma for bf16 and chunked for f32 where the kernel is built for the model's Dk and fits "
         "the device, else scan; on the CPU the scan)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("delta-prefill")))
      ->excludes(chunked);  // two answers to one question: refused, not one of them dropped
  cmd->add_option("--attn-prefill", o.attn_prefill,
                  "How the prefill step runs attention (GPU only): simt (the f32 CUDA-core kernel), mma (bf16 tensor "
                  "cores, within the bf16 attention tolerance of simt), wgmma (the same on the warpgroup tensor "
                  "cores of compute capability 9.0, D 64/128/256) or auto (wgmma where it runs and fits, else mma for "
                  "bf16 with D 32/64/128/256 where the device allows it, else simt)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma", "wgmma"}));
  cmd->add_option("--gemm", o.gemm,
                  "How the steps run their projections (GPU only): cublas, skinny (the tensor-core weight-streaming "
                  "kernel for at most 32 rows; within the GEMM tolerance of cuBLAS), mixed (skinny up to 24 rows, for "
                  "the LM head and up to 32 rows for weights of at most 4096 columns in wide blocks, lt for the other "
                  "decode projections, cuBLAS for prefill), lt (cuBLASLt, the "
                  "fastest of its top algorithms per shape, up to 32 "
                  "rows), lt-all (the same for every step, prefill included), wgmma (mixed up to 32 rows, the own "
                  "wgmma GEMM above, with the SwiGLU in gate_up's epilogue; compute capability 9.0), wgmma-large "
                  "(wgmma for steps of at least 8192 tokens, cuBLAS between) or auto (wgmma-large for bf16 on "
                  "compute capability 9.0, mixed on other sm_90+, else cublas)")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<std::string>(kGemmNames.begin(), kGemmNames.end())));
  cmd->add_option("--attn-decode", o.attn_decode,
                  "How the decode steps run attention (GPU only): simt (the f32 CUDA-core kernel), mma (bf16 tensor "
                  "cores, within the bf16 attention tolerance of simt) or auto (mma for bf16 with D 64/128/256 and "
                  "at most 8 query heads per kv head where the device allows it, else simt)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "simt", "mma"}));
  cmd->add_option("--ssm-state", o.ssm_state,
                  "The dtype the GDN layers keep their recurrent state in between steps (GPU and CPU reference): f32 "
                  "or bf16 (the arithmetic stays f32; the state is rounded to bf16 after each decode token and at the "
                  "end of the prefill, which halves its bytes and changes the numbers)")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("ssm-state")));
  add_step_setting_options(cmd, {o.pdl, o.swiglu, o.gated_norm, o.mix_round}, "GPU only: ");
  cmd->add_flag("--check-nodes", o.check_nodes,
                "GPU only: run the steps eagerly and synchronise after every kernel node, so a kernel that "
                "faults while it runs (an illegal address) is reported with its node: layer, op and arm. Slow; "
                "for finding a fault that a replayed graph reported");
  add_fault_after_option(cmd, o.fault_after, "in the captured graphs and, with --check-nodes, in the eager steps");
  cmd->callback([&action, cmd] {
    o.seed_given = cmd->count("--seed") > 0;
    o.gpu_settings_given.clear();
    for (const char* name :
         {"--attn-prefill", "--attn-decode", "--gemm", "--pdl", "--swiglu", "--gated-norm", "--mix-round"}) {
      if (cmd->count(name) > 0) o.gpu_settings_given.push_back(name);
    }
    action = [] { return run(o); };
  });
}

}  // namespace sg::cli
