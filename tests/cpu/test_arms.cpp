// CPU tests of kernels/arms.h: the name table, ArmSelection's text form, and resolve_arms() over
// every row of ARMS.md's seed-flag table, the precedence between sources, warnings and errors.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/arms.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

ResolvedArms resolve(const Env& env, const std::vector<std::string>& cli = {}) { return resolve_arms(cli, lookup(env)); }

const std::string& src(const ResolvedArms& r, Op op) { return r.source[static_cast<size_t>(op)]; }

// The message of the ArmError that f throws; fails the test if it throws nothing or anything else.
std::string arm_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ArmError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw something other than ArmError: " << e.what());
  } catch (...) {
    FAIL("threw a non-exception");
  }
  FAIL("did not throw");
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kValidOps = "conv.fwd, conv.chunks, conv.update, postconv, gdn.prefill, gdn.decode";
const std::string kDefaults =
    "conv.fwd=register,conv.chunks=exact,conv.update=fast,postconv=fast,gdn.prefill=unfused,gdn.decode=unfused";

}  // namespace

// --- the name table -------------------------------------------------------------------------------

TEST_CASE("arm table: ops, arm names both ways, reference and default", "[arms]") {
  REQUIRE(all_ops().size() == kNumOps);
  CHECK(valid_ops_list() == kValidOps);
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpInfo& o = all_ops()[i];
    CAPTURE(o.name);
    CHECK(static_cast<size_t>(o.op) == i);
    CHECK(find_op(o.name) == o.op);
    CHECK(op_name(o.op) == o.name);
    CHECK(&op_info(o.op) == &o);
    CHECK(o.reference < o.arms.size());
    CHECK(o.default_arm < o.arms.size());
    CHECK(ArmSelection{}.index(o.op) == o.default_arm);
    std::set<std::string_view> unique(o.arms.begin(), o.arms.end());
    CHECK(unique.size() == o.arms.size());
    for (size_t a = 0; a < o.arms.size(); ++a) CHECK(find_arm(o.op, o.arms[a]) == a);
  }
  CHECK(valid_arms_list(Op::conv_fwd) == "tiled, register, k4, k4x2");
  CHECK(valid_arms_list(Op::conv_chunks) == "exact, whole");
  CHECK(valid_arms_list(Op::conv_update) == "grid, fast");
  CHECK(valid_arms_list(Op::postconv) == "megablock, fast, split, token_tile");
  CHECK(valid_arms_list(Op::gdn_prefill) == "unfused, fused");
  CHECK(valid_arms_list(Op::gdn_decode) == "unfused, fused");

  CHECK(arm_name(ConvFwdArm::tiled) == "tiled");
  CHECK(arm_name(ConvFwdArm::reg) == "register");
  CHECK(arm_name(ConvFwdArm::k4) == "k4");
  CHECK(arm_name(ConvFwdArm::k4x2) == "k4x2");
  CHECK(arm_name(ConvChunksArm::exact) == "exact");
  CHECK(arm_name(ConvChunksArm::whole) == "whole");
  CHECK(arm_name(ConvUpdateArm::grid) == "grid");
  CHECK(arm_name(ConvUpdateArm::fast) == "fast");
  CHECK(arm_name(PostconvArm::megablock) == "megablock");
  CHECK(arm_name(PostconvArm::fast) == "fast");
  CHECK(arm_name(PostconvArm::split) == "split");
  CHECK(arm_name(PostconvArm::token_tile) == "token_tile");
  CHECK(arm_name(GdnPrefillArm::unfused) == "unfused");
  CHECK(arm_name(GdnPrefillArm::fused) == "fused");
  CHECK(arm_name(GdnDecodeArm::unfused) == "unfused");
  CHECK(arm_name(GdnDecodeArm::fused) == "fused");

  CHECK_THROWS_AS(arm_name(static_cast<ConvFwdArm>(4)), ArmError);
  CHECK_THROWS_AS(arm_name(static_cast<GdnDecodeArm>(2)), ArmError);
  CHECK_THROWS_AS(op_info(static_cast<Op>(kNumOps)), ArmError);
  CHECK(arm_from_name<ConvFwdArm>("register") == ConvFwdArm::reg);
  CHECK(arm_from_name<ConvFwdArm>("k4x2") == ConvFwdArm::k4x2);
  CHECK(arm_from_name<PostconvArm>("token_tile") == PostconvArm::token_tile);
  CHECK_FALSE(arm_from_name<ConvFwdArm>("reg").has_value());  // the enum's spelling is not a name
  CHECK_FALSE(arm_from_name<ConvFwdArm>("Register").has_value());
  CHECK_FALSE(arm_from_name<ConvUpdateArm>("").has_value());
  CHECK_FALSE(find_op("conv").has_value());
  CHECK_FALSE(find_op("conv_fwd").has_value());
  CHECK_FALSE(find_op("").has_value());

  // References: the seed's byte references; defaults: ARMS.md's shipped defaults.
  auto ref = [](Op op) { return op_info(op).arms[op_info(op).reference]; };
  auto def = [](Op op) { return op_info(op).arms[op_info(op).default_arm]; };
  CHECK(ref(Op::conv_fwd) == "tiled");
  CHECK(def(Op::conv_fwd) == "register");
  CHECK(ref(Op::conv_chunks) == "whole");
  CHECK(def(Op::conv_chunks) == "exact");
  CHECK(ref(Op::conv_update) == "grid");
  CHECK(def(Op::conv_update) == "fast");
  CHECK(ref(Op::postconv) == "megablock");
  CHECK(def(Op::postconv) == "fast");
  CHECK(ref(Op::gdn_prefill) == "unfused");
  CHECK(def(Op::gdn_prefill) == "unfused");
  CHECK(ref(Op::gdn_decode) == "unfused");
  CHECK(def(Op::gdn_decode) == "unfused");

  CHECK(format_arm_table() ==
        "conv.fwd     tiled (reference), register (default), k4, k4x2\n"
        "conv.chunks  exact (default), whole (reference)\n"
        "conv.update  grid (reference), fast (default)\n"
        "postconv     megablock (reference), fast (default), split, token_tile\n"
        "gdn.prefill  unfused (reference, default), fused\n"
        "gdn.decode   unfused (reference, default), fused\n");
}

