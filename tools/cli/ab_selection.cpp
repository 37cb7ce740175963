// ab_selection.cpp: the selection grammar of `stepgraph ab` (see ab_selection.h).
#include "tools/cli/ab_selection.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <utility>

#include "engine/error.h"
#include "engine/text.h"
#include "models/step_settings.h"

namespace sg::cli {
namespace {

constexpr std::array<std::string_view, 6> kDeltaPrefill = {"auto", "scan", "chunked", "mma", "wgmma", "wgmma-t"};
constexpr std::array<std::string_view, 4> kAttnPrefill = {"auto", "simt", "mma", "wgmma"};
constexpr std::array<std::string_view, 3> kAttn = {"auto", "simt", "mma"};
constexpr std::array<std::string_view, 3> kPdl = {"auto", "off", "on"};
constexpr std::array<std::string_view, 2> kArmsMode = {"fixed", "tune"};
const std::array<SettingInfo, 10> kSettings = {{
    {"delta-prefill", kDeltaPrefill},
    {"attn-prefill", kAttnPrefill},
    {"attn-decode", kAttn},
    {"gemm", kGemmNames},
    {"pdl", kPdl},
    {"swiglu", kSwigluNames},
    {"gated-norm", kGatedNormNames},
    {"mix-round", kMixRoundNames},
    {"ssm-state", kSsmStateNames},
    {"arms", kArmsMode},
}};

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (auto n : names) out += fmt::format("{}{}", out.empty() ? "" : ", ", n);
  return out;
}

}  // namespace

std::span<const SettingInfo> setting_table() { return kSettings; }

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& s : kSettings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> setting_values(std::string_view name) {
  const SettingInfo* s = find_setting(name);
  require(s != nullptr, "no setting '{}'", name);
  return {s->values.begin(), s->values.end()};
}

void add_setting_option(CLI::App* cmd, std::string_view name, std::string& value, const std::string& before,
                        const std::string& after) {
  const std::vector<std::string> values = setting_values(name);
  std::string list;
  for (size_t i = 0; i < values.size(); ++i) {
    list += fmt::format("{}{}", i == 0 ? "" : (i + 1 == values.size() ? " or " : ", "), values[i]);
  }
  cmd->add_option(fmt::format("--{}", name), value, before + list + after)
      ->capture_default_str()
      ->check(CLI::IsMember(values));
}

void add_step_setting_options(CLI::App* cmd, StepSettingOptions o, const std::string& prefix) {
  add_setting_option(cmd, "pdl", o.pdl, prefix + "programmatic dependent launch: ", " (as bench)");
  add_setting_option(cmd, "swiglu", o.swiglu, prefix + "where the MLP activation is computed: ", " (as bench)");
  add_setting_option(cmd, "gated-norm", o.gated_norm,
                     prefix + "where the GDN gated RMSNorm is computed: ", " (as bench)");
  add_setting_option(cmd, "mix-round", o.mix_round,
                     prefix + "where the projections before each RMSNorm round their output: ", " (as bench)");
}

std::string& StepChoice::setting(std::string_view name) {
  return const_cast<std::string&>(static_cast<const StepChoice&>(*this).setting(name));
}

const std::string& StepChoice::setting(std::string_view name) const {
  if (const std::string* f = setting_field(*this, name)) return *f;
  throw Error(fmt::format("no setting '{}'", printable(name)));
}

std::string StepChoice::describe_settings() const {
  std::string out;
  for (const SettingInfo& s : kSettings) out += fmt::format("{}{}={}", out.empty() ? "" : ",", s.name, setting(s.name));
  return out;
}

std::string Selection::describe() const {
  if (items.empty()) return "(base)";
  std::string out;
  for (const auto& it : items) out += fmt::format("{}{}={}", out.empty() ? "" : ",", it.key, it.value);
  return out;
}

