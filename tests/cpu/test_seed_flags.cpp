// CPU tests of kernels/arms.h, part 2: resolve_arms() over every row of ARMS.md's seed-flag table
// (VT_CONV_REG, VT_CONV_EXACT_CHUNKS, VT_CONV_CHANNEL_TILE, VT_CONV_UPDATE_FAST and the three
// VT_GDN_POSTCONV_* flags), their interactions, and the warnings for non-canonical values. The name
// table, ArmSelection and the precedence between sources: test_arms.cpp.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"
#include "tests/support/catch.h"
#include "tests/support/env_map.h"

using namespace sg;
using namespace sg::test;

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
  const std::vector<std::string_view> table_order{
      "VT_CONV_REG",          "VT_CONV_EXACT_CHUNKS",  "VT_CONV_CHANNEL_TILE",      "VT_CONV_UPDATE_FAST",
      "VT_GDN_POSTCONV_FAST", "VT_GDN_POSTCONV_SPLIT", "VT_GDN_POSTCONV_TOKEN_TILE"};
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
    // gdn.prefill: a set flag that chooses a prefill kernel (all but VT_CONV_UPDATE_FAST) runs the
    // unfused prefill, as the seed did; unset, the default (fused).
    const bool prefill_flag = row.value.has_value() && flag != "VT_CONV_UPDATE_FAST";
    CHECK(r.arms.gdn_prefill == (prefill_flag ? GdnPrefillArm::unfused : ArmSelection{}.gdn_prefill));
    CHECK(src(r, Op::gdn_prefill) == (prefill_flag ? row.source : std::string("default")));
    // The other ops are untouched.
    for (size_t i = 0; i < kNumOps; ++i) {
      if (static_cast<Op>(i) == op || static_cast<Op>(i) == Op::gdn_prefill) continue;
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
  check_flag_rows(
      "VT_CONV_EXACT_CHUNKS", Op::conv_chunks,
      {
          {std::nullopt, exact, "", "default"},
          {"1", exact, "", "VT_CONV_EXACT_CHUNKS=1"},
          {"0", whole, "", "VT_CONV_EXACT_CHUNKS=0"},
          {"", exact, "VT_CONV_EXACT_CHUNKS=\"\" is not 0 or 1: using 1 " + on, "VT_CONV_EXACT_CHUNKS=\"\""},
          {"00", whole, "VT_CONV_EXACT_CHUNKS=\"00\" is not 0 or 1: using 0 " + off, "VT_CONV_EXACT_CHUNKS=\"00\""},
          {"no", exact, "VT_CONV_EXACT_CHUNKS=\"no\" is not 0 or 1: using 1 " + on, "VT_CONV_EXACT_CHUNKS=\"no\""},
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
  check_flag_rows(
      "VT_CONV_UPDATE_FAST", Op::conv_update,
      {
          {std::nullopt, fast, "", "default"},
          {"1", fast, "", "VT_CONV_UPDATE_FAST=1"},
          {"0", grid, "", "VT_CONV_UPDATE_FAST=0"},
          {"", fast, "VT_CONV_UPDATE_FAST=\"\" is not 0 or 1: using 1 " + on, "VT_CONV_UPDATE_FAST=\"\""},
          {"0.5", grid, "VT_CONV_UPDATE_FAST=\"0.5\" is not 0 or 1: using 0 " + off, "VT_CONV_UPDATE_FAST=\"0.5\""},
          {"true", fast, "VT_CONV_UPDATE_FAST=\"true\" is not 0 or 1: using 1 " + on, "VT_CONV_UPDATE_FAST=\"true\""},
      });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_FAST: off (megablock) only when starting with '0'", "[arms]") {
  const std::string on = "(on: postconv=fast unless split or token_tile is on)";
  const std::string off = "(off: postconv=megablock unless split or token_tile is on)";
  const size_t megablock = 0, fast = 1, token_tile = 3;
  check_flag_rows(
      "VT_GDN_POSTCONV_FAST", Op::postconv,
      {
          {std::nullopt, token_tile, "", "default"},  // no post-conv flag set: the default
          {"1", fast, "", "VT_GDN_POSTCONV_FAST=1"},
          {"0", megablock, "", "VT_GDN_POSTCONV_FAST=0"},
          {"", fast, "VT_GDN_POSTCONV_FAST=\"\" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_FAST=\"\""},
          {"000", megablock, "VT_GDN_POSTCONV_FAST=\"000\" is not 0 or 1: using 0 " + off,
           "VT_GDN_POSTCONV_FAST=\"000\""},
          {"yes", fast, "VT_GDN_POSTCONV_FAST=\"yes\" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_FAST=\"yes\""},
      });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_SPLIT: on when set and not starting with '0' (\"\" is on)", "[arms]") {
  const std::string on = "(on: postconv=split)", off = "(off)";
  const size_t fast = 1, split = 2, token_tile = 3;
  check_flag_rows(
      "VT_GDN_POSTCONV_SPLIT", Op::postconv,
      {
          {std::nullopt, token_tile, "", "default"},
          {"0", fast, "", "VT_GDN_POSTCONV_SPLIT=0"},
          {"1", split, "", "VT_GDN_POSTCONV_SPLIT=1"},
          {"", split, "VT_GDN_POSTCONV_SPLIT=\"\" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_SPLIT=\"\""},
          {"00", fast, "VT_GDN_POSTCONV_SPLIT=\"00\" is not 0 or 1: using 0 " + off, "VT_GDN_POSTCONV_SPLIT=\"00\""},
          {"off", split, "VT_GDN_POSTCONV_SPLIT=\"off\" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_SPLIT=\"off\""},
          {" ", split, "VT_GDN_POSTCONV_SPLIT=\" \" is not 0 or 1: using 1 " + on, "VT_GDN_POSTCONV_SPLIT=\" \""},
      });
}

TEST_CASE("seed flag VT_GDN_POSTCONV_TOKEN_TILE: on when set and not starting with '0'", "[arms]") {
  const std::string on = "(on: postconv=token_tile unless split is on)", off = "(off)";
  const size_t fast = 1, token_tile = 3;
  check_flag_rows("VT_GDN_POSTCONV_TOKEN_TILE", Op::postconv,
                  {
                      {std::nullopt, token_tile, "", "default"},
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
      {std::nullopt, std::nullopt, std::nullopt, PostconvArm::token_tile, "default"},  // none set
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
        // None set: the default (token_tile); any set: the seed's precedence.
        const PostconvArm want = !f && !s && !t ? PostconvArm::token_tile
                                 : on(s, false) ? PostconvArm::split
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
    CHECK(r.warnings[0] ==
          "VT_CONV_REG=\"a\\\"b\\\\c\" is not 0 or 1: using 1 (on: conv.fwd=register, or the "
          "VT_CONV_CHANNEL_TILE arm)");
  }
}