// --- ArmSelection text form -----------------------------------------------------------------------

TEST_CASE("ArmSelection: defaults, describe, equality", "[arms]") {
  ArmSelection s;
  CHECK(s.conv_fwd == ConvFwdArm::reg);
  CHECK(s.conv_chunks == ConvChunksArm::exact);
  CHECK(s.conv_update == ConvUpdateArm::fast);
  CHECK(s.postconv == PostconvArm::fast);
  CHECK(s.gdn_prefill == GdnPrefillArm::unfused);
  CHECK(s.gdn_decode == GdnDecodeArm::unfused);
  CHECK(s.describe() == kDefaults);

  ArmSelection t;
  t.conv_fwd = ConvFwdArm::k4x2;
  t.postconv = PostconvArm::token_tile;
  t.gdn_decode = GdnDecodeArm::fused;
  CHECK_FALSE(s == t);
  CHECK(t.describe() ==
        "conv.fwd=k4x2,conv.chunks=exact,conv.update=fast,postconv=token_tile,gdn.prefill=unfused,gdn.decode=fused");
  // Each field takes part in ==.
  for (size_t i = 0; i < kNumOps; ++i) {
    ArmSelection u;
    u.set_index(static_cast<Op>(i), (u.index(static_cast<Op>(i)) + 1) % op_info(static_cast<Op>(i)).arms.size());
    CAPTURE(i);
    CHECK_FALSE(u == ArmSelection{});
  }
  CHECK_THROWS_AS(s.set_index(Op::conv_update, 2), ArmError);
  CHECK_THROWS_AS(s.set_index(Op::conv_fwd, 4), ArmError);
  CHECK(s == ArmSelection{});  // a failed set leaves it alone
}

TEST_CASE("ArmSelection: describe/parse round trip over every combination of arms", "[arms]") {
  std::set<std::string> seen;
  size_t combos = 0;
  for (size_t a = 0; a < 4; ++a)
    for (size_t b = 0; b < 2; ++b)
      for (size_t c = 0; c < 2; ++c)
        for (size_t d = 0; d < 4; ++d)
          for (size_t e = 0; e < 2; ++e)
            for (size_t f = 0; f < 2; ++f) {
              ArmSelection s;
              s.set_index(Op::conv_fwd, a);
              s.set_index(Op::conv_chunks, b);
              s.set_index(Op::conv_update, c);
              s.set_index(Op::postconv, d);
              s.set_index(Op::gdn_prefill, e);
              s.set_index(Op::gdn_decode, f);
              CHECK(s.index(Op::conv_fwd) == a);
              CHECK(s.index(Op::postconv) == d);
              const std::string text = s.describe();
              CAPTURE(text);
              CHECK(ArmSelection::parse(text) == s);
              CHECK(ArmSelection::parse(text).describe() == text);
              seen.insert(text);
              ++combos;
            }
  CHECK(combos == 256);
  CHECK(seen.size() == 256);  // describe() is injective: distinct selections, distinct graph keys
}

TEST_CASE("ArmSelection::parse: partial lists, blanks, any order", "[arms]") {
  CHECK(ArmSelection::parse("") == ArmSelection{});
  CHECK(ArmSelection::parse("   ") == ArmSelection{});
  ArmSelection want;
  want.postconv = PostconvArm::split;
  CHECK(ArmSelection::parse("postconv=split") == want);
  want.conv_fwd = ConvFwdArm::tiled;
  CHECK(ArmSelection::parse("postconv=split,conv.fwd=tiled") == want);
  CHECK(ArmSelection::parse(" postconv = split , conv.fwd=tiled ") == want);
  CHECK(ArmSelection::parse("conv.fwd=register").describe() == kDefaults);
}

