// CPU tests of `stepgraph diff`'s logic (tools/cli/bench_diff.h) on bench reports built here in
// the shape bench_model.cpp writes: graphs matched by name, the step's verdict against the wider
// spread, families ordered by their change, graphs and families of one report, the settings that
// differ, the ops whose nodes ran other arms (manifests), the text and JSON reports, and every kind
// of document refused with its reason.
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "tests/support/catch.h"
#include "tools/cli/bench_diff.h"

using namespace sg;
using namespace sg::cli;
using nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

json decode_graph(int batch, double median, double min, double max, json ops) {
  return {{"kind", "decode"},       {"batch", batch},  {"step_ms", {{"median", median}, {"min", min}, {"max", max}}},
          {"eager_ms", median + 1}, {"floor_ms", 2.0}, {"ops", std::move(ops)}};
}

json family(double us, int nodes) { return {{"us", us}, {"nodes", nodes}}; }

json report(json graphs) {
  return {{"preset", "qwen3.5-4b"}, {"device", "test device"}, {"workload", "model"},        {"context", 1024},
          {"gemm", "mixed"},        {"interrupted", false},    {"graphs", std::move(graphs)}};
}

json old_report() {
  return report(json::array(
      {decode_graph(32, 4.40, 4.38, 4.41,
                    {{"mlp.gate_up", family(900, 32)}, {"attn_prep", family(50, 8)}, {"swiglu", family(80, 32)}}),
       decode_graph(1, 2.90, 2.89, 2.91, {{"mlp.gate_up", family(680, 32)}}),
       {{"kind", "prefill"},
        {"bucket", 32768},
        {"sequences", 32},
        {"tokens_per_sequence", 1024},
        {"step_ms", {{"median", 490.0}, {"min", 490.0}, {"max", 490.0}}},
        {"ops", {{"attention.prefill", family(42000, 8)}}}}}));
}

json new_report() {
  json r = report(json::array(
      {decode_graph(32, 4.30, 4.29, 4.31,
                    {{"mlp.gate_up", family(890, 32)}, {"attn_prep", family(20, 8)}, {"lm_head", family(300, 1)}}),
       decode_graph(1, 2.92, 2.90, 2.95, {{"mlp.gate_up", family(681, 32)}}),
       decode_graph(8, 3.10, 3.09, 3.11, json::object()),
       {{"kind", "prefill"},
        {"bucket", 32768},
        {"sequences", 32},
        {"tokens_per_sequence", 1024},
        {"step_ms", {{"median", 485.0}, {"min", 485.0}, {"max", 485.0}}},
        {"ops", {{"attention.prefill", family(37000, 8)}}}}}));
  r["gemm"] = "lt";
  r["attn_prefill"] = "wgmma";
  return r;
}

