// CPU tests of `stepgraph ab`'s pure logic (tools/cli/ab_selection.h, ab_compare.h): the selection
// grammar (good and bad inputs, the messages), applying a selection to a base, the verdict rule,
// rows and families, the text report and the JSON shape.
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "tests/support/catch.h"
#include "tools/cli/ab_compare.h"
#include "tools/cli/ab_selection.h"

using namespace sg;
using namespace sg::cli;

namespace {

// The message of the sg::Error parse_selection throws ("" when it does not throw).
std::string selection_error(const std::string& text) {
  try {
    parse_selection(text, "--b");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

AbReport sample_report() {
  AbReport r;
  r.device = "test device";
  r.preset = "tiny";
  r.graph = "decode b=4 (context 64)";
  r.reps = 3;
  r.replays = 10;
  r.node_replays = 2;
  r.hash_steps = 16;
  r.a = {"(base)", "conv.fwd=register", "delta-prefill=chunked", 1, 2, std::nullopt};
  r.b = {"postconv=token_tile", "conv.fwd=register", "delta-prefill=chunked", 1, 2, std::nullopt};
  r.step = compare_row("whole step (ms)", {1.0, 1.1, 1.05}, {0.8, 0.85, 0.82});
  r.families = compare_families({{"postconv", {10, 11, 12}}, {"conv.update", {5, 5, 5}}},
                                {{"postconv", {7, 7.5, 8}}, {"conv.update", {5.1, 5, 4.9}}});
  return r;
}

}  // namespace

TEST_CASE("ab selection: an arm and a setting", "[ab][selection]") {
  const Selection s = parse_selection(" postconv = token_tile , gemm=skinny", "--a");
  REQUIRE(s.items.size() == 2);
  CHECK(s.items[0].key == "postconv");
  CHECK(s.items[0].value == "token_tile");
  CHECK_FALSE(s.items[0].setting);
  CHECK(s.items[1].key == "gemm");
  CHECK(s.items[1].setting);
  CHECK(s.describe() == "postconv=token_tile,gemm=skinny");
}

TEST_CASE("ab selection: every op and every setting is a key", "[ab][selection]") {
  const Selection s = parse_selection(
      "conv.fwd=k4,conv.chunks=whole,conv.update=grid,postconv=split,gdn.prefill=fused,gdn.decode=fused,"
      "delta-prefill=scan,attn-prefill=mma,attn-decode=simt,gemm=cublas,pdl=off,swiglu=kernel,gated-norm=delta,"
      "mix-round=norm,ssm-state=bf16,arms=tune",
      "--a");
  CHECK(s.items.size() == 16);
  const StepChoice c = apply(s, StepChoice{});
  CHECK(c.arms.conv_fwd == ConvFwdArm::k4);
  CHECK(c.arms.conv_chunks == ConvChunksArm::whole);
  CHECK(c.arms.conv_update == ConvUpdateArm::grid);
  CHECK(c.arms.postconv == PostconvArm::split);
  CHECK(c.arms.gdn_prefill == GdnPrefillArm::fused);
  CHECK(c.arms.gdn_decode == GdnDecodeArm::fused);
  CHECK(c.describe_settings() ==
        "delta-prefill=scan,attn-prefill=mma,attn-decode=simt,gemm=cublas,pdl=off,swiglu=kernel,gated-norm=delta,"
        "mix-round=norm,ssm-state=bf16,arms=tune");
  CHECK(StepChoice{}.describe_settings() ==
        "delta-prefill=auto,attn-prefill=auto,attn-decode=auto,gemm=auto,pdl=auto,swiglu=auto,gated-norm=auto,"
        "mix-round=auto,ssm-state=f32,arms=fixed");
}

TEST_CASE("ab selection: an empty selection is the base", "[ab][selection]") {
  for (const char* text : {"", "  ", "\t"}) {
    const Selection s = parse_selection(text, "--a");
    CHECK(s.items.empty());
    CHECK(s.describe() == "(base)");
  }
  StepChoice base;
  base.arms.postconv = PostconvArm::split;
  base.gemm = "skinny";
  CHECK(apply(parse_selection("", "--a"), base) == base);
}

TEST_CASE("ab selection: a selection changes only what it names", "[ab][selection]") {
  StepChoice base;
  base.arms.conv_fwd = ConvFwdArm::k4x2;
  base.attn_decode = "mma";
  const StepChoice c = apply(parse_selection("postconv=token_tile", "--b"), base);
  CHECK(c.arms.conv_fwd == ConvFwdArm::k4x2);
  CHECK(c.arms.postconv == PostconvArm::token_tile);
  CHECK(c.attn_decode == "mma");
  CHECK(c.gemm == "auto");
}

TEST_CASE("ab sides: the ops a side names are its own, the rest keep the base's sources for --arms tune",
          "[ab][selection]") {
  // The base: postconv from --arm, the others at their defaults.
  const ResolvedArms base = resolve_arms({"postconv=split"}, [](std::string_view) { return std::nullopt; });
  REQUIRE(base.source[static_cast<size_t>(Op::postconv)] == "--arm");
  const ResolvedArms b = side_arms(base, parse_selection("gdn.prefill=unfused,gemm=skinny,arms=tune", "--b"), "--b");
  CHECK(b.arms.gdn_prefill == GdnPrefillArm::unfused);
  CHECK(b.arms.postconv == PostconvArm::split);
  CHECK(b.source[static_cast<size_t>(Op::gdn_prefill)] == "--b");
  CHECK(b.source[static_cast<size_t>(Op::postconv)] == "--arm");
  // What tune may search: the ops left at "default" (conv.fwd, conv.chunks, conv.update, gdn.decode).
  size_t searched = 0;
  for (size_t i = 0; i < kNumOps; ++i) searched += b.source[i] == "default";
  CHECK(searched == 4);
  // An empty selection is the base itself.
  const ResolvedArms a = side_arms(base, parse_selection("", "--a"), "--a");
  CHECK(a.arms == base.arms);
  CHECK(a.source == base.source);
  StepChoice choice;
  choice.arms = base.arms;
  CHECK(b.arms == apply(parse_selection("gdn.prefill=unfused,gemm=skinny,arms=tune", "--b"), choice).arms);
}

TEST_CASE("ab selection: bad inputs name the option and the valid choices", "[ab][selection]") {
  std::string e = selection_error("postcnv=fast");
  CHECK(contains(e, "--b \"postcnv=fast\": unknown key \"postcnv\""));
  CHECK(contains(e, "conv.fwd"));
  CHECK(contains(e, "gdn.decode"));
  CHECK(contains(e, "attn-decode"));
  CHECK(contains(e, "gemm"));

  e = selection_error("postconv=fats");
  CHECK(contains(e, "unknown arm \"fats\" for postconv"));
  CHECK(contains(e, "megablock, fast, split, token_tile"));

  e = selection_error("gemm=cutlass");
  CHECK(contains(e, "unknown value \"cutlass\" for gemm"));
  CHECK(contains(e, "auto, cublas, skinny, mixed"));

  e = selection_error("pdl=yes");
  CHECK(contains(e, "unknown value \"yes\" for pdl"));
  CHECK(contains(e, "auto, off, on"));

  e = selection_error("attn-decode=");
  CHECK(contains(e, "unknown value \"\" for attn-decode"));

  e = selection_error("postconv");
  CHECK(contains(e, "item \"postconv\" is not key=value"));

  CHECK(contains(selection_error("postconv=fast,"), "empty item (a comma with nothing after"));
  CHECK(contains(selection_error(",postconv=fast"), "empty item (a comma with nothing before"));
  CHECK(contains(selection_error("postconv=fast,,gemm=skinny"), "empty item"));
  CHECK(contains(selection_error("postconv=fast,postconv=split"), "postconv is given twice"));
  CHECK(contains(selection_error("gemm=skinny, gemm=cublas"), "gemm is given twice"));
}

TEST_CASE("ab selection: control bytes in a bad selection are shown escaped", "[ab][selection]") {
  const std::string e = selection_error("postconv=\x1b[2J");
  CHECK(contains(e, "\\x1b[2J"));
  CHECK_FALSE(contains(e, "\x1b"));
}

TEST_CASE("ab selection: the settings table matches the options", "[ab][selection]") {
  CHECK(setting_values("delta-prefill") ==
        std::vector<std::string>{"auto", "scan", "chunked", "mma", "wgmma", "wgmma-t"});
  CHECK(setting_values("attn-prefill") == std::vector<std::string>{"auto", "simt", "mma", "wgmma"});
  CHECK(setting_values("attn-decode") == std::vector<std::string>{"auto", "simt", "mma"});
  CHECK(setting_values("gemm") ==
        std::vector<std::string>{"auto", "cublas", "skinny", "mixed", "lt", "lt-all", "wgmma", "wgmma-large"});
  CHECK(find_setting("postconv") == nullptr);
  StepChoice c;
  CHECK_THROWS_AS(c.setting("postconv"), Error);
}

TEST_CASE("ab verdict: faster or slower only beyond the wider spread", "[ab][verdict]") {
  const Spread a{10.0, 9.0, 11.0};                           // spread 2
  CHECK(verdict(a, {7.9, 7.5, 8.5}) == Verdict::faster);     // d = -2.1, noise 2
  CHECK(verdict(a, {12.1, 12.0, 12.5}) == Verdict::slower);  // d = +2.1
  CHECK(verdict(a, {8.0, 7.5, 8.5}) == Verdict::neutral);    // d = -2 = noise: not beyond it
  CHECK(verdict(a, {11.5, 11.4, 11.6}) == Verdict::neutral);
  // B's spread is the wider one: it sets the noise.
  CHECK(verdict(a, {6.5, 3.0, 9.0}) == Verdict::neutral);  // d = -3.5, noise 6
  // No spread at all: any difference counts, none is neutral.
  CHECK(verdict({5, 5, 5}, {5, 5, 5}) == Verdict::neutral);
  CHECK(verdict({5, 5, 5}, {4.99, 4.99, 4.99}) == Verdict::faster);
  CHECK(verdict_name(Verdict::faster) == "faster");
  CHECK(verdict_name(Verdict::slower) == "slower");
  CHECK(verdict_name(Verdict::neutral) == "neutral");
  CHECK(verdict_name(Verdict::only_a) == "only A");
  CHECK(verdict_name(Verdict::only_b) == "only B");
}

TEST_CASE("ab rows: medians and spreads of the samples and families of one side", "[ab][verdict]") {
  const ComparedRow r = compare_row("step", {3, 1, 2}, {1.0, 0.5, 0.7});
  REQUIRE(r.sa);
  REQUIRE(r.sb);
  CHECK(r.sa->median == 2);
  CHECK(r.sa->min == 1);
  CHECK(r.sa->max == 3);
  CHECK(r.diff() == Approx(-1.3));
  CHECK(r.noise() == Approx(2.0));
  CHECK(r.v == Verdict::neutral);

  const auto fams = compare_families({{"conv.fwd", {4, 4, 4}}, {"postconv", {9, 9, 9}}, {"delta_rule", {1, 1, 1}}},
                                     {{"gdn.prefill", {12, 12, 12}}, {"delta_rule", {1, 1, 1}}});
  REQUIRE(fams.size() == 4);
  CHECK(fams[0].name == "gdn.prefill");  // the largest first
  CHECK(fams[0].v == Verdict::only_b);
  CHECK(fams[1].name == "postconv");
  CHECK(fams[1].v == Verdict::only_a);
  CHECK(fams[3].name == "delta_rule");
  CHECK(fams[3].v == Verdict::neutral);
  CHECK(fams[1].diff() == 0);
}

TEST_CASE("ab report: hashes must match when only arms differ", "[ab][report]") {
  AbReport r = sample_report();
  CHECK_FALSE(r.hash_failure());
  r.b.logits_hash = 3;
  CHECK(r.hash_failure());
  CHECK(contains(format_ab_report(r), "an arm or a kernel's PDL wait is wrong"));
  r.hashes_must_match = false;  // different settings: may differ
  CHECK_FALSE(r.hash_failure());
  CHECK(contains(format_ab_report(r), "the hashes may differ"));
}

TEST_CASE("ab report: the text has every row and a summary", "[ab][report]") {
  const std::string t = format_ab_report(sample_report());
  CHECK(contains(t, "A: (base)"));
  CHECK(contains(t, "B: postconv=token_tile"));
  CHECK(contains(t, "whole step (ms)"));
  CHECK(contains(t, "postconv"));
  CHECK(contains(t, "conv.update"));
  CHECK(contains(t, "faster"));
  CHECK(contains(t, "summary: whole step: B faster against A"));
  CHECK(contains(t, "op families: 1 faster, 0 slower, 1 neutral or on one side only; hashes equal"));
}

TEST_CASE("ab report: a run that Ctrl-C ended early says how many repetitions it covers", "[ab][report]") {
  AbReport r = sample_report();
  r.planned_reps = r.reps;
  CHECK_FALSE(contains(format_ab_report(r), "interrupted"));
  CHECK(ab_json(r).at("interrupted") == false);
  r.planned_reps = r.reps + 7;
  CHECK(contains(format_ab_report(r),
                 fmt::format("interrupted (SIGINT) after {} of {} repetitions", r.reps, r.reps + 7)));
  CHECK(ab_json(r).at("interrupted") == true);
}

TEST_CASE("ab report: each side's clocks, and a caution where they differed", "[ab][report]") {
  AbReport r = sample_report();
  const std::string none = format_ab_report(r);
  CHECK_FALSE(contains(none, "clocks"));  // neither sampled nor a reason: no line
  CHECK(ab_json(r).at("clocks").at("a").is_null());
  r.clocks_unavailable = "NVML could not be loaded";
  CHECK(contains(format_ab_report(r), "clocks: not sampled (NVML could not be loaded)"));
  CHECK(ab_json(r).at("clocks").at("not_sampled") == "NVML could not be loaded");

  r.clocks_unavailable.clear();
  r.a.clocks = summarize_clocks(std::vector<ClockSample>(5, ClockSample{1980, 3201, 560000, 0}));
  r.b.clocks = r.a.clocks;
  std::string t = format_ab_report(r);
  CHECK(contains(t,
                 "clocks during the event-timed replays (NVML):\n  A: SM 1980 MHz median (1980 to 1980), memory 3201 "
                 "MHz, 560 W; no clock limit reported\n  B: SM 1980 MHz"));
  CHECK_FALSE(contains(t, "caution"));
  CHECK(clocks_caution(r).empty());
  nlohmann::json j = ab_json(r);
  CHECK(j.at("clocks").at("a").at("sm_mhz").at("median") == 1980);
  CHECK(j.at("clocks").at("b").at("samples") == 5);
  CHECK(j.at("clocks").at("caution").is_null());
  CHECK(j.at("clocks").at("not_sampled").is_null());

  r.b.clocks = summarize_clocks(std::vector<ClockSample>(5, ClockSample{1485, 3201, 697000, kClockPowerCap}));
  t = format_ab_report(r);
  CHECK(contains(t,
                 "caution: the clocks differed between the measurements (SM clock medians 1980 MHz (A) and 1485 "
                 "MHz (B); power cap in 0% of A's samples and 100% of B's): part of B - A may be the clocks'"));
  j = ab_json(r);
  CHECK(j.at("clocks").at("b").at("held_down").at("power cap") == 5);
  CHECK(j.at("clocks").at("caution") == clocks_caution(r));
}

TEST_CASE("ab report: the JSON shape", "[ab][report]") {
  const nlohmann::json j = ab_json(sample_report());
  for (const char* k : {"device", "preset", "graph", "reps", "replays", "node_replays", "verdict_rule", "a", "b",
                        "step_ms", "families_us", "clocks", "hashes"}) {
    INFO(k);
    CHECK(j.contains(k));
  }
  CHECK(j.at("a").at("selection") == "(base)");
  CHECK(j.at("b").at("token_hash") == "0000000000000001");
  const auto& step = j.at("step_ms");
  CHECK(step.at("verdict") == "faster");
  CHECK(step.at("a").at("samples").size() == 3);
  CHECK(step.at("a").at("median") == 1.05);
  CHECK(step.at("b").at("min") == 0.8);
  REQUIRE(j.at("families_us").size() == 2);
  CHECK(j.at("families_us")[0].at("name") == "postconv");
  CHECK(j.at("families_us")[0].at("verdict") == "faster");
  CHECK(j.at("hashes").at("tokens_equal") == true);
  CHECK(j.at("hashes").at("must_match") == true);
  CHECK(j.at("hashes").at("failure") == false);

  AbReport one_sided = sample_report();
  one_sided.families = compare_families({{"conv.fwd", {1, 1, 1}}}, {});
  const nlohmann::json k = ab_json(one_sided);
  CHECK(k.at("families_us")[0].at("b").is_null());
  CHECK(k.at("families_us")[0].at("verdict") == "only A");
}

TEST_CASE("ab selection: every setting of the table has its own field", "[ab][selection]") {
  StepChoice c;
  std::set<const std::string*> fields;
  for (const SettingInfo& s : setting_table()) {
    CAPTURE(s.name);
    const std::string* f = setting_field(c, s.name);
    REQUIRE(f != nullptr);
    CHECK(fields.insert(f).second);              // no two settings share a field
    CHECK(*f == std::string(s.values.front()));  // the default is the table's first value
  }
  CHECK(setting_field(c, "gated_norm") == nullptr);  // the option's name, not the JSON key
  CHECK_THROWS_WITH(c.setting("nope"), "no setting 'nope'");
}

TEST_CASE("ab selection: which settings decide the arithmetic of a decode or prefill graph", "[ab][selection]") {
  StepChoice a, b;
  b.arms.postconv = PostconvArm::token_tile;  // arms never count
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b.attn_prefill = "mma";  // not used by a decode graph
  b.delta_prefill = "scan";
  CHECK(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
  b = a;
  b.attn_decode = "simt";  // not used by a prefill graph
  CHECK_FALSE(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b = a;
  b.gemm = "skinny";  // both
  CHECK_FALSE(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
  b = a;
  b.pdl = "off";  // how kernels are launched, not what they compute: the hashes must match
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b.arms_mode = "tune";  // tuning picks among byte-identical arms: the hashes must match too
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b.swiglu = "kernel";  // the GEMM epilogue and the swiglu kernel give the same bytes
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b.gated_norm = "kernel";  // the delta rule's fused norm and the norm kernel give the same bytes
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b = a;
  b.ssm_state = "bf16";  // the state rounded: both kinds of graph
  CHECK_FALSE(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
  b = a;
  b.mix_round = "norm";  // an f32 GEMM output: cuBLAS may sum it in another order...
  CHECK_FALSE(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
  a.gemm = b.gemm = "skinny";                 // ...the skinny kernel may not: the same bytes as gemm
  CHECK_FALSE(same_arithmetic(a, b, false));  // (auto, residual, adds in cuBLAS where skinny refuses)
  a.mix_round = "gemm";
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  a = b;
  a.gemm = b.gemm = "mixed";
  a.mix_round = "gemm";
  b.mix_round = "partials";  // the norm sums the skinny kernel's partials in its order: gemm's bytes
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  a.mix_round = "norm";  // but an f32 output on cuBLAS is another sum
  CHECK_FALSE(same_arithmetic(a, b, false));
  // residual: partials on the skinny kernel, the product added to the stream in cublasGemmEx (its
  // rounding up to cuBLAS's kernel) where that runs a residual projection: every prefill step of
  // more than 32 rows...
  a.mix_round = "residual";
  CHECK(same_arithmetic(a, b, false));  // mixed decode: the skinny kernel or cuBLASLt, never cuBLAS
  CHECK_FALSE(same_arithmetic(a, b, true));
  a.mix_round = "gemm";
  b.mix_round = "residual";
  CHECK(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
  a.gemm = b.gemm = "cublas";  // ...and decode steps on cuBLAS
  CHECK_FALSE(same_arithmetic(a, b, false));
  a.gemm = b.gemm = "skinny";  // (which leaves the shapes the skinny kernel refuses to cuBLAS)
  CHECK_FALSE(same_arithmetic(a, b, false));
  a.mix_round = "residual";  // the same setting both sides: the same arithmetic
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  a.mix_round = "auto";  // auto is residual on one rank...
  CHECK(same_arithmetic(a, b, false));
  CHECK(same_arithmetic(a, b, true));
  b.mix_round = "partials";
  CHECK_FALSE(same_arithmetic(a, b, true));
  a.gemm = b.gemm = "mixed";
  CHECK(same_arithmetic(a, b, false));
  a.gemm = b.gemm = "auto";  // ...and gemm auto is cuBLAS off sm_90
  CHECK_FALSE(same_arithmetic(a, b, false));
  CHECK_FALSE(same_arithmetic(a, b, true));
}

TEST_CASE("ab sides: a fault's report names the side and its selection", "[ab][selection][faults]") {
  CHECK(side_label("A", parse_selection("", "--a")) == "side A (the base)");
  CHECK(side_label("B", parse_selection(" postconv = fast , gemm=skinny", "--b")) ==
        "side B (postconv=fast,gemm=skinny)");
}

TEST_CASE("ab --fault-after: a side that tunes its arms cannot go with the drill", "[ab][selection][faults]") {
  const Selection none = parse_selection("", "--a"), fast = parse_selection("postconv=fast", "--b");
  const Selection tune = parse_selection("arms=tune", "--b"), fixed = parse_selection("arms=fixed", "--a");
  CHECK(drill_conflicts(none, fast, "fixed").empty());
  const auto base = drill_conflicts(none, fast, "tune");  // both sides tune from the base: named once
  REQUIRE(base.size() == 1);
  CHECK(base[0] == "--arms tune (the arms are timed on graphs of their own at capture, which the drill would fault)");
  const auto side = drill_conflicts(none, tune, "fixed");
  REQUIRE(side.size() == 1);
  CHECK(contains(side[0], "--b arms=tune (the arms are timed"));
  CHECK(drill_conflicts(fixed, parse_selection("arms=fixed", "--b"), "tune").empty());  // both sides chose fixed
  const auto mixed = drill_conflicts(fixed, none, "tune");                              // B keeps the base's tune
  REQUIRE(mixed.size() == 1);
  CHECK(contains(mixed[0], "--arms tune"));
  CHECK(drill_conflicts(parse_selection("arms=tune", "--a"), tune, "fixed").size() == 2);
}