TEST_CASE("ArmSelection::parse: errors name the problem and list the valid names", "[arms]") {
  std::string m = arm_error([] { ArmSelection::parse("conv.fw=k4"); });
  CHECK(contains(m, "unknown op \"conv.fw\""));
  CHECK(contains(m, "valid ops: " + kValidOps));

  m = arm_error([] { ArmSelection::parse("conv.fwd=k5"); });
  CHECK(contains(m, "unknown arm \"k5\" for conv.fwd"));
  CHECK(contains(m, "valid arms of conv.fwd: tiled, register, k4, k4x2"));

  m = arm_error([] { ArmSelection::parse("postconv=reg"); });
  CHECK(contains(m, "valid arms of postconv: megablock, fast, split, token_tile"));

  m = arm_error([] { ArmSelection::parse("conv.fwd"); });
  CHECK(contains(m, "\"conv.fwd\" is not op=arm"));
  CHECK(contains(m, kValidOps));

  for (const char* bad : {",", "conv.fwd=k4,", ",conv.fwd=k4", "conv.fwd=k4,,postconv=fast", "conv.fwd=k4, ,postconv=fast"}) {
    CAPTURE(bad);
    m = arm_error([&] { ArmSelection::parse(bad); });
    CHECK(contains(m, "empty item"));
  }
  m = arm_error([] { ArmSelection::parse("=k4"); });
  CHECK(contains(m, "unknown op \"\""));
  m = arm_error([] { ArmSelection::parse("conv.update="); });
  CHECK(contains(m, "unknown arm \"\" for conv.update"));
  CHECK(contains(m, "grid, fast"));

  m = arm_error([] { ArmSelection::parse("conv.fwd=k4,postconv=fast,conv.fwd=tiled"); });
  CHECK(contains(m, "conv.fwd given twice in arm selection"));
  CHECK(contains(m, "\"k4\" and \"tiled\""));
  m = arm_error([] { ArmSelection::parse("conv.fwd=k4,conv.fwd=k4"); });  // even when they agree
  CHECK(contains(m, "conv.fwd given twice"));
}

// --- resolution: the seed flags -------------------------------------------------------------------

TEST_CASE("resolve_arms: nothing set gives the defaults, all from 'default', no warnings", "[arms]") {
  for (const ResolvedArms& r : {resolve({}), resolve_arms({}, EnvLookup{})}) {
    CHECK(r.arms == ArmSelection{});
    CHECK(r.warnings.empty());
    for (size_t i = 0; i < kNumOps; ++i) CHECK(r.source[i] == "default");
  }
  // Unrelated variables change nothing.
  const ResolvedArms r = resolve({{"VT_OTHER", "0"}, {"VT_CONV", "0"}, {"vt_conv_reg", "0"}});
  CHECK(r.arms == ArmSelection{});
  CHECK(r.warnings.empty());
}

TEST_CASE("resolve_arms: reads only STEPGRAPH_ARMS and the seed flags, once each", "[arms]") {
  std::map<std::string, int> asked;
  EnvLookup env = [&](std::string_view name) -> std::optional<std::string> {
    ++asked[std::string(name)];
    return std::nullopt;
  };
  resolve_arms({}, env);
  std::set<std::string> want{"STEPGRAPH_ARMS"};
  for (std::string_view n : seed_flag_names()) want.insert(std::string(n));
  CHECK(want.size() == 8);
  std::set<std::string> got;
  for (const auto& [name, count] : asked) {
    CAPTURE(name);
    CHECK(count == 1);
    got.insert(name);
  }
  CHECK(got == want);
  const std::vector<std::string_view> table_order{"VT_CONV_REG",          "VT_CONV_EXACT_CHUNKS",
                                                  "VT_CONV_CHANNEL_TILE", "VT_CONV_UPDATE_FAST",
                                                  "VT_GDN_POSTCONV_FAST", "VT_GDN_POSTCONV_SPLIT",
                                                  "VT_GDN_POSTCONV_TOKEN_TILE"};
  const std::vector<std::string_view> names(seed_flag_names().begin(), seed_flag_names().end());
  CHECK(names == table_order);
}

namespace {

// One row of a seed-flag table: the value (nullopt = unset), the arm it gives, the warning
// expected (empty = none) and the source.
struct FlagRow {
  std::optional<std::string> value;
  size_t arm;
  std::string warning;
  std::string source;
};

void check_flag_rows(const std::string& flag, Op op, const std::vector<FlagRow>& rows) {
  for (const FlagRow& row : rows) {
    Env env;
    if (row.value) env[flag] = *row.value;
    CAPTURE(flag, row.value.value_or("<unset>"));
    const ResolvedArms r = resolve(env);
    CHECK(op_info(op).arms[r.arms.index(op)] == op_info(op).arms[row.arm]);
    CHECK(src(r, op) == row.source);
    if (row.warning.empty()) {
      CHECK(r.warnings.empty());
    } else {
      REQUIRE(r.warnings.size() == 1);
      CHECK(r.warnings[0] == row.warning);
    }
    // The other ops are untouched.
    for (size_t i = 0; i < kNumOps; ++i) {
      if (static_cast<Op>(i) == op) continue;
      CHECK(r.arms.index(static_cast<Op>(i)) == ArmSelection{}.index(static_cast<Op>(i)));
      CHECK(r.source[i] == "default");
    }
  }
}

constexpr size_t kTiled = 0, kReg = 1, kK4 = 2, kK4x2 = 3;

}  // namespace

