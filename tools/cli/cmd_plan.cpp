// cmd_plan.cpp: `stepgraph plan`: the device memory a model step needs (models/memory_plan.h), for
// a preset or a checkpoint's config.json, slots, context and batch sizes, whole or per
// tensor-parallel rank (models/tp_plan.h), against a device's memory. Host code only: it runs on any
// machine and allocates nothing on a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/error.h"
#include "engine/text.h"
#include "kernels/delta_rule_records.h"
#include "models/hf_config.h"
#include "models/memory_plan.h"
#include "models/qwen35_config.h"
#include "models/step_layout.h"
#include "models/step_settings.h"
#include "models/tp_plan.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"

namespace sg::cli {
namespace {

struct PlanOptions {
  std::string preset = "qwen3.5-4b";
  std::string weights;          // a checkpoint folder: its config.json gives the model
  int max_seqs = 32;            // decode rows and prefill sequences
  int slots = 0;                // 0: max_seqs
  int context = 1024;           // tokens a slot holds
  int64_t prefill_tokens = -1;  // -1: max_seqs x context, at most kDefaultPrefill; 0: no prefill step
  std::string dtype = "bf16";
  std::string ssm_state = "f32";
  std::string delta_prefill = "auto";  // wgmma-t (auto's choice on an H200) adds its chunk records' workspace
  int tp = 1;
  double device_gib = 139.8;  // an H200 as the CUDA runtime reports it
  std::string json;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int64_t kDefaultPrefill = 32768;
// The device the plan's settings resolve on: an H200 (compute capability 9.0, 227 KB of shared
// memory a block).
constexpr DeviceLimits kPlanDevice{132, 227 * 1024, 9,
                                   0};  // the default prefill step's token budget (bench's prefill-b32)

int run_plan(const PlanOptions& o) {
  // A step the options describe can never fill: refused rather than planned for memory it never uses.
  if (o.slots > 0 && o.slots < o.max_seqs) {
    throw Error(fmt::format(
        "plan: --slots {} is fewer than --max-seqs {}: the rows of a decode step are distinct sequences, each in "
        "its own slot, so no step could hold more than {}. Give --max-seqs {} or fewer, or --slots {} or more.",
        o.slots, o.max_seqs, count_of(o.slots, "row"), o.slots, o.max_seqs));
  }
  if (o.prefill_tokens > int64_t{o.max_seqs} * o.context) {
    throw Error(fmt::format(
        "plan: --prefill-tokens {} is more than --max-seqs x --context = {} x {} = {}: a prefill step holds at most "
        "--max-seqs sequences of at most --context tokens each, so those tokens could never all come.",
        o.prefill_tokens, o.max_seqs, o.context, int64_t{o.max_seqs} * o.context));
  }
  check_writable(o.json, "--json");
  Qwen35Config c;
  std::string source;
  if (!o.weights.empty()) {
    const std::filesystem::path dir(o.weights);
    c = load_hf_config(dir / "config.json");
    source = fmt::format("config.json of {}", printable(dir.string(), 4096));
  } else {
    c = preset(o.preset);
    source = fmt::format("preset '{}'", o.preset);
  }
  StepLayoutParams p;
  p.act = o.dtype == "f32" ? DType::f32 : DType::bf16;
  p.ssm_state = parse_ssm_state(o.ssm_state);
  p.num_slots = o.slots > 0 ? o.slots : o.max_seqs;
  p.max_context = o.context;
  p.max_decode_batch = o.max_seqs;
  p.max_prefill_seqs = o.max_seqs;
  const int64_t prefill =
      o.prefill_tokens >= 0 ? o.prefill_tokens : std::min<int64_t>(int64_t{o.max_seqs} * o.context, kDefaultPrefill);
  p.max_prefill_tokens = static_cast<int>(prefill);
  p.meta_bytes = step_meta_bytes(p.max_decode_batch, p.max_prefill_tokens, p.max_prefill_seqs);
  const TpPlan tp = tp_plan(c, o.tp);  // refuses rank counts the model does not divide
  const double device = o.device_gib * kGiB;

  fmt::print("model: {} ({}): {} layers, {} weights and activations, {} SSM state\n", printable(c.name), source,
             c.layers, o.dtype, o.ssm_state);
  fmt::print("step: {} of {}, decode batches up to {}, {}\n", count_of(p.num_slots, "slot"),
             count_of(p.max_context, "token"), count_of(p.max_decode_batch, "row"),
             p.max_prefill_tokens == 0 ? std::string("no prefill step")
                                       : fmt::format("prefills up to {} in {}", count_of(p.max_prefill_tokens, "token"),
                                                     count_of(p.max_prefill_seqs, "sequence")));
  nlohmann::json j{{"model", c.name},
                   {"source", source},
                   {"dtype", o.dtype},
                   {"ssm_state", o.ssm_state},
                   {"delta_prefill", o.delta_prefill},
                   {"slots", p.num_slots},
                   {"context", p.max_context},
                   {"max_seqs", p.max_decode_batch},
                   {"prefill_tokens", p.max_prefill_tokens},
                   {"tp", o.tp},
                   {"device_bytes", device}};
  bool fits = true;
  for (const TpRank& r : tp.rank) {
    StepLayoutParams rp = p;
    if (o.tp > 1) rp.head_rows = r.vocab.size();
    const Qwen35Config& rc = o.tp > 1 ? r.config : c;
    // wgmma-t's chunk records: asked for, or what auto resolves to on the plan's device.
    const DeltaPrefill want = parse_delta_prefill(o.delta_prefill);
    // resolve_delta_prefill refuses a form the model or dtype cannot run (wgmma-t for f32, or for
    // the tiny presets' head sizes), as the step would, instead of planning its workspace.
    const bool two_kernel =
        resolve_delta_prefill(want, rc.gdn, p.max_prefill_tokens > 0, p.act, kPlanDevice) == DeltaPrefill::wgmma_t;
    if (two_kernel && rc.num_linear_attention() > 0 && p.max_prefill_tokens > 0) {
      rp.delta_workspace_bytes =
          delta_records::workspace_bytes(p.max_prefill_tokens, p.max_prefill_seqs, rc.gdn.Hv);  // this rank's v-heads
    }
    const MemoryPlan m = plan_memory(rc, rp);
    const bool ok = static_cast<double>(m.total) <= device;
    fits = fits && ok;
    if (r.rank == 0) fmt::print("\n{}\n", m.table());
    if (o.tp > 1) {
      fmt::print("rank {} of {}: {:.1f} GiB (LM head rows {}..{})\n", r.rank, o.tp, static_cast<double>(m.total) / kGiB,
                 r.vocab.begin, r.vocab.end);
    } else {
      fmt::print("total: {:.1f} GiB\n", static_cast<double>(m.total) / kGiB);
    }
    nlohmann::json cats;
    for (int k = 0; k < kMemoryCategories; ++k) {
      const auto cat = static_cast<MemoryCategory>(k);
      cats[std::string(category_name(cat))] = m.bytes_of(cat);
    }
    j["ranks"].push_back({{"rank", r.rank}, {"total_bytes", m.total}, {"categories", cats}, {"fits", ok}});
  }
  fmt::print("{} in {:g} GiB{}\n", fits ? "fits" : "does not fit", o.device_gib,
             o.tp > 1 ? (fits ? " on every rank" : " on some rank") : "");
  fmt::print(
      "(the plan is what the step's arena takes; beyond it come the kernels' workspaces, a few MB, the cuBLAS "
      "workspace and what instantiating the graphs takes: `stepgraph capture` measures those)\n");
  j["fits"] = fits;
  if (!o.json.empty()) write_output_file(o.json, "--json", j.dump(2) + "\n");
  return 0;
}

}  // namespace

void register_plan(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "plan",
      "The device memory a model step needs, tensor by tensor (weights, conv state, SSM state, KV cache, "
      "activations, step metadata, workspace), for a preset or a checkpoint's config.json, whole or per "
      "tensor-parallel rank, against a device's memory. Needs no GPU.");
  static PlanOptions o;
  auto* preset_opt = cmd->add_option("--preset", o.preset, "Model preset (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv)")
                         ->capture_default_str();
  cmd->add_option("--weights", o.weights, "Hugging Face checkpoint folder: its config.json gives the model")
      ->check(CLI::ExistingDirectory)
      ->excludes(preset_opt);  // one model: the checkpoint's or the preset's
  cmd->add_option("--max-seqs", o.max_seqs, "Decode rows and prefill sequences a step takes")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--slots", o.slots, "Sequences with a cache, at least --max-seqs (default: --max-seqs)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--context", o.context, "Tokens a slot holds (prompt and generated)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefill-tokens", o.prefill_tokens,
                  "Tokens of the largest prefill step (default: --max-seqs x --context, at most 32768; 0: no "
                  "prefill step)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--dtype", o.dtype, "Weights and activations: bf16 or f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--ssm-state", o.ssm_state, "The GDN recurrent state: f32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("ssm-state")));
  cmd->add_option("--delta-prefill", o.delta_prefill,
                  "The prefill's delta rule (as bench): wgmma-t adds the chunk records of its two kernels to the "
                  "workspace, and so does auto for bf16 models with key and value heads of 128 (it resolves to "
                  "wgmma-t on an H100 / H200); the others need none")
      ->capture_default_str()
      ->check(CLI::IsMember(setting_values("delta-prefill")));
  cmd->add_option("--tp", o.tp,
                  "Tensor-parallel ranks: the plan of each rank (1/R of the heads, MLP rows, KV cache and SSM "
                  "state; the embedding and norms whole)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--device-gib", o.device_gib, "The device memory to compare with, GiB (default: an H200's)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));  // NaN, which the range lets through, is refused by check_option_values
  cmd->add_option("--json", o.json, "Also write the plan's totals per rank and category as JSON");
  cmd->callback([&action] { action = [] { return run_plan(o); }; });
}

}  // namespace sg::cli
