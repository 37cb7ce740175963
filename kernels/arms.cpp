// arms.cpp: the arm name table, ArmSelection's text form, and resolve_arms(): --arm, then
// STEPGRAPH_ARMS, then the seed's VT_* flags (parsed exactly as the seed parses them), then the
// defaults.
#include "kernels/arms.h"

#include <fmt/format.h>

#include <algorithm>

namespace sg {
namespace {

constexpr std::array<std::string_view, 4> kConvFwdNames{"tiled", "register", "k4", "k4x2"};
constexpr std::array<std::string_view, 2> kConvChunksNames{"exact", "whole"};
constexpr std::array<std::string_view, 2> kConvUpdateNames{"grid", "fast"};
constexpr std::array<std::string_view, 4> kPostconvNames{"megablock", "fast", "split", "token_tile"};
constexpr std::array<std::string_view, 2> kGdnPrefillNames{"unfused", "fused"};
constexpr std::array<std::string_view, 4> kGdnDecodeNames{"unfused", "fused", "staged", "prep"};

static_assert(kConvFwdNames.size() == ArmTraits<ConvFwdArm>::count);
static_assert(kConvChunksNames.size() == ArmTraits<ConvChunksArm>::count);
static_assert(kConvUpdateNames.size() == ArmTraits<ConvUpdateArm>::count);
static_assert(kPostconvNames.size() == ArmTraits<PostconvArm>::count);
static_assert(kGdnPrefillNames.size() == ArmTraits<GdnPrefillArm>::count);
static_assert(kGdnDecodeNames.size() == ArmTraits<GdnDecodeArm>::count);
static_assert(static_cast<size_t>(ConvFwdArm::k4x2) == 3 && static_cast<size_t>(PostconvArm::token_tile) == 3);

// conv.chunks has no byte reference of its own in the seed; `whole` (the seed's split before
// PR #127) is the one the exact-chunk descriptors are checked against.
const std::array<OpInfo, kNumOps> kOps{{
    {Op::conv_fwd, "conv.fwd", kConvFwdNames, static_cast<size_t>(ConvFwdArm::tiled),
     static_cast<size_t>(ConvFwdArm::reg)},
    {Op::conv_chunks, "conv.chunks", kConvChunksNames, static_cast<size_t>(ConvChunksArm::whole),
     static_cast<size_t>(ConvChunksArm::exact)},
    {Op::conv_update, "conv.update", kConvUpdateNames, static_cast<size_t>(ConvUpdateArm::grid),
     static_cast<size_t>(ConvUpdateArm::fast)},
    {Op::postconv, "postconv", kPostconvNames, static_cast<size_t>(PostconvArm::megablock),
     static_cast<size_t>(PostconvArm::token_tile)},
    {Op::gdn_prefill, "gdn.prefill", kGdnPrefillNames, static_cast<size_t>(GdnPrefillArm::unfused),
     static_cast<size_t>(GdnPrefillArm::fused)},
    {Op::gdn_decode, "gdn.decode", kGdnDecodeNames, static_cast<size_t>(GdnDecodeArm::unfused),
     static_cast<size_t>(GdnDecodeArm::unfused)},
}};

// Seed flags, in ARMS.md's table order.
constexpr std::string_view kVtConvReg = "VT_CONV_REG";
constexpr std::string_view kVtConvExactChunks = "VT_CONV_EXACT_CHUNKS";
constexpr std::string_view kVtConvChannelTile = "VT_CONV_CHANNEL_TILE";
constexpr std::string_view kVtConvUpdateFast = "VT_CONV_UPDATE_FAST";
constexpr std::string_view kVtPostconvFast = "VT_GDN_POSTCONV_FAST";
constexpr std::string_view kVtPostconvSplit = "VT_GDN_POSTCONV_SPLIT";
constexpr std::string_view kVtPostconvTokenTile = "VT_GDN_POSTCONV_TOKEN_TILE";
constexpr std::array<std::string_view, 7> kSeedFlags{kVtConvReg,          kVtConvExactChunks, kVtConvChannelTile,
                                                     kVtConvUpdateFast,   kVtPostconvFast,    kVtPostconvSplit,
                                                     kVtPostconvTokenTile};

// A value in double quotes; quotes, backslashes, control bytes and non-ASCII bytes escaped (as
// engine/text.h's printable() does), so that a stray blank or newline in a flag is visible in the
// message and nothing reaches the terminal raw; values longer than 200 bytes are cut.
std::string quoted(std::string_view s) {
  constexpr size_t kShown = 200;
  std::string out = "\"";
  for (unsigned char ch : s.substr(0, kShown)) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      out += fmt::format("\\x{:02x}", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  out += "\"";
  if (s.size() > kShown) out += fmt::format(" (cut; {} bytes)", s.size());
  return out;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kBlank = " \t\r\n\f\v";
  const size_t b = s.find_first_not_of(kBlank);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kBlank);
  return s.substr(b, e - b + 1);
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

struct Item {
  Op op;
  size_t arm;
};

// "op=arm" -> (op, arm index). `where` names the source in messages.
Item parse_item(std::string_view raw, std::string_view where) {
  const size_t eq = raw.find('=');
  if (eq == std::string_view::npos) {
    throw ArmError(fmt::format("{} item {} is not op=arm; valid ops: {}", where, quoted(raw), valid_ops_list()));
  }
  const std::string_view op_text = trim(raw.substr(0, eq)), arm_text = trim(raw.substr(eq + 1));
  const auto op = find_op(op_text);
  if (!op) {
    throw ArmError(fmt::format("unknown op {} in {} item {}; valid ops: {}", quoted(op_text), where, quoted(raw),
                               valid_ops_list()));
  }
  const auto arm = find_arm(*op, arm_text);
  if (!arm) {
    throw ArmError(fmt::format("unknown arm {} for {} in {}; valid arms of {}: {}", quoted(arm_text), op_name(*op),
                               where, op_name(*op), valid_arms_list(*op)));
  }
  return {*op, *arm};
}

// Records one source's items, rejecting an op given twice within that source.
class ItemSet {
 public:
  explicit ItemSet(std::string_view where) : where_(where) {}
  void add(Item it) {
    auto& slot = arms_[static_cast<size_t>(it.op)];
    if (slot) {
      const auto names = op_info(it.op).arms;
      throw ArmError(fmt::format("{} given twice in {} ({} and {})", op_name(it.op), where_, quoted(names[*slot]),
                                 quoted(names[it.arm])));
    }
    slot = it.arm;
  }
  const std::optional<size_t>& operator[](size_t op) const { return arms_[op]; }

 private:
  std::string_view where_;
  std::array<std::optional<size_t>, kNumOps> arms_{};
};

// A comma-separated list ("" or blanks only = no items). Empty items are errors.
ItemSet parse_list(std::string_view text, std::string_view where) {
  ItemSet set(where);
  if (trim(text).empty()) return set;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view item = trim(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos));
    if (item.empty()) {
      throw ArmError(fmt::format("empty item in {} {}; expected op=arm[,op=arm...] with ops: {}", where, quoted(text),
                                 valid_ops_list()));
    }
    set.add(parse_item(item, where));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return set;
}

// --- seed flags -------------------------------------------------------------------------------

// The seed's on/off parsing: when set, off only when the first character is '0' (so "" is on);
// when unset, the flag's default.
bool seed_on(const std::optional<std::string>& v, bool unset_value) {
  if (!v) return unset_value;
  return v->empty() || (*v)[0] != '0';
}

bool canonical_bool(const std::string& v) { return v == "0" || v == "1"; }

// How a set flag appears in `source`: the raw value when canonical, quoted otherwise.
std::string flag_text(std::string_view name, const std::string& v, bool canonical) {
  return fmt::format("{}={}", name, canonical ? v : quoted(v));
}

struct BoolFlagMeaning {
  std::string_view name;
  std::string_view off, on;
};
constexpr std::array<BoolFlagMeaning, 6> kBoolMeanings{{
    {kVtConvReg, "off: conv.fwd=tiled", "on: conv.fwd=register, or the VT_CONV_CHANNEL_TILE arm"},
    {kVtConvExactChunks, "off: conv.chunks=whole", "on: conv.chunks=exact"},
    {kVtConvUpdateFast, "off: conv.update=grid", "on: conv.update=fast"},
    {kVtPostconvFast, "off: postconv=megablock unless split or token_tile is on",
     "on: postconv=fast unless split or token_tile is on"},
    {kVtPostconvSplit, "off", "on: postconv=split"},
    {kVtPostconvTokenTile, "off", "on: postconv=token_tile unless split is on"},
}};

std::string bool_warning(std::string_view name, const std::string& v, bool on) {
  const auto it = std::find_if(kBoolMeanings.begin(), kBoolMeanings.end(),
                               [&](const BoolFlagMeaning& m) { return m.name == name; });
  return fmt::format("{}={} is not 0 or 1: using {} ({})", name, quoted(v), on ? 1 : 0, on ? it->on : it->off);
}

struct SeedResult {
  ArmSelection arms;
  std::array<std::string, kNumOps> source;  // empty = no set flag decided this op
  std::vector<std::string> warnings;
};

SeedResult apply_seed_flags(const EnvLookup& env) {
  std::array<std::optional<std::string>, kSeedFlags.size()> val;
  for (size_t i = 0; i < kSeedFlags.size(); ++i) val[i] = env ? env(kSeedFlags[i]) : std::nullopt;
  auto get = [&](std::string_view name) -> const std::optional<std::string>& {
    return val[static_cast<size_t>(std::find(kSeedFlags.begin(), kSeedFlags.end(), name) - kSeedFlags.begin())];
  };

  SeedResult r;
  // One warning per set flag with a non-canonical value, in table order; independent of whether
  // a higher-precedence source or another flag makes it moot (the user should still fix it).
  for (std::string_view name : kSeedFlags) {
    const auto& v = get(name);
    if (!v) continue;
    if (name == kVtConvChannelTile) {
      if (*v != "0" && *v != "1" && *v != "2") {
        r.warnings.push_back(fmt::format("{}={} is not 0, 1 or 2: using arm 0 (register)", name, quoted(*v)));
      }
    } else if (!canonical_bool(*v)) {
      r.warnings.push_back(bool_warning(name, *v, seed_on(v, false)));
    }
  }

  // The set flags consulted to decide one op, in the order they were consulted.
  auto add_source = [&](Op op, std::string_view name) {
    const auto& v = get(name);
    if (!v) return;
    const bool canonical = name == kVtConvChannelTile ? (*v == "0" || *v == "1" || *v == "2") : canonical_bool(*v);
    auto& s = r.source[static_cast<size_t>(op)];
    if (!s.empty()) s += ", ";
    s += flag_text(name, *v, canonical);
  };

  // conv.fwd: register (with the channel-tile arm) > tiled. The channel tile is only consulted
  // when VT_CONV_REG is on; only the exact strings "1" and "2" pick an arm.
  add_source(Op::conv_fwd, kVtConvReg);
  if (!seed_on(get(kVtConvReg), true)) {
    r.arms.conv_fwd = ConvFwdArm::tiled;
  } else {
    const auto& ct = get(kVtConvChannelTile);
    r.arms.conv_fwd = ct == "1" ? ConvFwdArm::k4 : ct == "2" ? ConvFwdArm::k4x2 : ConvFwdArm::reg;
    add_source(Op::conv_fwd, kVtConvChannelTile);
  }

  add_source(Op::conv_chunks, kVtConvExactChunks);
  r.arms.conv_chunks = seed_on(get(kVtConvExactChunks), true) ? ConvChunksArm::exact : ConvChunksArm::whole;

  add_source(Op::conv_update, kVtConvUpdateFast);
  r.arms.conv_update = seed_on(get(kVtConvUpdateFast), true) ? ConvUpdateArm::fast : ConvUpdateArm::grid;

  // gdn.prefill: the seed had no fused prefill, so any set flag that chooses the prefill's conv or
  // post-conv kernel (all but VT_CONV_UPDATE_FAST, which is decode's) runs them: unfused.
  for (std::string_view name :
       {kVtConvReg, kVtConvExactChunks, kVtConvChannelTile, kVtPostconvFast, kVtPostconvSplit, kVtPostconvTokenTile}) {
    add_source(Op::gdn_prefill, name);
  }
  if (!r.source[static_cast<size_t>(Op::gdn_prefill)].empty()) r.arms.gdn_prefill = GdnPrefillArm::unfused;

  // postconv, when any of its flags is set (else the default, token_tile, which the seed did not
  // have): split > token_tile > fast > megablock, as the seed decides.
  if (!get(kVtPostconvSplit) && !get(kVtPostconvTokenTile) && !get(kVtPostconvFast)) return r;
  add_source(Op::postconv, kVtPostconvSplit);
  if (seed_on(get(kVtPostconvSplit), false)) {
    r.arms.postconv = PostconvArm::split;
  } else {
    add_source(Op::postconv, kVtPostconvTokenTile);
    if (seed_on(get(kVtPostconvTokenTile), false)) {
      r.arms.postconv = PostconvArm::token_tile;
    } else {
      add_source(Op::postconv, kVtPostconvFast);
      r.arms.postconv = seed_on(get(kVtPostconvFast), true) ? PostconvArm::fast : PostconvArm::megablock;
    }
  }
  return r;
}

}  // namespace

std::span<const OpInfo> all_ops() { return kOps; }

const OpInfo& op_info(Op op) {
  const auto i = static_cast<size_t>(op);
  if (i >= kNumOps) throw ArmError(fmt::format("op index {} out of range (0..{})", i, kNumOps - 1));
  return kOps[i];
}

std::string_view op_name(Op op) { return op_info(op).name; }

std::optional<Op> find_op(std::string_view name) {
  for (const auto& o : kOps) {
    if (o.name == name) return o.op;
  }
  return std::nullopt;
}

std::optional<size_t> find_arm(Op op, std::string_view name) {
  const auto arms = op_info(op).arms;
  for (size_t i = 0; i < arms.size(); ++i) {
    if (arms[i] == name) return i;
  }
  return std::nullopt;
}

std::string valid_ops_list() {
  std::array<std::string_view, kNumOps> names;
  for (size_t i = 0; i < kNumOps; ++i) names[i] = kOps[i].name;
  return join(names);
}

std::string valid_arms_list(Op op) { return join(op_info(op).arms); }

std::string format_arm_table() {
  size_t width = 0;
  for (const auto& o : kOps) width = std::max(width, o.name.size());
  std::string out;
  for (const auto& o : kOps) {
    out += fmt::format("{:<{}}  ", o.name, width);
    for (size_t i = 0; i < o.arms.size(); ++i) {
      if (i) out += ", ";
      out += o.arms[i];
      if (i == o.reference && i == o.default_arm) {
        out += " (reference, default)";
      } else if (i == o.reference) {
        out += " (reference)";
      } else if (i == o.default_arm) {
        out += " (default)";
      }
    }
    out += '\n';
  }
  return out;
}

size_t ArmSelection::index(Op op) const {
  switch (op) {
    case Op::conv_fwd: return static_cast<size_t>(conv_fwd);
    case Op::conv_chunks: return static_cast<size_t>(conv_chunks);
    case Op::conv_update: return static_cast<size_t>(conv_update);
    case Op::postconv: return static_cast<size_t>(postconv);
    case Op::gdn_prefill: return static_cast<size_t>(gdn_prefill);
    case Op::gdn_decode: return static_cast<size_t>(gdn_decode);
  }
  throw ArmError(fmt::format("op index {} out of range", static_cast<int>(op)));
}

void ArmSelection::set_index(Op op, size_t arm) {
  const auto& info = op_info(op);
  if (arm >= info.arms.size()) {
    throw ArmError(fmt::format("arm index {} out of range for {} (0..{}: {})", arm, info.name, info.arms.size() - 1,
                               valid_arms_list(op)));
  }
  switch (op) {
    case Op::conv_fwd: conv_fwd = static_cast<ConvFwdArm>(arm); break;
    case Op::conv_chunks: conv_chunks = static_cast<ConvChunksArm>(arm); break;
    case Op::conv_update: conv_update = static_cast<ConvUpdateArm>(arm); break;
    case Op::postconv: postconv = static_cast<PostconvArm>(arm); break;
    case Op::gdn_prefill: gdn_prefill = static_cast<GdnPrefillArm>(arm); break;
    case Op::gdn_decode: gdn_decode = static_cast<GdnDecodeArm>(arm); break;
  }
}

std::string ArmSelection::describe() const {
  std::string out;
  for (const auto& o : kOps) {
    if (!out.empty()) out += ',';
    out += o.name;
    out += '=';
    out += o.arms[index(o.op)];
  }
  return out;
}

ArmSelection ArmSelection::parse(std::string_view text) {
  const ItemSet items = parse_list(text, "arm selection");
  ArmSelection s;
  for (size_t i = 0; i < kNumOps; ++i) {
    if (items[i]) s.set_index(static_cast<Op>(i), *items[i]);
  }
  return s;
}

std::span<const std::string_view> seed_flag_names() { return kSeedFlags; }

ResolvedArms resolve_arms(const std::vector<std::string>& cli_arms, const EnvLookup& env) {
  // Parse every source first: a bad item is an error even where a higher source would win.
  ItemSet cli("--arm");
  for (const std::string& raw : cli_arms) {
    const std::string_view item = trim(raw);
    if (item.empty()) {
      throw ArmError(fmt::format("empty --arm value; expected op=arm with ops: {}", valid_ops_list()));
    }
    if (item.find(',') != std::string_view::npos) {
      throw ArmError(
          fmt::format("--arm takes one op=arm (got {}); repeat --arm, or list them in {}", quoted(raw), kArmsEnvVar));
    }
    cli.add(parse_item(item, "--arm"));
  }
  const std::optional<std::string> env_list = env ? env(kArmsEnvVar) : std::nullopt;
  const ItemSet from_env = env_list ? parse_list(*env_list, kArmsEnvVar) : ItemSet(kArmsEnvVar);

  SeedResult seed = apply_seed_flags(env);
  ResolvedArms r;
  r.arms = seed.arms;
  r.warnings = std::move(seed.warnings);
  for (size_t i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (cli[i]) {
      r.arms.set_index(op, *cli[i]);
      r.source[i] = "--arm";
    } else if (from_env[i]) {
      r.arms.set_index(op, *from_env[i]);
      r.source[i] = std::string(kArmsEnvVar);
    } else if (!seed.source[i].empty()) {
      r.source[i] = std::move(seed.source[i]);
    } else {
      r.source[i] = "default";
    }
  }
  return r;
}

}  // namespace sg
