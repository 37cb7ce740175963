// step_options.cpp: the command-line options of one whole-model step, shared by `inspect`,
// `capture` and `ab` (bench_common.h add_model_step_options), and what a built step resolved them to.
#include <fmt/format.h>

#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"

namespace sg::cli {

void add_model_step_options(CLI::App* cmd, BenchOptions& o) {
  cmd->add_option("--preset", o.preset, "model preset (qwen3.5-4b, qwen3.5-27b, tiny, tiny-dkdv)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", o.max_seqs,
                  "sequences (decode rows and prefill sequences); decode keys 1, 2, 4, "
                  "multiples of 8 up to it")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--context", o.context, "tokens of context per sequence (decode) or prompt tokens (prefill)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  add_arm_options(cmd, o.arms);
  const std::pair<const char*, std::string*> settings[] = {{"delta-prefill", &o.delta_prefill},
                                                           {"attn-prefill", &o.attn_prefill},
                                                           {"attn-decode", &o.attn_decode},
                                                           {"gemm", &o.gemm},
                                                           {"pdl", &o.pdl},
                                                           {"swiglu", &o.swiglu},
                                                           {"gated-norm", &o.gated_norm},
                                                           {"ssm-state", &o.ssm_state},
                                                           {"arms", &o.arms_mode}};
  for (const auto& [name, value] : settings) {
    const std::vector<std::string> values = setting_values(name);
    std::string list;
    for (size_t i = 0; i < values.size(); ++i) {
      list += fmt::format("{}{}", i == 0 ? "" : (i + 1 == values.size() ? " or " : ", "), values[i]);
    }
    cmd->add_option(fmt::format("--{}", name), *value, fmt::format("{} (see bench --help)", list))
        ->capture_default_str()
        ->check(CLI::IsMember(values));
  }
}

StepChoice resolved_choice(const ModelStep& step, const GraphKey* key) {
  const ModelStepOptions& r = step.options();
  StepChoice c;
  c.arms = key ? step.arms_for(*key) : r.arms;
  c.delta_prefill = delta_prefill_name(r.delta_prefill);
  c.attn_prefill = attn_prefill_name(r.attn_prefill);
  c.attn_decode = attn_decode_name(r.attn_decode);
  c.gemm = gemm_name(r.gemm);
  c.pdl = pdl_name(r.pdl);
  c.swiglu = swiglu_name(r.swiglu);
  c.gated_norm = gated_norm_name(r.gated_norm);
  c.ssm_state = ssm_state_name(r.ssm_state);
  c.arms_mode = r.tune_arms ? "tune" : "fixed";
  return c;
}

}  // namespace sg::cli
