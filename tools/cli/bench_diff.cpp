// bench_diff.cpp: two whole-model bench reports side by side (see bench_diff.h).
#include "tools/cli/bench_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "engine/error.h"
#include "engine/text.h"

namespace sg::cli {
namespace {

using nlohmann::json;

// The settings a bench report records (bench_model.cpp writes them), in the order they are shown.
constexpr std::array<const char*, 15> kSettings = {
    "preset",      "device", "workload", "context", "history",    "arms",      "delta_prefill", "attn_prefill",
    "attn_decode", "gemm",   "pdl",      "swiglu",  "gated_norm", "mix_round", "ssm_state"};

// The largest time a report may hold (ms or us): a day in ms, so sums and percentages stay finite.
constexpr double kMaxTime = 1e9;

// Reads fields of one report; every error names the report and where in it.
class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(fmt::format("{}: {}{}", name_, where.empty() ? "" : where + ": ", what));
  }
  const json& field(const json& obj, const char* key, const std::string& where) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(where, fmt::format("no \"{}\"", key));
    return *it;
  }
  double number(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(where, fmt::format("\"{}\" is not a number", key));
    return v.get<double>();
  }
  // A time (ms or us) of a report: a number in [0, kMaxTime].
  double time(const json& obj, const char* key, const std::string& where) const {
    const double v = number(obj, key, where);
    if (v < 0 || v > kMaxTime) fail(where, fmt::format("\"{}\" is {:g}, not a time in [0, {:g}]", key, v, kMaxTime));
    return v;
  }
  std::optional<double> optional_time(const json& obj, const char* key, const std::string& where) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return std::nullopt;
    return time(obj, key, where);
  }
  int integer(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(where, fmt::format("\"{}\" is not a count", key));
    return v.get<int>();
  }

 private:
  std::string name_;
};

// Refuses what is not a whole-model bench report, saying what the document is instead.
void check_report(const json& doc, const Reader& r) {
  if (!doc.is_object()) r.fail("", "not a `stepgraph bench --json` report (not a JSON object)");
  if (doc.contains("a") && doc.contains("b") && doc.contains("families_us"))
    r.fail("", "a `stepgraph ab` report: diff compares two `stepgraph bench --json` reports (ab compares itself)");
  if (doc.contains("totals") || doc.contains("planned_graphs"))
    r.fail("", "a `stepgraph capture` report: diff compares two `stepgraph bench --json` reports");
  if (doc.contains("replays_requested") || doc.contains("reference_hash"))
    r.fail("", "a `stepgraph soak` report: diff compares two `stepgraph bench --json` reports");
  if (doc.contains("implementation") && doc.at("implementation") == "cpu-reference")
    r.fail("",
           "a report of the CPU reference (bench without a GPU), which times no graphs: diff compares the "
           "reports of GPU runs");
  if (!doc.contains("graphs")) r.fail("", "not a `stepgraph bench --json` report (it has no \"graphs\" list)");
  if (doc.contains("workload")) {
    const json& w = doc.at("workload");
    if (!w.is_string()) r.fail("", "\"workload\" is not a string");
    if (w.get<std::string>() != "model")
      r.fail("", fmt::format("a bench report of the '{}' workload: diff compares reports of the whole-model "
                             "workload (`stepgraph bench`, the default --workload model)",
                             printable(w.get<std::string>(), 40)));
  }
  if (!doc.at("graphs").is_array()) r.fail("", "\"graphs\" is not a list");
  if (doc.at("graphs").empty())
    r.fail("", "\"graphs\" is empty: the report measured no graph, so it has nothing to compare");
  if (doc.contains("interrupted") && !doc.at("interrupted").is_boolean())
    r.fail("", "\"interrupted\" is not true or false");
}