bool same_arithmetic(const StepChoice& a, const StepChoice& b, bool prefill) {
  if (a.gemm != b.gemm || a.ssm_state != b.ssm_state) return false;
  // An f32 output of the residual projections (norm) is the same arithmetic on the skinny kernel
  // only: cuBLAS and cuBLASLt may pick another algorithm (another summation order) for it. partials
  // is gemm's arithmetic everywhere (the skinny kernel's partials summed in its order by the norm).
  const bool f32_mix = a.mix_round == "norm" || b.mix_round == "norm";
  if (a.mix_round != b.mix_round && f32_mix && a.gemm != "skinny") return false;
  // residual (auto's choice on one rank) adds the product in the GEMM where cublasGemmEx runs a
  // residual projection: every prefill step of more than 32 rows, and decode steps under cublas (or
  // skinny, which leaves shapes it refuses to cuBLAS; or auto, which is cublas off sm_90); elsewhere
  // it is partials, gemm's arithmetic.
  auto adds = [](const std::string& m) { return m == "residual" || m == "auto"; };
  const bool residual = adds(a.mix_round) != adds(b.mix_round);
  if (residual && (prefill || a.gemm == "cublas" || a.gemm == "skinny" || a.gemm == "auto")) return false;
  if (prefill) return a.delta_prefill == b.delta_prefill && a.attn_prefill == b.attn_prefill;
  return a.attn_decode == b.attn_decode;
}

std::string valid_selection_keys() {
  std::string out = valid_ops_list();
  for (const SettingInfo& s : kSettings) out += fmt::format(", {}", s.name);
  return out;
}

Selection parse_selection(std::string_view text, std::string_view option) {
  Selection sel;
  sel.text = std::string(text);
  if (trim(text).empty()) return sel;
  const std::string shown = printable(text);
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    const std::string_view item = trim(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos));
    if (item.empty()) {
      throw Error(
          fmt::format("{} \"{}\": empty item (a comma with nothing {} it); write key=value items separated by "
                      "commas",
                      option, shown, comma == std::string_view::npos ? "after" : "before"));
    }
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw Error(fmt::format("{} \"{}\": item \"{}\" is not key=value (keys: {})", option, shown, printable(item),
                              valid_selection_keys()));
    }
    SelectionItem it;
    const std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    it.key = std::string(key);
    it.value = std::string(value);
    if (const auto op = find_op(key)) {
      if (!find_arm(*op, value)) {
        throw Error(fmt::format("{} \"{}\": unknown arm \"{}\" for {} (valid arms of {}: {})", option, shown,
                                printable(value), key, key, valid_arms_list(*op)));
      }
    } else if (const SettingInfo* s = find_setting(key)) {
      it.setting = true;
      bool known = false;
      for (auto v : s->values) known = known || v == value;
      if (!known) {
        throw Error(fmt::format("{} \"{}\": unknown value \"{}\" for {} (valid values of {}: {})", option, shown,
                                printable(value), key, key, join(s->values)));
      }
    } else {
      throw Error(fmt::format("{} \"{}\": unknown key \"{}\" (valid keys: {})", option, shown, printable(key),
                              valid_selection_keys()));
    }
    for (const auto& prev : sel.items) {
      if (prev.key == it.key) throw Error(fmt::format("{} \"{}\": {} is given twice", option, shown, it.key));
    }
    sel.items.push_back(std::move(it));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return sel;
}

StepChoice apply(const Selection& sel, StepChoice base) {
  for (const auto& it : sel.items) {
    if (it.setting) {
      base.setting(it.key) = it.value;
    } else {
      const Op op = *find_op(it.key);
      base.arms.set_index(op, *find_arm(op, it.value));
    }
  }
  return base;
}

ResolvedArms side_arms(const ResolvedArms& base, const Selection& sel, std::string_view option) {
  ResolvedArms r = base;
  r.warnings.clear();  // the base's, printed once
  for (const auto& it : sel.items) {
    if (it.setting) continue;
    const Op op = *find_op(it.key);
    r.arms.set_index(op, *find_arm(op, it.value));
    r.source[static_cast<size_t>(op)] = std::string(option);
  }
  return r;
}

std::string side_label(std::string_view side, const Selection& sel) {
  return sel.items.empty() ? fmt::format("side {} (the base)", side)
                           : fmt::format("side {} ({})", side, sel.describe());
}

std::vector<std::string> drill_conflicts(const Selection& a, const Selection& b, std::string_view base_arms_mode) {
  constexpr std::string_view why =
      "(the arms are timed on graphs of their own at capture, which the drill would fault)";
  std::vector<std::string> out;
  const std::pair<const Selection*, std::string_view> sides[] = {{&a, "--a"}, {&b, "--b"}};
  for (const auto& [sel, option] : sides) {
    std::string_view mode = base_arms_mode, source = "--arms tune";
    for (const auto& it : sel->items) {
      if (it.key == "arms") mode = it.value, source = {};
    }
    if (mode != "tune") continue;
    const std::string item =
        source.empty() ? fmt::format("{} arms=tune {}", option, why) : fmt::format("{} {}", source, why);
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

}  // namespace sg::cli
