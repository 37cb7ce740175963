// CPU tests of kernels/arms.h, part 1: the name table, ArmSelection's text form (describe, parse and
// their errors), and resolve_arms()'s precedence between --arm, STEPGRAPH_ARMS, the seed flags and
// the defaults, with its errors. The seed VT_* flag table and its warnings: test_seed_flags.cpp.
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"
#include "tests/support/catch.h"
#include "tests/support/env_map.h"

using namespace sg;
using namespace sg::test;

namespace {

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

const std::string kValidOps = "conv.fwd, conv.chunks, conv.update, postconv, gdn.prefill, gdn.decode";
const std::string kDefaults =
    "conv.fwd=register,conv.chunks=exact,conv.update=fast,postconv=token_tile,gdn.prefill=fused,gdn.decode=unfused";

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
  CHECK(valid_arms_list(Op::gdn_decode) == "unfused, fused, staged, prep");

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
  CHECK(arm_name(GdnDecodeArm::staged) == "staged");
  CHECK(arm_name(GdnDecodeArm::prep) == "prep");

  CHECK_THROWS_AS(arm_name(static_cast<ConvFwdArm>(4)), ArmError);
  CHECK_THROWS_AS(arm_name(static_cast<GdnDecodeArm>(4)), ArmError);
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
  CHECK(def(Op::postconv) == "token_tile");
  CHECK(ref(Op::gdn_prefill) == "unfused");
  CHECK(def(Op::gdn_prefill) == "fused");
  CHECK(ref(Op::gdn_decode) == "unfused");
  CHECK(def(Op::gdn_decode) == "unfused");

  CHECK(format_arm_table() ==
        "conv.fwd     tiled (reference), register (default), k4, k4x2\n"
        "conv.chunks  exact (default), whole (reference)\n"
        "conv.update  grid (reference), fast (default)\n"
        "postconv     megablock (reference), fast, split, token_tile (default)\n"
        "gdn.prefill  unfused (reference), fused (default)\n"
        "gdn.decode   unfused (reference, default), fused, staged, prep\n");
}

// --- ArmSelection text form -----------------------------------------------------------------------

TEST_CASE("ArmSelection: defaults, describe, equality", "[arms]") {
  ArmSelection s;
  CHECK(s.conv_fwd == ConvFwdArm::reg);
  CHECK(s.conv_chunks == ConvChunksArm::exact);
  CHECK(s.conv_update == ConvUpdateArm::fast);
  CHECK(s.postconv == PostconvArm::token_tile);
  CHECK(s.gdn_prefill == GdnPrefillArm::fused);
  CHECK(s.gdn_decode == GdnDecodeArm::unfused);
  CHECK(s.describe() == kDefaults);

  ArmSelection t;
  t.conv_fwd = ConvFwdArm::k4x2;
  t.postconv = PostconvArm::split;
  t.gdn_prefill = GdnPrefillArm::unfused;
  t.gdn_decode = GdnDecodeArm::fused;
  CHECK_FALSE(s == t);
  CHECK(t.describe() ==
        "conv.fwd=k4x2,conv.chunks=exact,conv.update=fast,postconv=split,gdn.prefill=unfused,gdn.decode=fused");
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
  // Every combination, counted in mixed radix over the ops' arm counts (so a new arm is covered
  // without editing this test); the product is pinned so that the count cannot shrink unseen.
  const auto ops = all_ops();
  size_t total = 1;
  for (const OpInfo& op : ops) total *= op.arms.size();
  CHECK(total == 4 * 2 * 2 * 4 * 2 * 4);  // conv.fwd, conv.chunks, conv.update, postconv, gdn.prefill, gdn.decode
  std::set<std::string> seen;
  for (size_t combo = 0; combo < total; ++combo) {
    ArmSelection s;
    std::vector<size_t> want;
    size_t rest = combo;
    for (const OpInfo& op : ops) {
      want.push_back(rest % op.arms.size());
      rest /= op.arms.size();
      s.set_index(op.op, want.back());
    }
    for (size_t i = 0; i < ops.size(); ++i) CHECK(s.index(ops[i].op) == want[i]);
    const std::string text = s.describe();
    CAPTURE(text);
    CHECK(ArmSelection::parse(text) == s);
    CHECK(ArmSelection::parse(text).describe() == text);
    seen.insert(text);
  }
  CHECK(seen.size() == total);  // describe() is injective: distinct selections, distinct graph keys
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

  for (const char* bad :
       {",", "conv.fwd=k4,", ",conv.fwd=k4", "conv.fwd=k4,,postconv=fast", "conv.fwd=k4, ,postconv=fast"}) {
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
    const ResolvedArms r = resolve(
        {{"VT_GDN_POSTCONV_SPLIT", "1"}, {"VT_CONV_CHANNEL_TILE", "1"}, {"STEPGRAPH_ARMS", "postconv=megablock"}});
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