// A setting's value as the report holds it (JSON text for a non-string); nullopt when absent, but
// "f32" for an absent ssm_state, "0" for an absent history and "gemm" for an absent mix_round
// (reports from before those settings existed kept their state in f32, prefilled fresh prompts and
// rounded in the GEMM).
std::optional<std::string> setting_value(const json& doc, const char* key) {
  static constexpr std::pair<std::string_view, std::string_view> kBefore[] = {
      {"ssm_state", "f32"}, {"history", "0"}, {"mix_round", "gemm"}};
  if (!doc.contains(key)) {
    for (const auto& [name, value] : kBefore) {
      if (name == key) return std::string(value);
    }
  }
  if (!doc.contains(key) || doc.at(key).is_null()) return std::nullopt;
  const json& v = doc.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

SettingDiff diff_setting(const json& a, const json& b, const char* key) {
  const auto va = setting_value(a, key), vb = setting_value(b, key);
  auto shown = [](const std::optional<std::string>& v) { return v ? printable(*v, 200) : std::string("(absent)"); };
  return {key, shown(va), shown(vb), va != vb};
}

struct ReadGraph {
  std::string name;
  Spread step;
  std::optional<double> eager_ms, floor_ms;
  std::map<std::string, std::pair<double, int>> families;            // family (as in the file) -> (us, nodes)
  std::optional<std::map<std::string, std::set<std::string>>> arms;  // op -> the arms its nodes name (manifest)
  std::optional<ClockSummary> clocks;                                // absent or null in reports without them
};

// The graph's clocks as bench writes them (clock_report.h); nullopt where absent or null. A reason
// whose name no bit has is left out (compare_clocks weighs only the limits it names).
std::optional<ClockSummary> read_clocks(const json& g, const std::string& where, const Reader& r) {
  if (!g.contains("clocks") || g.at("clocks").is_null()) return std::nullopt;
  const json& c = g.at("clocks");
  const std::string cw = where + ".clocks";
  if (!c.is_object()) r.fail(cw, "not an object");
  ClockSummary s;
  s.samples = static_cast<size_t>(r.integer(c, "samples", cw));
  const json& sm = r.field(c, "sm_mhz", cw);
  if (!sm.is_object()) r.fail(cw, "\"sm_mhz\" is not an object");
  s.sm_median = static_cast<unsigned>(r.integer(sm, "median", cw + ".sm_mhz"));
  s.sm_min = static_cast<unsigned>(r.integer(sm, "min", cw + ".sm_mhz"));
  s.sm_max = static_cast<unsigned>(r.integer(sm, "max", cw + ".sm_mhz"));
  if (!(s.sm_min <= s.sm_median && s.sm_median <= s.sm_max))
    r.fail(cw + ".sm_mhz", "min <= median <= max does not hold");
  s.mem_median = static_cast<unsigned>(r.integer(c, "mem_mhz", cw));
  s.power_w_median = r.time(c, "power_w", cw);
  const json& held = r.field(c, "held_down", cw);
  if (!held.is_object()) r.fail(cw, "\"held_down\" is not an object");
  for (const auto& [name, n] : held.items()) {
    const int count = r.integer(held, name.c_str(), cw + ".held_down");
    if (static_cast<size_t>(count) > s.samples)
      r.fail(cw + ".held_down",
             fmt::format("\"{}\" counts more samples than the {} taken", printable(name, 40), s.samples));
    if (const uint64_t bit = clock_reason_bit(name); bit != 0) s.reasons.emplace_back(bit, static_cast<size_t>(count));
  }
  std::sort(s.reasons.begin(), s.reasons.end());
  return s;
}

// The manifest's node arms by op; nullopt without a manifest or without its node list (archived
// reports keep the manifest's summary and leave the nodes out).
std::optional<std::map<std::string, std::set<std::string>>> read_arms(const json& g, const std::string& where,
                                                                      const Reader& r) {
  if (!g.contains("manifest")) return std::nullopt;
  const std::string mw = where + ".manifest";
  const json& m = g.at("manifest");
  if (!m.is_object()) r.fail(mw, "not an object");
  if (!m.contains("nodes")) return std::nullopt;
  const json& nodes = m.at("nodes");
  if (!nodes.is_array()) r.fail(mw, "\"nodes\" is not a list");
  std::map<std::string, std::set<std::string>> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string nw = fmt::format("{}.nodes[{}]", mw, i);
    const json& n = nodes[i];
    if (!n.is_object()) r.fail(nw, "not an object");
    const json &op = r.field(n, "op", nw), &arm = r.field(n, "arm", nw);
    if (!op.is_string() || !arm.is_string()) r.fail(nw, "\"op\" and \"arm\" must be strings");
    out[op.get<std::string>()].insert(arm.get<std::string>());
  }
  return out;
}