// The message of the sg::Error diff_bench_reports throws for `bad` as the new report.
std::string refusal(const json& bad) {
  try {
    diff_bench_reports(old_report(), bad, "old.json", "new.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("diff: graphs matched by name, the step's verdict against the wider spread", "[diff]") {
  const BenchDiff d = diff_bench_reports(old_report(), new_report(), "old.json", "new.json");
  REQUIRE(d.graphs.size() == 4);
  CHECK(d.graphs[0].name == "decode b=32");
  CHECK(d.graphs[0].verdict == Verdict::faster);  // -0.10 against a noise of 0.03
  CHECK(d.graphs[0].delta_ms() == Approx(-0.10));
  CHECK(d.graphs[0].noise_ms() == Approx(0.03));
  CHECK(d.graphs[1].name == "decode b=1");
  CHECK(d.graphs[1].verdict == Verdict::neutral);  // +0.02 within the new report's spread of 0.05
  CHECK(d.graphs[2].name == "prefill 32 x 1024 tokens (bucket 32768)");
  CHECK(d.graphs[2].verdict == Verdict::faster);  // no spread on either side: any change counts
  CHECK(d.graphs[2].noise_ms() == 0.0);
  CHECK(d.graphs[3].name == "decode b=8");  // only the new report has it: listed after the old order
  CHECK(d.graphs[3].verdict == Verdict::only_b);
  CHECK_FALSE(d.graphs[3].old_step.has_value());
  CHECK(d.graphs[3].delta_ms() == 0.0);

  // The reverse comparison turns the verdicts around.
  const BenchDiff r = diff_bench_reports(new_report(), old_report(), "new.json", "old.json");
  CHECK(r.graphs[0].verdict == Verdict::slower);
  CHECK(r.graphs[2].name == "decode b=8");  // in the order of the report given first
  CHECK(r.graphs[2].verdict == Verdict::only_a);
}

TEST_CASE("diff: families by the size of their change, those of one report included", "[diff]") {
  const BenchDiff d = diff_bench_reports(old_report(), new_report(), "old.json", "new.json");
  const auto& f = d.graphs[0].families;
  REQUIRE(f.size() == 4);
  CHECK(f[0].family == "lm_head");  // +300: only new
  CHECK_FALSE(f[0].old_us.has_value());
  CHECK(f[0].new_nodes == 1);
  CHECK(f[1].family == "swiglu");  // -80: only old
  CHECK(f[1].delta_us() == Approx(-80));
  CHECK(f[2].family == "attn_prep");    // -30
  CHECK(f[3].family == "mlp.gate_up");  // -10
}

TEST_CASE("diff: the settings that differ", "[diff]") {
  const BenchDiff d = diff_bench_reports(old_report(), new_report(), "old.json", "new.json");
  int differing = 0;
  for (const auto& s : d.settings) {
    if (s.name == "gemm") {
      CHECK(s.old_value == "mixed");
      CHECK(s.new_value == "lt");
    }
    if (s.name == "attn_prefill") {
      CHECK(s.old_value == "(absent)");  // older reports lack some settings
      CHECK(s.new_value == "wgmma");
    }
    if (s.name == "context") CHECK(s.old_value == "1024");
    differing += s.differs;
  }
  CHECK(differing == 2);
}

TEST_CASE("diff: a report without ssm_state kept its state in f32", "[diff]") {
  json bf16 = new_report();
  bf16["ssm_state"] = "bf16";
  json f32 = new_report();
  f32["ssm_state"] = "f32";
  auto ssm = [](const BenchDiff& d) {
    for (const auto& s : d.settings) {
      if (s.name == "ssm_state") return s;
    }
    FAIL("no ssm_state row");
    return d.settings.front();
  };
  const BenchDiff same = diff_bench_reports(old_report(), f32, "old.json", "new.json");
  CHECK(ssm(same).old_value == "f32");  // absent: from before the setting existed
  CHECK_FALSE(ssm(same).differs);
  const BenchDiff other = diff_bench_reports(old_report(), bf16, "old.json", "new.json");
  CHECK(ssm(other).old_value == "f32");
  CHECK(ssm(other).new_value == "bf16");
  CHECK(ssm(other).differs);
}

TEST_CASE("diff: a prefill after history is its own graph, and an absent history is 0", "[diff]") {
  json later = new_report();
  later["history"] = 1024;
  later["graphs"][3]["history"] = 1024;
  const BenchDiff d = diff_bench_reports(old_report(), later, "old.json", "new.json");
  bool seen = false;
  for (const auto& s : d.settings) {
    if (s.name != "history") continue;
    seen = true;
    CHECK(s.old_value == "0");  // absent: from before the setting existed, fresh prompts
    CHECK(s.new_value == "1024");
    CHECK(s.differs);
  }
  CHECK(seen);
  // The two prefills are not compared with each other: each is in one report only.
  std::vector<std::string> names;
  for (const auto& g : d.graphs) names.push_back(g.name);
  CHECK(std::count(names.begin(), names.end(), "prefill 32 x 1024 tokens (bucket 32768)") == 1);
  CHECK(std::count(names.begin(), names.end(), "prefill 32 x 1024 tokens after 1024 of history (bucket 32768)") == 1);
  for (const auto& g : d.graphs) {
    if (g.name == "prefill 32 x 1024 tokens (bucket 32768)") CHECK(g.verdict == Verdict::only_a);
    if (g.name.find("after 1024 of history") != std::string::npos) CHECK(g.verdict == Verdict::only_b);
  }
  // With history 0 written out, the report equals one without it.
  json zero = new_report();
  zero["history"] = 0;
  zero["graphs"][3]["history"] = 0;
  const BenchDiff z = diff_bench_reports(old_report(), zero, "old.json", "new.json");
  for (const auto& s : z.settings) {
    if (s.name == "history") CHECK_FALSE(s.differs);
  }
  CHECK(z.graphs[2].name == "prefill 32 x 1024 tokens (bucket 32768)");
  CHECK(z.graphs[2].verdict == Verdict::faster);
}

TEST_CASE("diff: the text report", "[diff]") {
  const BenchDiff d = diff_bench_reports(old_report(), new_report(), "old.json", "new.json");
  const std::string t = format_bench_diff(d, {false, 15.0});
  CHECK(contains(t, "* gemm           mixed -> lt"));
  CHECK(contains(t, "  preset         qwen3.5-4b"));
  CHECK(contains(t, "-0.100 (-2.3%)"));
  CHECK(contains(t, "faster"));
  CHECK(contains(t, "only new"));
  CHECK(contains(t, "one repetition"));  // the prefill rows have no spread
  CHECK(contains(t, "those that moved by 15 us or more"));
  CHECK(contains(t, "-30.0 (-60.0%)"));       // attn_prep
  CHECK_FALSE(contains(t, "-10.0 (-1.1%)"));  // gate_up moved by less than 15 us
  CHECK(contains(t, "(1 more family moved by less; --all lists it)"));
  CHECK(contains(t, "-5000.0 (-11.9%)"));               // attention.prefill
  CHECK_FALSE(contains(t, "decode b=8: op families"));  // a graph of one report has no family table
  const std::string all = format_bench_diff(d, {true, 15.0});
  CHECK(contains(all, "-10.0 (-1.1%)"));
  CHECK_FALSE(contains(all, "moved by less"));
}

TEST_CASE("diff: the JSON report", "[diff]") {
  json o = old_report();
  o["interrupted"] = true;
  const json j = bench_diff_json(diff_bench_reports(o, new_report(), "old.json", "new.json"));
  CHECK(j["old_interrupted"] == true);
  CHECK(j["new_interrupted"] == false);
  REQUIRE(j["graphs"].size() == 4);
  CHECK(j["graphs"][0]["name"] == "decode b=32");
  CHECK(j["graphs"][0]["verdict"] == "faster");
  CHECK(j["graphs"][0]["old_step_ms"]["median"] == 4.40);
  CHECK(j["graphs"][3]["verdict"] == "only new");
  CHECK(j["graphs"][3]["old_step_ms"].is_null());
  CHECK(j["graphs"][0]["families"][0]["family"] == "lm_head");
  CHECK(j["graphs"][0]["families"][0]["old_us"].is_null());
  bool gemm = false;
  for (const auto& s : j["settings"]) {
    if (s["name"] == "gemm") gemm = s["differs"] == true && s["new"] == "lt";
  }
  CHECK(gemm);
  CHECK(contains(format_bench_diff(diff_bench_reports(o, new_report(), "old.json", "new.json")),
                 "the old report was interrupted"));
}

TEST_CASE("diff: both reports interrupted, a report without family times, no family past --min-us", "[diff]") {
  json o = old_report(), n = new_report();
  o["interrupted"] = true;
  n["interrupted"] = true;
  n["graphs"][0]["ops"] = json::object();  // bench --node-replays 0
  const BenchDiff d = diff_bench_reports(o, n, "old.json", "new.json");
  CHECK(d.graphs[0].old_timed);
  CHECK_FALSE(d.graphs[0].new_timed);
  CHECK(d.graphs[0].families.empty());
  const std::string t = format_bench_diff(d, {false, 1e6});
  CHECK(contains(t, "note: both reports were interrupted"));
  CHECK(contains(t, "decode b=32: op families not timed in the new report"));
  CHECK_FALSE(contains(t, "only old"));  // the families are not listed as gone
  // decode b=1: no family moved by 1e6 us, yet the table says so and still gives the total.
  CHECK(contains(t, "those that moved by 1e+06 us or more:\n  none\n  (1 more family moved by less"));
  CHECK(contains(t, "(all families)                  680.0        681.0         +1.0 (+0.1%)"));
  const json j = bench_diff_json(d);
  CHECK(j["graphs"][0]["new_timed"] == false);
}

TEST_CASE("diff: families and settings are matched by their names and values as the files hold them", "[diff]") {
  const std::string stem(60, 'f');
  json o = old_report(), n = new_report();
  o["graphs"][0]["ops"] = {{stem + "_a", family(10, 1)}, {stem + "_b", family(20, 1)}};
  n["graphs"][0]["ops"] = {{stem + "_a", family(10, 1)}, {stem + "_b", family(25, 1)}};
  o["arms"] = std::string(250, 'x') + "1";
  n["arms"] = std::string(250, 'x') + "2";  // differs only past the 200 bytes shown
  const BenchDiff d = diff_bench_reports(o, n, "old.json", "new.json");
  REQUIRE(d.graphs[0].families.size() == 2);  // not merged although their shown names are equal
  CHECK(d.graphs[0].families[0].delta_us() == Approx(5));
  CHECK(d.graphs[0].families[1].delta_us() == Approx(0));
  bool arms = false;
  for (const auto& s : d.settings) {
    if (s.name == "arms") arms = s.differs && s.old_value == s.new_value;
  }
  CHECK(arms);
}

TEST_CASE("diff: documents that are not whole-model bench reports are refused with the reason", "[diff]") {
  CHECK(contains(refusal(json::array()), "new.json: not a `stepgraph bench --json` report (not a JSON object)"));
  CHECK(contains(refusal({{"a", 1}, {"b", 2}, {"families_us", 3}}), "new.json: a `stepgraph ab` report"));
  CHECK(contains(refusal({{"replays_requested", 10}, {"graphs", json::array()}}), "a `stepgraph soak` report"));
  CHECK(contains(refusal({{"preset", "tiny"}}), "it has no \"graphs\" list"));
  CHECK(contains(refusal({{"graphs", json::array()}, {"totals", json::object()}, {"planned_graphs", 3}}),
                 "a `stepgraph capture` report"));
  json odd_interrupted = new_report();
  odd_interrupted["interrupted"] = "true";
  CHECK(contains(refusal(odd_interrupted), "\"interrupted\" is not true or false"));
  CHECK(contains(refusal({{"workload", "model"}, {"implementation", "cpu-reference"}, {"decode_step_ms", 7.7}}),
                 "a report of the CPU reference (bench without a GPU)"));
  CHECK(contains(refusal({{"workload", "gdn-decode-layer"}, {"graphs", json::array()}}),
                 "a bench report of the 'gdn-decode-layer' workload"));
  CHECK(contains(refusal({{"workload", 3}, {"graphs", json::array()}}), "\"workload\" is not a string"));
  CHECK(contains(refusal({{"graphs", 5}}), "\"graphs\" is not a list"));

  json g = decode_graph(32, 4.3, 4.2, 4.4, json::object());
  auto with = [](json graph) { return report(json::array({std::move(graph)})); };
  json no_kind = g;
  no_kind.erase("kind");
  CHECK(contains(refusal(with(no_kind)), "new.json: graphs[0]: no \"kind\""));
  json odd_kind = g;
  odd_kind["kind"] = "x\x1b[2J";
  CHECK(contains(refusal(with(odd_kind)), "\"kind\" is 'x\\x1b[2J', not decode or prefill"));
  json no_batch = g;
  no_batch.erase("batch");
  CHECK(contains(refusal(with(no_batch)), "graphs[0]: no \"batch\""));
  json neg_batch = g;
  neg_batch["batch"] = -1;
  CHECK(contains(refusal(with(neg_batch)), "\"batch\" is not a count"));
  json text_median = g;
  text_median["step_ms"]["median"] = "4.3";
  CHECK(contains(refusal(with(text_median)), "graphs[0].step_ms: \"median\" is not a number"));
  json negative = g;
  negative["step_ms"] = {{"median", -5.0}, {"min", -6.0}, {"max", -4.0}};
  CHECK(contains(refusal(with(negative)), "graphs[0].step_ms: \"median\" is -5, not a time in [0, 1e+09]"));
  json huge = g;
  huge["eager_ms"] = 1e300;
  CHECK(contains(refusal(with(huge)), "graphs[0]: \"eager_ms\" is 1e+300, not a time"));
  json unordered = g;
  unordered["step_ms"]["min"] = 4.35;
  CHECK(contains(refusal(with(unordered)), "min <= median <= max does not hold"));
  json bad_family = g;
  bad_family["ops"] = {{"attn_prep", {{"nodes", 8}}}};
  CHECK(contains(refusal(with(bad_family)), "graphs[0].ops[\"attn_prep\"]: no \"us\""));
  json bad_ops = g;
  bad_ops["ops"] = json::array();
  CHECK(contains(refusal(with(bad_ops)), "\"ops\" is not an object"));
  CHECK(contains(refusal(report(json::array({g, g}))), "graphs[1]: a second 'decode b=32'"));
  CHECK(contains(refusal(report(json::array({5}))), "graphs[0]: not an object"));
  // The old report is checked too, and named.
  try {
    diff_bench_reports(json::object(), new_report(), "old.json", "new.json");
    FAIL("an empty old report was accepted");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "old.json: not a `stepgraph bench --json` report"));
  }
  // A well-formed report passes (the checks above are not failing for another reason).
  CHECK(refusal(with(g)).empty());
}

