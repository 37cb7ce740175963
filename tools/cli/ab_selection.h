// ab_selection.h: what one side of `stepgraph ab` runs, and the grammar that selects it.
//
//   SEL   := "" | ITEM ( "," ITEM )*
//   ITEM  := KEY "=" VALUE          (blanks around KEY and VALUE are ignored)
//   KEY   := an op of the arm table (conv.fwd, conv.chunks, conv.update, postconv, gdn.prefill,
//            gdn.decode) or a setting (delta-prefill, attn-prefill, attn-decode, gemm, pdl, swiglu, gated-norm,
//            mix-round, ssm-state, arms)
//   VALUE := one of that op's arms (`stepgraph arms`) or one of that setting's values
//
// e.g. "postconv=token_tile", "conv.fwd=k4,gemm=skinny", "attn-decode=simt". A selection changes
// only what it names: the rest comes from the base (the defaults, --arm / STEPGRAPH_ARMS / VT_*
// and the setting options of the command line). "" is the base itself. Errors (sg::Error, one
// sentence naming the option): an empty item, an item without '=', an unknown key (listing the
// valid keys), an unknown value (listing the key's valid values), a key given twice.
// Pure host code.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"

namespace CLI {
class App;
}

namespace sg::cli {

// One model-step setting (not an arm: it changes the arithmetic within a written tolerance).
struct SettingInfo {
  std::string_view name;                     // "attn-decode": the command-line option without "--"
  std::span<const std::string_view> values;  // the default first ("auto", but ssm-state's f32 and arms' fixed)
};
// delta-prefill, attn-prefill, attn-decode, gemm, pdl, swiglu, gated-norm, mix-round, ssm-state, arms (the options'
// value lists come from here too).
std::span<const SettingInfo> setting_table();
const SettingInfo* find_setting(std::string_view name);
std::vector<std::string> setting_values(std::string_view name);  // for CLI::IsMember

// Adds --NAME for setting NAME (setting_table()) bound to `value`, checked against the setting's
// values; help: `before`, the values ("auto, off or on"), `after`.
void add_setting_option(CLI::App* cmd, std::string_view name, std::string& value, const std::string& before,
                        const std::string& after);

// The step settings that generate, serve and soak take as bench does: --pdl, --swiglu, --gated-norm
// and --mix-round, each checked against its values (the table above); `prefix` starts each
// help text ("GPU: ").
struct StepSettingOptions {
  std::string& pdl;
  std::string& swiglu;
  std::string& gated_norm;
  std::string& mix_round;
};
void add_step_setting_options(CLI::App* cmd, StepSettingOptions o, const std::string& prefix);

// The field of a setting (setting_table() names) in any options struct that names its settings as
// StepChoice does (delta_prefill, ..., ssm_state, arms_mode): StepChoice and the commands'
// BenchOptions. Null for a name outside the table.
template <class T>
auto* setting_field(T& o, std::string_view name) {
  if (name == "delta-prefill") return &o.delta_prefill;
  if (name == "attn-prefill") return &o.attn_prefill;
  if (name == "attn-decode") return &o.attn_decode;
  if (name == "gemm") return &o.gemm;
  if (name == "pdl") return &o.pdl;
  if (name == "swiglu") return &o.swiglu;
  if (name == "gated-norm") return &o.gated_norm;
  if (name == "mix-round") return &o.mix_round;
  if (name == "ssm-state") return &o.ssm_state;
  if (name == "arms") return &o.arms_mode;
  return static_cast<decltype(&o.gemm)>(nullptr);
}

// What a model step runs: the arm of every op and the ten settings, by their command-line names.
struct StepChoice {
  ArmSelection arms;
  std::string delta_prefill = "auto", attn_prefill = "auto", attn_decode = "auto", gemm = "auto", pdl = "auto",
              swiglu = "auto", gated_norm = "auto", mix_round = "auto", ssm_state = "f32";
  std::string arms_mode = "fixed";  // the setting "arms": fixed or tune (--arms)

  std::string& setting(std::string_view name);  // an error for a name outside setting_table()
  const std::string& setting(std::string_view name) const;
  // "delta-prefill=auto,attn-prefill=auto,attn-decode=auto,gemm=auto,pdl=auto,swiglu=auto,gated-norm=auto,
  // mix-round=auto,ssm-state=f32,arms=fixed"
  std::string describe_settings() const;
  bool operator==(const StepChoice&) const = default;
};

struct SelectionItem {
  std::string key, value;
  bool setting = false;  // a setting (else an op of the arm table)
};

struct Selection {
  std::string text;  // as given
  std::vector<SelectionItem> items;
  // "postconv=token_tile,gemm=skinny" (normalised: no blanks), or "(base)" when empty.
  std::string describe() const;
};

// `option` names the source in errors ("--a", "--b").
Selection parse_selection(std::string_view text, std::string_view option);

// `base` with the selection's items applied.
StepChoice apply(const Selection& sel, StepChoice base);

// One side's arms and where each came from: `base`'s (--arm, STEPGRAPH_ARMS, the seed's flags or
// "default") with the ops the selection names applied and their source set to `option` ("--a",
// "--b"). `--arms tune` searches only the ops whose source is "default" (model_step_options).
ResolvedArms side_arms(const ResolvedArms& base, const Selection& sel, std::string_view option);

// Whether two resolved choices run the same arithmetic on one kind of graph: the settings that
// kind of step uses are equal (decode: attn-decode, gemm, ssm-state; prefill: delta-prefill,
// attn-prefill, gemm, ssm-state; both: mix-round, unless gemm is skinny). Arms never count: every arm of an op is
// byte-identical (docs/ARMS.md), so such choices must give the same bytes.
bool same_arithmetic(const StepChoice& a, const StepChoice& b, bool prefill);

// The valid keys, for errors and --help: "conv.fwd, conv.chunks, ..., delta-prefill, ..., gemm".
std::string valid_selection_keys();

// How `ab` names a side in a fault's report and the drill's line: "side A (the base)", "side B
// (postconv=fast)". `side`: "A" or "B".
std::string side_label(std::string_view side, const Selection& sel);

// `ab --fault-after` drills both sides' captured graphs. A side that tunes its arms (`arms=tune`
// from its selection, else the base's --arms tune) cannot go with it: the arms are timed on graphs
// of their own at capture, which the drill would fault. Each such cause once, named by where it
// came from ("--arms tune (...)", "--b arms=tune (...)"); empty when there is none.
// `base_arms_mode`: --arms (fixed or tune).
std::vector<std::string> drill_conflicts(const Selection& a, const Selection& b, std::string_view base_arms_mode);

}  // namespace sg::cli