std::vector<ArmDiff> diff_arms(const std::map<std::string, std::set<std::string>>& a,
                               const std::map<std::string, std::set<std::string>>& b) {
  std::set<std::string> ops;
  for (const auto& [op, v] : a) ops.insert(op);
  for (const auto& [op, v] : b) ops.insert(op);
  const std::set<std::string> none;
  std::vector<ArmDiff> out;
  for (const auto& op : ops) {
    const auto ia = a.find(op), ib = b.find(op);
    const std::set<std::string>& sa = ia == a.end() ? none : ia->second;
    const std::set<std::string>& sb = ib == b.end() ? none : ib->second;
    if (sa == sb || sa.empty() || sb.empty()) continue;  // an op of one report only shows in its families
    ArmDiff d;
    d.op = printable(op, 60);
    for (const auto& s : sa) d.old_arms.push_back(printable(s, 120));
    for (const auto& s : sb) d.new_arms.push_back(printable(s, 120));
    out.push_back(std::move(d));
  }
  return out;
}

ReadGraph read_graph(const json& g, size_t index, const Reader& r) {
  const std::string where = fmt::format("graphs[{}]", index);
  if (!g.is_object()) r.fail(where, "not an object");
  const json& kind = r.field(g, "kind", where);
  if (!kind.is_string()) r.fail(where, "\"kind\" is not a string");
  ReadGraph out;
  const std::string k = kind.get<std::string>();
  if (k == "decode") {
    out.name = fmt::format("decode b={}", r.integer(g, "batch", where));
  } else if (k == "prefill") {
    const int bucket = r.integer(g, "bucket", where);
    // Prefills after different histories are different graphs' workloads: the name keeps them apart.
    const int history = g.contains("history") ? r.integer(g, "history", where) : 0;
    const std::string after = history > 0 ? fmt::format(" after {} of history", history) : "";
    out.name = g.contains("sequences") && g.contains("tokens_per_sequence")
                   ? fmt::format("prefill {} x {} tokens{} (bucket {})", r.integer(g, "sequences", where),
                                 r.integer(g, "tokens_per_sequence", where), after, bucket)
                   : fmt::format("prefill bucket {}{}", bucket, after);
  } else {
    r.fail(where, fmt::format("\"kind\" is '{}', not decode or prefill", printable(k, 40)));
  }
  const json& step = r.field(g, "step_ms", where);
  if (!step.is_object()) r.fail(where, "\"step_ms\" is not an object");
  const std::string sw = where + ".step_ms";
  out.step = {r.time(step, "median", sw), r.time(step, "min", sw), r.time(step, "max", sw)};
  if (!(out.step.min <= out.step.median && out.step.median <= out.step.max))
    r.fail(sw, "min <= median <= max does not hold");
  out.eager_ms = r.optional_time(g, "eager_ms", where);
  out.floor_ms = r.optional_time(g, "floor_ms", where);
  if (g.contains("ops")) {
    const json& ops = g.at("ops");
    if (!ops.is_object()) r.fail(where, "\"ops\" is not an object");
    for (const auto& [family, v] : ops.items()) {
      const std::string fw = fmt::format("{}.ops[\"{}\"]", where, printable(family, 60));
      if (!v.is_object()) r.fail(fw, "not an object");
      const int nodes = v.contains("nodes") ? r.integer(v, "nodes", fw) : 0;
      out.families[family] = {r.time(v, "us", fw), nodes};
    }
  }
  out.arms = read_arms(g, where, r);
  out.clocks = read_clocks(g, where, r);
  return out;
}