TEST_CASE("diff: ops whose nodes ran other arms, from the manifests, and the cuBLASLt note", "[diff]") {
  auto nodes = [](const std::string& out_proj_arm) {
    return json{{"nodes", json::array({{{"op", "gdn.out_proj"}, {"arm", out_proj_arm}},
                                       {{"op", "gdn.out_proj"}, {"arm", out_proj_arm}},
                                       {{"op", "conv.update"}, {"arm", "fast"}},
                                       {{"op", "mlp.down"}, {"arm", "skinny bn=64 splits=3"}}})}};
  };
  json a = old_report(), b = new_report();
  a["graphs"][0]["manifest"] = nodes("lt algo=66 tile=12 splitk=1");
  b["graphs"][0]["manifest"] = nodes("lt algo=66 tile=16 splitk=3");
  b["graphs"][0]["manifest"]["nodes"][3]["arm"] = "skinny bn=64 splits=6";
  a["graphs"][1]["manifest"] = nodes("cublas");  // decode b=1: the same arms
  b["graphs"][1]["manifest"] = nodes("cublas");
  const BenchDiff d = diff_bench_reports(a, b, "old.json", "new.json");
  REQUIRE(d.graphs[0].arms.size() == 2);  // by op name
  CHECK(d.graphs[0].arms[0].op == "gdn.out_proj");
  CHECK(d.graphs[0].arms[0].old_arms == std::vector<std::string>{"lt algo=66 tile=12 splitk=1"});
  CHECK(d.graphs[0].arms[0].new_arms == std::vector<std::string>{"lt algo=66 tile=16 splitk=3"});
  CHECK(d.graphs[0].arms[1].op == "mlp.down");
  CHECK(d.graphs[1].arms.empty());
  CHECK(d.graphs[2].arms.empty());  // the prefill graph: no manifest in either
  const std::string text = format_bench_diff(d);
  CHECK(contains(text,
                 "decode b=32: ops whose nodes ran other arms (old -> new):\n"
                 "  gdn.out_proj: lt algo=66 tile=12 splitk=1 -> lt algo=66 tile=16 splitk=3\n"
                 "  mlp.down: skinny bn=64 splits=3 -> skinny bn=64 splits=6\n"));
  CHECK(contains(text, "note: cuBLASLt's algorithm choices differ between the runs"));
  CHECK(contains(text, "--lt-choices FILE"));
  CHECK_FALSE(contains(text, "decode b=1: ops whose nodes ran other arms"));
  const json j = bench_diff_json(d);
  CHECK(j["graphs"][0]["arms"][0]["op"] == "gdn.out_proj");
  CHECK(j["graphs"][0]["arms"][1]["new"] == json::array({"skinny bn=64 splits=6"}));
  CHECK(j["graphs"][1]["arms"].empty());
  // Only skinny splits differ: no cuBLASLt note.
  b["graphs"][0]["manifest"] = nodes("lt algo=66 tile=12 splitk=1");
  b["graphs"][0]["manifest"]["nodes"][3]["arm"] = "skinny bn=64 splits=6";
  CHECK_FALSE(contains(format_bench_diff(diff_bench_reports(a, b, "old.json", "new.json")), "cuBLASLt"));
  // A malformed manifest is refused with where it is.
  json bad = new_report();
  bad["graphs"][0]["manifest"] = {{"nodes", json::array({{{"op", "x"}, {"arm", 3}}})}};
  CHECK(contains(refusal(bad), "new.json: graphs[0].manifest.nodes[0]: \"op\" and \"arm\" must be strings"));
  bad["graphs"][0]["manifest"] = {{"nodes", 1}};
  CHECK(contains(refusal(bad), "new.json: graphs[0].manifest: \"nodes\" is not a list"));
  // A manifest without its node list (an archived report keeps the summary): no arms to compare.
  json archived = new_report();
  archived["graphs"][0]["manifest"] = {{"graph", "model-decode qwen3.5-4b b=32"}, {"arms", "conv.update=fast"}};
  json with_nodes = old_report();
  with_nodes["graphs"][0]["manifest"] = nodes("cublas");
  CHECK(diff_bench_reports(with_nodes, archived, "old.json", "new.json").graphs[0].arms.empty());
  bad["graphs"][0]["manifest"] = 7;
  CHECK(contains(refusal(bad), "new.json: graphs[0].manifest: not an object"));
}