TEST_CASE("seed flag VT_CONV_REG: off only when set and starting with '0'", "[arms]") {
  const std::string on = "(on: conv.fwd=register, or the VT_CONV_CHANNEL_TILE arm)";
  const std::string off = "(off: conv.fwd=tiled)";
  check_flag_rows("VT_CONV_REG", Op::conv_fwd,
                  {
                      {std::nullopt, kReg, "", "default"},
                      {"1", kReg, "", "VT_CONV_REG=1"},
                      {"0", kTiled, "", "VT_CONV_REG=0"},
                      {"", kReg, "VT_CONV_REG=\"\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\"\""},
                      {"00", kTiled, "VT_CONV_REG=\"00\" is not 0 or 1: using 0 " + off, "VT_CONV_REG=\"00\""},
                      {"0abc", kTiled, "VT_CONV_REG=\"0abc\" is not 0 or 1: using 0 " + off, "VT_CONV_REG=\"0abc\""},
                      {"10", kReg, "VT_CONV_REG=\"10\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\"10\""},
                      {"off", kReg, "VT_CONV_REG=\"off\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\"off\""},
                      {"false", kReg, "VT_CONV_REG=\"false\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\"false\""},
                      {" 0", kReg, "VT_CONV_REG=\" 0\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\" 0\""},
                      {"0 ", kTiled, "VT_CONV_REG=\"0 \" is not 0 or 1: using 0 " + off, "VT_CONV_REG=\"0 \""},
                      {"2", kReg, "VT_CONV_REG=\"2\" is not 0 or 1: using 1 " + on, "VT_CONV_REG=\"2\""},
                  });
}

TEST_CASE("seed flag VT_CONV_EXACT_CHUNKS: off only when set and starting with '0'", "[arms]") {
  const std::string on = "(on: conv.chunks=exact)", off = "(off: conv.chunks=whole)";
  const size_t exact = 0, whole = 1;
  check_flag_rows("VT_CONV_EXACT_CHUNKS", Op::conv_chunks,
                  {
                      {std::nullopt, exact, "", "default"},
                      {"1", exact, "", "VT_CONV_EXACT_CHUNKS=1"},
                      {"0", whole, "", "VT_CONV_EXACT_CHUNKS=0"},
                      {"", exact, "VT_CONV_EXACT_CHUNKS=\"\" is not 0 or 1: using 1 " + on, "VT_CONV_EXACT_CHUNKS=\"\""},
                      {"00", whole, "VT_CONV_EXACT_CHUNKS=\"00\" is not 0 or 1: using 0 " + off,
                       "VT_CONV_EXACT_CHUNKS=\"00\""},
                      {"no", exact, "VT_CONV_EXACT_CHUNKS=\"no\" is not 0 or 1: using 1 " + on,
                       "VT_CONV_EXACT_CHUNKS=\"no\""},
                      {"0\n", whole, "VT_CONV_EXACT_CHUNKS=\"0\\x0a\" is not 0 or 1: using 0 " + off,
                       "VT_CONV_EXACT_CHUNKS=\"0\\x0a\""},
                  });
}

TEST_CASE("seed flag VT_CONV_CHANNEL_TILE: only the exact strings 1 and 2 pick an arm", "[arms]") {
  auto warn = [](const std::string& quoted_value) {
    return "VT_CONV_CHANNEL_TILE=" + quoted_value + " is not 0, 1 or 2: using arm 0 (register)";
  };
  check_flag_rows("VT_CONV_CHANNEL_TILE", Op::conv_fwd,
                  {
                      {std::nullopt, kReg, "", "default"},
                      {"0", kReg, "", "VT_CONV_CHANNEL_TILE=0"},
                      {"1", kK4, "", "VT_CONV_CHANNEL_TILE=1"},
                      {"2", kK4x2, "", "VT_CONV_CHANNEL_TILE=2"},
                      // Every spelling ARMS.md lists as arm 0, each with its one warning.
                      {"", kReg, warn("\"\""), "VT_CONV_CHANNEL_TILE=\"\""},
                      {"00", kReg, warn("\"00\""), "VT_CONV_CHANNEL_TILE=\"00\""},
                      {"10", kReg, warn("\"10\""), "VT_CONV_CHANNEL_TILE=\"10\""},
                      {"2garbage", kReg, warn("\"2garbage\""), "VT_CONV_CHANNEL_TILE=\"2garbage\""},
                      {"3", kReg, warn("\"3\""), "VT_CONV_CHANNEL_TILE=\"3\""},
                      {"on", kReg, warn("\"on\""), "VT_CONV_CHANNEL_TILE=\"on\""},
                      {" 2", kReg, warn("\" 2\""), "VT_CONV_CHANNEL_TILE=\" 2\""},
                      // More near misses.
                      {"1 ", kReg, warn("\"1 \""), "VT_CONV_CHANNEL_TILE=\"1 \""},
                      {"01", kReg, warn("\"01\""), "VT_CONV_CHANNEL_TILE=\"01\""},
                      {"-1", kReg, warn("\"-1\""), "VT_CONV_CHANNEL_TILE=\"-1\""},
                      {"k4", kReg, warn("\"k4\""), "VT_CONV_CHANNEL_TILE=\"k4\""},
                  });
  // The brief's exact text.
  CHECK(resolve({{"VT_CONV_CHANNEL_TILE", "3"}}).warnings ==
        std::vector<std::string>{"VT_CONV_CHANNEL_TILE=\"3\" is not 0, 1 or 2: using arm 0 (register)"});
}