struct ReadReport {
  std::vector<ReadGraph> graphs;
  std::unordered_map<std::string, size_t> index;  // graph name -> position in graphs
  const ReadGraph* find(const std::string& name) const {
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &graphs[it->second];
  }
};

ReadReport read_graphs(const json& doc, const Reader& r) {
  ReadReport out;
  const json& graphs = doc.at("graphs");
  for (size_t i = 0; i < graphs.size(); ++i) {
    ReadGraph g = read_graph(graphs[i], i, r);
    if (!out.index.emplace(g.name, out.graphs.size()).second)
      r.fail(fmt::format("graphs[{}]", i), fmt::format("a second '{}'", g.name));
    out.graphs.push_back(std::move(g));
  }
  return out;
}

bool interrupted(const json& doc) { return doc.contains("interrupted") && doc.at("interrupted") == true; }

std::vector<FamilyDiff> diff_families(const ReadGraph& a, const ReadGraph& b) {
  std::map<std::string, FamilyDiff> m;  // keyed by the names as the files hold them
  for (const auto& [f, v] : a.families) {
    m[f].family = printable(f, 60);
    m[f].old_us = v.first;
    m[f].old_nodes = v.second;
  }
  for (const auto& [f, v] : b.families) {
    m[f].family = printable(f, 60);
    m[f].new_us = v.first;
    m[f].new_nodes = v.second;
  }
  std::vector<FamilyDiff> out;
  for (auto& [f, d] : m) out.push_back(std::move(d));
  std::stable_sort(out.begin(), out.end(), [](const FamilyDiff& x, const FamilyDiff& y) {
    return std::fabs(x.delta_us()) > std::fabs(y.delta_us());
  });
  return out;
}

std::string_view diff_verdict_name(Verdict v) {
  switch (v) {
    case Verdict::only_a: return "only old";
    case Verdict::only_b: return "only new";
    default: return verdict_name(v);
  }
}

std::string percent(double delta, double base) {
  return base > 0 ? fmt::format("{:+.1f}%", 100.0 * delta / base) : std::string("-");
}

nlohmann::json spread_json(const std::optional<Spread>& s) {
  if (!s) return nullptr;
  return {{"median", s->median}, {"min", s->min}, {"max", s->max}};
}

nlohmann::json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

double GraphDiff::delta_ms() const { return old_step && new_step ? new_step->median - old_step->median : 0.0; }
double GraphDiff::noise_ms() const {
  return old_step && new_step ? std::max(old_step->width(), new_step->width()) : 0.0;
}

BenchDiff diff_bench_reports(const json& old_doc, const json& new_doc, const std::string& old_name,
                             const std::string& new_name) {
  const Reader ro(old_name), rn(new_name);
  check_report(old_doc, ro);
  check_report(new_doc, rn);
  BenchDiff d;
  for (const char* k : kSettings) d.settings.push_back(diff_setting(old_doc, new_doc, k));
  d.old_interrupted = interrupted(old_doc);
  d.new_interrupted = interrupted(new_doc);
  const ReadReport a = read_graphs(old_doc, ro), b = read_graphs(new_doc, rn);
  auto add = [&](const ReadGraph* ga, const ReadGraph* gb) {
    GraphDiff g;
    g.name = ga ? ga->name : gb->name;
    if (ga) g.old_step = ga->step, g.old_eager_ms = ga->eager_ms;
    if (gb) g.new_step = gb->step, g.new_eager_ms = gb->eager_ms;
    g.floor_ms = gb && gb->floor_ms ? gb->floor_ms : (ga ? ga->floor_ms : std::nullopt);
    g.verdict = ga && gb ? verdict(ga->step, gb->step) : (ga ? Verdict::only_a : Verdict::only_b);
    g.old_timed = ga && !ga->families.empty();
    g.new_timed = gb && !gb->families.empty();
    if (g.old_timed && g.new_timed) g.families = diff_families(*ga, *gb);
    if (ga && gb && ga->arms && gb->arms) g.arms = diff_arms(*ga->arms, *gb->arms);
    if (ga && gb && ga->clocks && gb->clocks) g.clocks_caution = compare_clocks(*ga->clocks, *gb->clocks, "old", "new");
    d.graphs.push_back(std::move(g));
  };
  for (const auto& ga : a.graphs) add(&ga, b.find(ga.name));
  for (const auto& gb : b.graphs) {
    if (!a.find(gb.name)) add(nullptr, &gb);
  }
  return d;
}