TEST_CASE("diff: a caution where a graph's clocks differed between the reports", "[diff][clocks]") {
  auto clocks = [](unsigned sm, int capped) {
    return json{{"samples", 10},
                {"sm_mhz", {{"median", sm}, {"min", sm - 15}, {"max", sm}}},
                {"mem_mhz", 2619},
                {"power_w", 690.5},
                {"held_down", capped ? json{{"power cap", capped}} : json::object()}};
  };
  json a = old_report(), b = new_report();
  a["graphs"][0]["clocks"] = clocks(1980, 0);
  b["graphs"][0]["clocks"] = clocks(1980, 0);
  a["graphs"][1]["clocks"] = clocks(1980, 0);
  b["graphs"][1]["clocks"] = clocks(1485, 10);
  a["graphs"][2]["clocks"] = nullptr;  // not sampled: nothing to compare
  b["graphs"][2]["clocks"] = clocks(1485, 10);
  const BenchDiff d = diff_bench_reports(a, b, "old.json", "new.json");
  CHECK(d.graphs[0].clocks_caution.empty());
  CHECK(d.graphs[1].clocks_caution ==
        "the clocks differed between the measurements (SM clock medians 1980 MHz (old) and 1485 MHz (new); power cap "
        "in 0% of old's samples and 100% of new's)");
  CHECK(d.graphs[2].clocks_caution.empty());
  const std::string t = format_bench_diff(d);
  CHECK(contains(t,
                 "caution: decode b=1: the clocks differed between the measurements (SM clock medians 1980 MHz "
                 "(old) and 1485 MHz (new);"));
  CHECK(contains(t, "part of its change may be the clocks', not the code's"));
  CHECK_FALSE(contains(t, "caution: decode b=32"));
  const json j = bench_diff_json(d);
  CHECK(j.at("graphs")[0].at("clocks_caution").is_null());
  CHECK(j.at("graphs")[1].at("clocks_caution") == d.graphs[1].clocks_caution);

  // A malformed clocks field is an error naming the report and the field.
  json bad = new_report();
  bad["graphs"][0]["clocks"] = clocks(1980, 0);
  bad["graphs"][0]["clocks"]["held_down"] = {{"power cap", 11}};
  CHECK(contains(refusal(bad), "new.json: graphs[0].clocks.held_down: \"power cap\" counts more samples than the 10"));
  bad["graphs"][0]["clocks"] = "fast";
  CHECK(contains(refusal(bad), "graphs[0].clocks: not an object"));
  bad["graphs"][0]["clocks"] = clocks(1980, 0);
  bad["graphs"][0]["clocks"]["sm_mhz"]["min"] = 1995;
  CHECK(contains(refusal(bad), "graphs[0].clocks.sm_mhz: min <= median <= max does not hold"));
  bad["graphs"][0]["clocks"] = clocks(1980, 0);
  bad["graphs"][0]["clocks"]["sm_mhz"]["max"] = 1900;
  CHECK(contains(refusal(bad), "graphs[0].clocks.sm_mhz: min <= median <= max does not hold"));
  bad["graphs"][0]["clocks"] = clocks(1980, 0);
  bad["graphs"][0]["clocks"].erase("sm_mhz");
  CHECK(contains(refusal(bad), "graphs[0].clocks: no \"sm_mhz\""));
  // Reasons the sampler does not name are left out; a report's own names go through.
  json odd = new_report();
  odd["graphs"][0]["clocks"] = clocks(1980, 0);
  odd["graphs"][0]["clocks"]["held_down"] = {{"reason 0x10000000000", 3}, {"\x1b[2J", 2}};
  CHECK(refusal(odd).empty());
}