TEST_CASE("seed flags VT_CONV_REG x VT_CONV_CHANNEL_TILE: the channel tile applies only when REG is on", "[arms]") {
  const std::vector<std::optional<std::string>> regs{std::nullopt, "1", "0", "", "00", "x"};
  const std::vector<std::optional<std::string>> tiles{std::nullopt, "0", "1", "2", "", "3", " 2", "2garbage"};
  for (const auto& reg : regs) {
    for (const auto& tile : tiles) {
      Env env;
      if (reg) env["VT_CONV_REG"] = *reg;
      if (tile) env["VT_CONV_CHANNEL_TILE"] = *tile;
      CAPTURE(reg.value_or("<unset>"), tile.value_or("<unset>"));
      const ResolvedArms r = resolve(env);
      const bool reg_on = !reg || reg->empty() || (*reg)[0] != '0';
      ConvFwdArm want = ConvFwdArm::tiled;
      if (reg_on) want = tile == "1" ? ConvFwdArm::k4 : tile == "2" ? ConvFwdArm::k4x2 : ConvFwdArm::reg;
      CHECK(arm_name(r.arms.conv_fwd) == arm_name(want));
      const bool reg_warns = reg && *reg != "0" && *reg != "1";
      const bool tile_warns = tile && *tile != "0" && *tile != "1" && *tile != "2";
      CHECK(r.warnings.size() == size_t(reg_warns) + size_t(tile_warns));
      // Source: the set flags consulted. The tile is not consulted when REG is off.
      const std::string s = src(r, Op::conv_fwd);
      CHECK(contains(s, "VT_CONV_REG") == reg.has_value());
      CHECK(contains(s, "VT_CONV_CHANNEL_TILE") == (reg_on && tile.has_value()));
      if (!reg && !tile) CHECK(s == "default");
    }
  }
  CHECK(src(resolve({{"VT_CONV_REG", "1"}, {"VT_CONV_CHANNEL_TILE", "2"}}), Op::conv_fwd) ==
        "VT_CONV_REG=1, VT_CONV_CHANNEL_TILE=2");
  CHECK(src(resolve({{"VT_CONV_REG", "0"}, {"VT_CONV_CHANNEL_TILE", "2"}}), Op::conv_fwd) == "VT_CONV_REG=0");
}