std::string format_bench_diff(const BenchDiff& d, const DiffFormat& f) {
  std::string out = "settings (old -> new where they differ; * marks those):\n";
  for (const auto& s : d.settings) {
    if (s.differs) {
      out += fmt::format("* {:<14} {} -> {}\n", s.name, s.old_value, s.new_value);
    } else if (s.old_value != "(absent)") {
      out += fmt::format("  {:<14} {}\n", s.name, s.old_value);
    }
  }
  if (d.old_interrupted || d.new_interrupted) {
    out += d.old_interrupted && d.new_interrupted
               ? "note: both reports were interrupted (Ctrl-C): they hold the graphs measured before\n"
               : fmt::format("note: the {} report was interrupted (Ctrl-C): it holds the graphs measured before\n",
                             d.old_interrupted ? "old" : "new");
  }
  out += fmt::format("\n{:<40} {:>28} {:>28} {:>18} {:>8} {}\n", "step (ms, median (min..max))", "old", "new", "change",
                     "noise", "verdict");
  bool single = false;
  for (const auto& g : d.graphs) {
    const bool both = g.old_step && g.new_step;
    single = single || (both && (g.old_step->width() == 0.0 || g.new_step->width() == 0.0));
    out += fmt::format(
        "{:<40} {:>28} {:>28} {:>18} {:>8} {}\n", g.name, format_spread(g.old_step, 3), format_spread(g.new_step, 3),
        both ? fmt::format("{:+.3f} ({})", g.delta_ms(), percent(g.delta_ms(), g.old_step->median)) : std::string("-"),
        both ? fmt::format("{:.3f}", g.noise_ms()) : std::string("-"), diff_verdict_name(g.verdict));
  }
  out +=
      "verdict: faster or slower when |new - old| exceeds the noise, the wider spread (max - min) of the two "
      "reports' repetitions; neutral otherwise\n";
  if (single) {
    out +=
        "note: a report timed with one repetition (min = median = max) has no spread, so the verdict rests on the "
        "other report's spread alone (or on none: then any change counts); run bench with --reps 3 or more on both "
        "for a verdict that means something\n";
  }
  for (const auto& g : d.graphs) {
    if (!g.clocks_caution.empty()) {
      out += fmt::format("caution: {}: {}: part of its change may be the clocks', not the code's\n", g.name,
                         g.clocks_caution);
    }
  }
  for (const auto& g : d.graphs) {
    if (!g.old_step || !g.new_step) continue;  // a graph of one report: nothing to compare
    if (!g.old_timed || !g.new_timed) {
      out += fmt::format(
          "\n{}: op families not timed in {} (bench --node-replays 0 writes none)\n", g.name,
          !g.old_timed && !g.new_timed ? "either report" : (g.old_timed ? "the new report" : "the old report"));
      continue;
    }
    std::vector<const FamilyDiff*> rows;
    for (const auto& fd : g.families) {
      if (f.all_families || std::fabs(fd.delta_us()) >= f.min_us || !fd.old_us || !fd.new_us) rows.push_back(&fd);
    }
    out += fmt::format("\n{}: op families (us a step, node medians summed), the largest change first", g.name);
    out += f.all_families ? ":\n" : fmt::format(", those that moved by {:g} us or more:\n", f.min_us);
    if (rows.empty()) {
      out += "  none\n";
    } else {
      out += fmt::format("  {:<24} {:>12} {:>12} {:>20} {:>11}\n", "family", "old us", "new us", "change", "nodes");
    }
    double old_sum = 0, new_sum = 0;
    for (const auto& fd : g.families) old_sum += fd.old_us.value_or(0), new_sum += fd.new_us.value_or(0);
    for (const FamilyDiff* fd : rows) {
      const auto us = [](const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : std::string("-"); };
      const std::string change = fd->old_us && fd->new_us
                                     ? fmt::format("{:+.1f} ({})", fd->delta_us(), percent(fd->delta_us(), *fd->old_us))
                                     : std::string(fd->old_us ? "only old" : "only new");
      out += fmt::format("  {:<24} {:>12} {:>12} {:>20} {:>11}\n", fd->family, us(fd->old_us), us(fd->new_us), change,
                         fmt::format("{} -> {}", fd->old_nodes, fd->new_nodes));
    }
    if (rows.size() < g.families.size()) {
      const size_t more = g.families.size() - rows.size();
      out += more == 1 ? std::string("  (1 more family moved by less; --all lists it)\n")
                       : fmt::format("  ({} more families moved by less; --all lists them)\n", more);
    }
    out += fmt::format("  {:<24} {:>12.1f} {:>12.1f} {:>20}\n", "(all families)", old_sum, new_sum,
                       fmt::format("{:+.1f} ({})", new_sum - old_sum, percent(new_sum - old_sum, old_sum)));
  }
  bool lt = false;
  for (const auto& g : d.graphs) {
    if (g.arms.empty()) continue;
    out += fmt::format("\n{}: ops whose nodes ran other arms (old -> new):\n", g.name);
    for (const auto& a : g.arms) {
      std::string olds, news;
      for (const auto& s : a.old_arms) olds += (olds.empty() ? "" : "; ") + s;
      for (const auto& s : a.new_arms) news += (news.empty() ? "" : "; ") + s;
      out += fmt::format("  {}: {} -> {}\n", a.op, olds, news);
      for (const auto& s : a.old_arms) lt = lt || s.rfind("lt algo=", 0) == 0;
      for (const auto& s : a.new_arms) lt = lt || s.rfind("lt algo=", 0) == 0;
    }
  }
  if (lt) {
    out +=
        "note: cuBLASLt's algorithm choices differ between the runs (each process times its own), so those nodes' "
        "times and bytes are not from the same kernels; give both runs `--lt-choices FILE` (bench, ab) to run the "
        "same ones\n";
  }
  return out;
}

