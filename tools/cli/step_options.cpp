// step_options.cpp: the command-line options of one whole-model step, shared by `inspect`,
// `capture` and `ab` (bench_common.h add_model_step_options), and what a built step resolved them to.
#include <fmt/format.h>

#include "engine/error.h"
#include "tools/cli/ab_selection.h"
#include "tools/cli/bench_common.h"

namespace sg::cli {

namespace {

// The BenchOptions field of a setting (ab_selection.h's setting_table() names).
template <class T>
auto* option_field(T& o, std::string_view name) {
  auto* f = setting_field(o, name);
  if (!f) throw Error(fmt::format("no setting '{}'", name));
  return f;
}

}  // namespace

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
  cmd->add_option("--lt-choices", o.lt_choices, kLtChoicesHelp);
  for (const SettingInfo& s : setting_table())
    add_setting_option(cmd, s.name, *option_field(o, s.name), "", " (see bench --help)");
}

ref::Store reference_ssm_state(const std::string& name) {
  return parse_ssm_state(name) == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
}

StepChoice settings_choice(const BenchOptions& o) {
  StepChoice c;
  for (const SettingInfo& s : setting_table()) c.setting(s.name) = *option_field(o, s.name);
  return c;
}

void apply_settings(BenchOptions& o, const StepChoice& c) {
  for (const SettingInfo& s : setting_table()) *option_field(o, s.name) = c.setting(s.name);
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
  c.mix_round = mix_round_name(r.mix_round);
  c.ssm_state = ssm_state_name(r.ssm_state);
  c.arms_mode = r.tune_arms ? "tune" : "fixed";
  return c;
}

}  // namespace sg::cli