TEST_CASE("seed flag VT_CONV_UPDATE_FAST: off only when starting with '0'", "[arms]") {
  const std::string on = "(on: conv.update=fast)", off = "(off: conv.update=grid)";
  const size_t grid = 0, fast = 1;
  check_flag_rows("VT_CONV_UPDATE_FAST", Op::conv_update,
                  {
                      {std::nullopt, fast, "", "default"},
                      {"1", fast, "", "VT_CONV_UPDATE_FAST=1"},
                      {"0", grid, "", "VT_CONV_UPDATE_FAST=0"},
                      {"", fast, "VT_CONV_UPDATE_FAST=\"\" is not 0 or 1: using 1 " + on, "VT_CONV_UPDATE_FAST=\"\""},
                      {"0.5", grid, "VT_CONV_UPDATE_FAST=\"0.5\" is not 0 or 1: using 0 " + off,
                       "VT_CONV_UPDATE_FAST=\"0.5\""},
                      {"true", fast, "VT_CONV_UPDATE_FAST=\"true\" is not 0 or 1: using 1 " + on,
                       "VT_CONV_UPDATE_FAST=\"true\""},
                  });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_FAST: off (megablock) only when starting with '0'", "[arms]") {
  const std::string on = "(on: postconv=fast unless split or token_tile is on)";
  const std::string off = "(off: postconv=megablock unless split or token_tile is on)";
  const size_t megablock = 0, fast = 1;
  check_flag_rows("VT_GDN_POSTCONV_FAST", Op::postconv,
                  {
                      {std::nullopt, fast, "", "default"},
                      {"1", fast, "", "VT_GDN_POSTCONV_FAST=1"},
                      {"0", megablock, "", "VT_GDN_POSTCONV_FAST=0"},
                      {"", fast, "VT_GDN_POSTCONV_FAST=\"\" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_FAST=\"\""},
                      {"000", megablock, "VT_GDN_POSTCONV_FAST=\"000\" is not 0 or 1: using 0 " + off,
                       "VT_GDN_POSTCONV_FAST=\"000\""},
                      {"yes", fast, "VT_GDN_POSTCONV_FAST=\"yes\" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_FAST=\"yes\""},
                  });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_SPLIT: on when set and not starting with '0' (\"\" is on)", "[arms]") {
  const std::string on = "(on: postconv=split)", off = "(off)";
  const size_t fast = 1, split = 2;
  check_flag_rows("VT_GDN_POSTCONV_SPLIT", Op::postconv,
                  {
                      {std::nullopt, fast, "", "default"},
                      {"0", fast, "", "VT_GDN_POSTCONV_SPLIT=0"},
                      {"1", split, "", "VT_GDN_POSTCONV_SPLIT=1"},
                      {"", split, "VT_GDN_POSTCONV_SPLIT=\"\" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_SPLIT=\"\""},
                      {"00", fast, "VT_GDN_POSTCONV_SPLIT=\"00\" is not 0 or 1: using 0 " + off,
                       "VT_GDN_POSTCONV_SPLIT=\"00\""},
                      {"off", split, "VT_GDN_POSTCONV_SPLIT=\"off\" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_SPLIT=\"off\""},
                      {" ", split, "VT_GDN_POSTCONV_SPLIT=\" \" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_SPLIT=\" \""},
                  });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_TOKEN_TILE: on when set and not starting with '0'", "[arms]") {
  const std::string on = "(on: postconv=token_tile unless split is on)", off = "(off)";
  const size_t fast = 1, token_tile = 3;
  check_flag_rows("VT_GDN_POSTCONV_TOKEN_TILE", Op::postconv,
                  {
                      {std::nullopt, fast, "", "default"},
                      {"0", fast, "", "VT_GDN_POSTCONV_TOKEN_TILE=0"},
                      {"1", token_tile, "", "VT_GDN_POSTCONV_TOKEN_TILE=1"},
                      {"", token_tile, "VT_GDN_POSTCONV_TOKEN_TILE=\"\" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_TOKEN_TILE=\"\""},
                      {"0x1", fast, "VT_GDN_POSTCONV_TOKEN_TILE=\"0x1\" is not 0 or 1: using 0 " + off,
                       "VT_GDN_POSTCONV_TOKEN_TILE=\"0x1\""},
                      {"16", token_tile, "VT_GDN_POSTCONV_TOKEN_TILE=\"16\" is not 0 or 1: using 1 " + on,
                       "VT_GDN_POSTCONV_TOKEN_TILE=\"16\""},
                  });
}

TEST_CASE("seed flags: post-conv precedence split > token_tile > fast > megablock", "[arms]") {
  // Hand-written rows first.
  struct Row {
    std::optional<std::string> fast, split, tile;
    PostconvArm want;
    std::string source;
  };
  const std::vector<Row> rows{
      {std::nullopt, std::nullopt, std::nullopt, PostconvArm::fast, "default"},
      {"0", std::nullopt, std::nullopt, PostconvArm::megablock, "VT_GDN_POSTCONV_FAST=0"},
      {"0", "1", "1", PostconvArm::split, "VT_GDN_POSTCONV_SPLIT=1"},
      {"1", "1", std::nullopt, PostconvArm::split, "VT_GDN_POSTCONV_SPLIT=1"},
      {"0", "0", "1", PostconvArm::token_tile, "VT_GDN_POSTCONV_SPLIT=0, VT_GDN_POSTCONV_TOKEN_TILE=1"},
      {"0", std::nullopt, "1", PostconvArm::token_tile, "VT_GDN_POSTCONV_TOKEN_TILE=1"},
      {"0", "0", "0", PostconvArm::megablock,
       "VT_GDN_POSTCONV_SPLIT=0, VT_GDN_POSTCONV_TOKEN_TILE=0, VT_GDN_POSTCONV_FAST=0"},
      {"1", "0", "0", PostconvArm::fast,
       "VT_GDN_POSTCONV_SPLIT=0, VT_GDN_POSTCONV_TOKEN_TILE=0, VT_GDN_POSTCONV_FAST=1"},
      {std::nullopt, "", "1", PostconvArm::split, "VT_GDN_POSTCONV_SPLIT=\"\""},
      {"0", "00", "", PostconvArm::token_tile, "VT_GDN_POSTCONV_SPLIT=\"00\", VT_GDN_POSTCONV_TOKEN_TILE=\"\""},
  };
  for (const Row& row : rows) {
    Env env;
    if (row.fast) env["VT_GDN_POSTCONV_FAST"] = *row.fast;
    if (row.split) env["VT_GDN_POSTCONV_SPLIT"] = *row.split;
    if (row.tile) env["VT_GDN_POSTCONV_TOKEN_TILE"] = *row.tile;
    CAPTURE(row.fast.value_or("<unset>"), row.split.value_or("<unset>"), row.tile.value_or("<unset>"));
    const ResolvedArms r = resolve(env);
    CHECK(arm_name(r.arms.postconv) == arm_name(row.want));
    CHECK(src(r, Op::postconv) == row.source);
  }
  // Then every combination of {unset, "0", "1", "", "0x"} for the three flags.
  const std::vector<std::optional<std::string>> vals{std::nullopt, "0", "1", "", "0x"};
  auto on = [](const std::optional<std::string>& v, bool unset) { return v ? (v->empty() || (*v)[0] != '0') : unset; };
  for (const auto& f : vals)
    for (const auto& s : vals)
      for (const auto& t : vals) {
        Env env;
        if (f) env["VT_GDN_POSTCONV_FAST"] = *f;
        if (s) env["VT_GDN_POSTCONV_SPLIT"] = *s;
        if (t) env["VT_GDN_POSTCONV_TOKEN_TILE"] = *t;
        CAPTURE(f.value_or("<unset>"), s.value_or("<unset>"), t.value_or("<unset>"));
        const ResolvedArms r = resolve(env);
        const PostconvArm want = on(s, false)   ? PostconvArm::split
                                 : on(t, false) ? PostconvArm::token_tile
                                 : on(f, true)  ? PostconvArm::fast
                                                : PostconvArm::megablock;
        CHECK(arm_name(r.arms.postconv) == arm_name(want));
        const size_t warnings = size_t(f && *f != "0" && *f != "1") + size_t(s && *s != "0" && *s != "1") +
                                size_t(t && *t != "0" && *t != "1");
        CHECK(r.warnings.size() == warnings);
      }
}

TEST_CASE("seed flag warnings: exactly one per non-canonical value, in table order", "[arms]") {
  SECTION("all canonical: none") {
    for (const char* v : {"0", "1"}) {
      Env env;
      for (std::string_view n : seed_flag_names()) env[std::string(n)] = v;
      CHECK(resolve(env).warnings.empty());
    }
    CHECK(resolve({{"VT_CONV_CHANNEL_TILE", "2"}}).warnings.empty());
  }
  SECTION("all non-canonical: seven, one per flag, in table order") {
    Env env;
    for (std::string_view n : seed_flag_names()) env[std::string(n)] = "yes";
    const ResolvedArms r = resolve(env);
    REQUIRE(r.warnings.size() == 7);
    for (size_t i = 0; i < 7; ++i) {
      CAPTURE(i, r.warnings[i]);
      CHECK(r.warnings[i].rfind(std::string(seed_flag_names()[i]) + "=\"yes\" is not ", 0) == 0);
    }
    // "yes" is on for every on/off flag: split wins the post-conv.
    CHECK(r.arms.postconv == PostconvArm::split);
    CHECK(r.arms.conv_fwd == ConvFwdArm::reg);
  }
  SECTION("a warning is given even when a higher source overrides the op") {
    const ResolvedArms r = resolve({{"VT_CONV_CHANNEL_TILE", "on"}, {"STEPGRAPH_ARMS", "conv.fwd=k4"}});
    CHECK(r.arms.conv_fwd == ConvFwdArm::k4);
    CHECK(r.warnings.size() == 1);
    const ResolvedArms r2 = resolve({{"VT_CONV_REG", "0"}, {"VT_CONV_CHANNEL_TILE", "3"}});
    CHECK(r2.arms.conv_fwd == ConvFwdArm::tiled);
    CHECK(r2.warnings.size() == 1);  // the tile value is still unrecognised
  }
  SECTION("quotes and backslashes are escaped") {
    const ResolvedArms r = resolve({{"VT_CONV_REG", "a\"b\\c"}});
    REQUIRE(r.warnings.size() == 1);
    CHECK(r.warnings[0] == "VT_CONV_REG=\"a\\\"b\\\\c\" is not 0 or 1: using 1 (on: conv.fwd=register, or the "
                           "VT_CONV_CHANNEL_TILE arm)");
  }
}

// --- resolution: precedence and errors ------------------------------------------------------------

TEST_CASE("resolve_arms precedence: --arm > STEPGRAPH_ARMS > seed flags > defaults", "[arms]") {
  SECTION("each op from a different source") {
    const Env env{{"VT_CONV_REG", "0"},
                  {"VT_CONV_UPDATE_FAST", "0"},
                  {"VT_GDN_POSTCONV_SPLIT", "1"},
                  {"VT_CONV_EXACT_CHUNKS", "0"},
                  {"STEPGRAPH_ARMS", "conv.fwd=k4,conv.update=fast,gdn.decode=fused"}};
    const ResolvedArms r = resolve(env, {"conv.fwd=k4x2", "gdn.prefill=fused"});
    CHECK(r.arms.conv_fwd == ConvFwdArm::k4x2);  // --arm over STEPGRAPH_ARMS over VT_CONV_REG
    CHECK(src(r, Op::conv_fwd) == "--arm");
    CHECK(r.arms.conv_update == ConvUpdateArm::fast);  // STEPGRAPH_ARMS over the seed flag
    CHECK(src(r, Op::conv_update) == "STEPGRAPH_ARMS");
    CHECK(r.arms.postconv == PostconvArm::split);  // seed flag over the default
    CHECK(src(r, Op::postconv) == "VT_GDN_POSTCONV_SPLIT=1");
    CHECK(r.arms.conv_chunks == ConvChunksArm::whole);
    CHECK(src(r, Op::conv_chunks) == "VT_CONV_EXACT_CHUNKS=0");
    CHECK(r.arms.gdn_prefill == GdnPrefillArm::fused);
    CHECK(src(r, Op::gdn_prefill) == "--arm");
    CHECK(r.arms.gdn_decode == GdnDecodeArm::fused);
    CHECK(src(r, Op::gdn_decode) == "STEPGRAPH_ARMS");
    CHECK(r.warnings.empty());
    CHECK(r.arms.describe() ==
          "conv.fwd=k4x2,conv.chunks=whole,conv.update=fast,postconv=split,gdn.prefill=fused,gdn.decode=fused");
  }
  SECTION("--arm may name the default arm and still wins") {
    const ResolvedArms r = resolve({{"VT_CONV_REG", "0"}, {"STEPGRAPH_ARMS", "conv.fwd=tiled"}}, {"conv.fwd=register"});
    CHECK(r.arms.conv_fwd == ConvFwdArm::reg);
    CHECK(src(r, Op::conv_fwd) == "--arm");
  }
  SECTION("STEPGRAPH_ARMS over the seed flags, op by op") {
    const ResolvedArms r =
        resolve({{"VT_GDN_POSTCONV_SPLIT", "1"}, {"VT_CONV_CHANNEL_TILE", "1"}, {"STEPGRAPH_ARMS", "postconv=megablock"}});
    CHECK(r.arms.postconv == PostconvArm::megablock);
    CHECK(src(r, Op::postconv) == "STEPGRAPH_ARMS");
    CHECK(r.arms.conv_fwd == ConvFwdArm::k4);
    CHECK(src(r, Op::conv_fwd) == "VT_CONV_CHANNEL_TILE=1");
  }
  SECTION("every op and arm through each of the two list sources") {
    for (const OpInfo& o : all_ops()) {
      for (size_t a = 0; a < o.arms.size(); ++a) {
        const std::string item = std::string(o.name) + "=" + std::string(o.arms[a]);
        CAPTURE(item);
        const ResolvedArms by_cli = resolve({}, {item});
        CHECK(by_cli.arms.index(o.op) == a);
        CHECK(src(by_cli, o.op) == "--arm");
        const ResolvedArms by_env = resolve({{"STEPGRAPH_ARMS", item}});
        CHECK(by_env.arms.index(o.op) == a);
        CHECK(src(by_env, o.op) == "STEPGRAPH_ARMS");
        // The other ops keep their defaults.
        ArmSelection want;
        want.set_index(o.op, a);
        CHECK(by_cli.arms == want);
        CHECK(by_env.arms == want);
      }
    }
  }
  SECTION("STEPGRAPH_ARMS empty or blank means no overrides; a full describe() string is accepted") {
    CHECK(resolve({{"STEPGRAPH_ARMS", ""}}).arms == ArmSelection{});
    CHECK(resolve({{"STEPGRAPH_ARMS", " "}}).arms == ArmSelection{});
    CHECK(src(resolve({{"STEPGRAPH_ARMS", ""}}), Op::conv_fwd) == "default");
    ArmSelection s;
    s.conv_chunks = ConvChunksArm::whole;
    s.postconv = PostconvArm::megablock;
    const ResolvedArms r = resolve({{"STEPGRAPH_ARMS", s.describe()}});
    CHECK(r.arms == s);
    for (size_t i = 0; i < kNumOps; ++i) CHECK(r.source[i] == "STEPGRAPH_ARMS");
  }
  SECTION("the same op in --arm and STEPGRAPH_ARMS is not a duplicate") {
    CHECK(resolve({{"STEPGRAPH_ARMS", "postconv=split"}}, {"postconv=megablock"}).arms.postconv ==
          PostconvArm::megablock);
  }
}

TEST_CASE("resolve_arms errors: unknown names, malformed items, duplicates", "[arms]") {
  std::string m;
  m = arm_error([] { resolve({}, {"conv.fwdd=k4"}); });
  CHECK(contains(m, "unknown op \"conv.fwdd\" in --arm"));
  CHECK(contains(m, "valid ops: " + kValidOps));

  m = arm_error([] { resolve({}, {"conv.fwd=k8"}); });
  CHECK(contains(m, "unknown arm \"k8\" for conv.fwd in --arm"));
  CHECK(contains(m, "valid arms of conv.fwd: tiled, register, k4, k4x2"));

  m = arm_error([] { resolve({{"STEPGRAPH_ARMS", "postconv=fastest"}}); });
  CHECK(contains(m, "unknown arm \"fastest\" for postconv in STEPGRAPH_ARMS"));
  CHECK(contains(m, "megablock, fast, split, token_tile"));

  m = arm_error([] { resolve({{"STEPGRAPH_ARMS", "gdn=fused"}}); });
  CHECK(contains(m, "unknown op \"gdn\" in STEPGRAPH_ARMS"));
  CHECK(contains(m, kValidOps));

  m = arm_error([] { resolve({}, {"conv.fwd"}); });
  CHECK(contains(m, "--arm item \"conv.fwd\" is not op=arm"));
  CHECK(contains(m, kValidOps));
  m = arm_error([] { resolve({{"STEPGRAPH_ARMS", "conv.fwd:k4"}}); });
  CHECK(contains(m, "STEPGRAPH_ARMS item \"conv.fwd:k4\" is not op=arm"));

  m = arm_error([] { resolve({}, {""}); });
  CHECK(contains(m, "empty --arm value"));
  m = arm_error([] { resolve({}, {"  "}); });
  CHECK(contains(m, "empty --arm value"));
  for (const char* bad : {",", "conv.fwd=k4,", ",conv.fwd=k4", "conv.fwd=k4,,postconv=split"}) {
    CAPTURE(bad);
    m = arm_error([&] { resolve({{"STEPGRAPH_ARMS", bad}}); });
    CHECK(contains(m, "empty item in STEPGRAPH_ARMS"));
  }
  m = arm_error([] { resolve({}, {"conv.fwd=k4,postconv=split"}); });
  CHECK(contains(m, "--arm takes one op=arm"));

  m = arm_error([] { resolve({}, {"conv.fwd=k4", "postconv=split", "conv.fwd=tiled"}); });
  CHECK(contains(m, "conv.fwd given twice in --arm"));
  m = arm_error([] { resolve({{"STEPGRAPH_ARMS", "postconv=split,postconv=split"}}); });
  CHECK(contains(m, "postconv given twice in STEPGRAPH_ARMS"));

  // A bad STEPGRAPH_ARMS is an error even when --arm overrides that op.
  m = arm_error([] { resolve({{"STEPGRAPH_ARMS", "conv.fwd=bogus"}}, {"conv.fwd=k4"}); });
  CHECK(contains(m, "unknown arm \"bogus\""));
  // Names are case-sensitive; the enum spelling "reg" is not the arm name.
  CHECK_THROWS_AS(resolve({}, {"conv.fwd=Register"}), ArmError);
  CHECK_THROWS_AS(resolve({}, {"conv.fwd=reg"}), ArmError);
  CHECK_THROWS_AS(resolve({}, {"CONV.FWD=k4"}), ArmError);
  // ArmError is a std::runtime_error.
  CHECK_THROWS_AS(resolve({}, {"x=y"}), std::runtime_error);
  // Blanks around names are fine.
  CHECK(resolve({}, {" conv.fwd = k4 "}).arms.conv_fwd == ConvFwdArm::k4);
}