nlohmann::json bench_diff_json(const BenchDiff& d) {
  json settings = json::array(), graphs = json::array();
  for (const auto& s : d.settings) {
    settings.push_back({{"name", s.name}, {"old", s.old_value}, {"new", s.new_value}, {"differs", s.differs}});
  }
  for (const auto& g : d.graphs) {
    json fams = json::array(), arms = json::array();
    for (const auto& a : g.arms) arms.push_back({{"op", a.op}, {"old", a.old_arms}, {"new", a.new_arms}});
    for (const auto& f : g.families) {
      fams.push_back({{"family", f.family},
                      {"old_us", opt_json(f.old_us)},
                      {"new_us", opt_json(f.new_us)},
                      {"delta_us", f.delta_us()},
                      {"old_nodes", f.old_nodes},
                      {"new_nodes", f.new_nodes}});
    }
    graphs.push_back({{"name", g.name},
                      {"old_step_ms", spread_json(g.old_step)},
                      {"new_step_ms", spread_json(g.new_step)},
                      {"old_eager_ms", opt_json(g.old_eager_ms)},
                      {"new_eager_ms", opt_json(g.new_eager_ms)},
                      {"floor_ms", opt_json(g.floor_ms)},
                      {"delta_ms", g.delta_ms()},
                      {"noise_ms", g.noise_ms()},
                      {"verdict", std::string(diff_verdict_name(g.verdict))},
                      {"old_timed", g.old_timed},
                      {"new_timed", g.new_timed},
                      {"families", fams},
                      {"arms", arms},
                      {"clocks_caution", g.clocks_caution.empty() ? json(nullptr) : json(g.clocks_caution)}});
  }
  return {{"settings", settings},
          {"graphs", graphs},
          {"old_interrupted", d.old_interrupted},
          {"new_interrupted", d.new_interrupted}};
}

}  // namespace sg::cli
