// ab_compare.cpp: samples, verdicts and the report of `stepgraph ab` (see ab_compare.h).
#include "tools/cli/ab_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "tools/cli/clock_report.h"

namespace sg::cli {
namespace {

nlohmann::json side_json(const std::vector<double>& v, const std::optional<Spread>& s) {
  if (!s) return nullptr;
  return {{"median", s->median}, {"min", s->min}, {"max", s->max}, {"samples", v}};
}

nlohmann::json row_json(const ComparedRow& r) {
  return {{"name", r.name},   {"a", side_json(r.a, r.sa)}, {"b", side_json(r.b, r.sb)},
          {"diff", r.diff()}, {"noise", r.noise()},        {"verdict", std::string(verdict_name(r.v))}};
}

std::string hash_text(uint64_t h) { return fmt::format("{:016x}", h); }

std::string row_line(const ComparedRow& r, int precision) {
  const bool both = r.sa && r.sb;
  return fmt::format("{:<22} {:>28} {:>28} {:>10} {:>9} {}\n", r.name, format_spread(r.sa, precision),
                     format_spread(r.sb, precision), both ? fmt::format("{:+.{}f}", r.diff(), precision) : "-",
                     both ? fmt::format("{:.{}f}", r.noise(), precision) : "-", verdict_name(r.v));
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::faster: return "faster";
    case Verdict::slower: return "slower";
    case Verdict::neutral: return "neutral";
    case Verdict::only_a: return "only A";
    case Verdict::only_b: return "only B";
  }
  return "?";
}

Verdict verdict(const Spread& a, const Spread& b) {
  const double noise = std::max(a.width(), b.width());
  const double d = b.median - a.median;
  if (std::fabs(d) <= noise) return Verdict::neutral;
  return d < 0 ? Verdict::faster : Verdict::slower;
}

double ComparedRow::diff() const { return sa && sb ? sb->median - sa->median : 0.0; }
double ComparedRow::noise() const { return sa && sb ? std::max(sa->width(), sb->width()) : 0.0; }

ComparedRow compare_row(std::string name, std::vector<double> a, std::vector<double> b) {
  ComparedRow r;
  r.name = std::move(name);
  r.a = std::move(a);
  r.b = std::move(b);
  if (!r.a.empty()) r.sa = spread(r.a);
  if (!r.b.empty()) r.sb = spread(r.b);
  if (r.sa && r.sb) {
    r.v = verdict(*r.sa, *r.sb);
  } else {
    r.v = r.sa ? Verdict::only_a : Verdict::only_b;
  }
  return r;
}

std::vector<ComparedRow> compare_families(const FamilySamples& a, const FamilySamples& b) {
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  std::vector<ComparedRow> rows;
  for (const auto& n : names) {
    auto find = [&](const FamilySamples& f) {
      auto it = f.find(n);
      return it == f.end() ? std::vector<double>{} : it->second;
    };
    ComparedRow r = compare_row(n, find(a), find(b));
    if (r.sa || r.sb) rows.push_back(std::move(r));
  }
  auto size = [](const ComparedRow& r) { return std::max(r.sa ? r.sa->median : 0.0, r.sb ? r.sb->median : 0.0); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const ComparedRow& x, const ComparedRow& y) { return size(x) > size(y); });
  return rows;
}

std::string clocks_caution(const AbReport& r) {
  if (!r.a.clocks || !r.b.clocks) return "";
  const std::string d = compare_clocks(*r.a.clocks, *r.b.clocks);
  if (d.empty()) return "";
  return d +
         ": part of B - A may be the clocks' (a selection whose own kernels draw the power that holds its clock "
         "down pays that as part of its cost; otherwise run the comparison again)";
}

std::string format_ab_report(const AbReport& r) {
  std::string out;
  out += fmt::format(
      "graph: {} of {}; {} repetitions, A then B in each: {} replays timed with CUDA events, then {} "
      "replays under CUPTI\n",
      r.graph, r.preset, r.reps, r.replays, r.node_replays);
  if (r.planned_reps > r.reps) {
    out += fmt::format("interrupted (SIGINT) after {} of {} repetitions: the comparison below covers those\n", r.reps,
                       r.planned_reps);
  }
  out += fmt::format("A: {}\n   arms {}\n   settings {}\n", r.a.selection, r.a.arms, r.a.settings);
  out += fmt::format("B: {}\n   arms {}\n   settings {}\n", r.b.selection, r.b.arms, r.b.settings);
  out +=
      "verdict (B against A): faster or slower when |B median - A median| exceeds the noise, the wider spread "
      "(max - min) of the two sides; neutral otherwise\n\n";
  out += fmt::format("{:<22} {:>28} {:>28} {:>10} {:>9} {}\n", "", "A median (min..max)", "B median (min..max)",
                     "B - A", "noise", "verdict");
  out += row_line(r.step, 4);
  out += "per op family (us per step: node medians summed, CUPTI):\n";
  for (const auto& f : r.families) out += row_line(f, 1);
  if (r.a.clocks && r.b.clocks) {
    out += fmt::format("\nclocks during the event-timed replays (NVML):\n  A: {}\n  B: {}\n",
                       describe_clocks(*r.a.clocks), describe_clocks(*r.b.clocks));
    if (const std::string c = clocks_caution(r); !c.empty()) out += "caution: " + c + "\n";
  } else if (!r.clocks_unavailable.empty()) {
    out += fmt::format("\nclocks: not sampled ({})\n", r.clocks_unavailable);
  }
  out += fmt::format("\ntokens of {} greedy steps: A {} B {}: {}\n", r.hash_steps, hash_text(r.a.token_hash),
                     hash_text(r.b.token_hash), r.tokens_equal() ? "equal" : "DIFFERENT");
  out += fmt::format("logits bytes of those steps: A {} B {}: {}\n", hash_text(r.a.logits_hash),
                     hash_text(r.b.logits_hash), r.logits_equal() ? "equal" : "DIFFERENT");
  if (r.hashes_must_match) {
    out += r.hash_failure() ? "error: A and B run the same arithmetic on this graph (arms and pdl keep the bytes), "
                              "so their hashes must be equal: an arm or a kernel's PDL wait is wrong\n"
                            : "A and B run the same arithmetic on this graph and differ at most in arms or pdl, which "
                              "keep the bytes: equal hashes are required, and they are\n";
  } else {
    out +=
        "A and B run different settings on this graph, which change the arithmetic within a written tolerance: "
        "the hashes may differ\n";
  }
  int faster = 0, slower = 0;
  for (const auto& f : r.families) {
    faster += f.v == Verdict::faster;
    slower += f.v == Verdict::slower;
  }
  out += fmt::format(
      "\nsummary: whole step: B {} against A ({:+.4f} ms, {:+.1f}%; noise {:.4f} ms); op families: {} "
      "faster, {} slower, {} neutral or on one side only; hashes {}\n",
      verdict_name(r.step.v), r.step.diff(),
      r.step.sa && r.step.sa->median > 0 ? 100 * r.step.diff() / r.step.sa->median : 0.0, r.step.noise(), faster,
      slower, static_cast<int>(r.families.size()) - faster - slower,
      r.tokens_equal() && r.logits_equal() ? "equal" : "different");
  return out;
}

nlohmann::json ab_json(const AbReport& r) {
  auto side = [](const AbSide& s) {
    return nlohmann::json{{"selection", s.selection},
                          {"arms", s.arms},
                          {"settings", s.settings},
                          {"token_hash", hash_text(s.token_hash)},
                          {"logits_hash", hash_text(s.logits_hash)}};
  };
  nlohmann::json fam = nlohmann::json::array();
  for (const auto& f : r.families) fam.push_back(row_json(f));
  const std::string caution = clocks_caution(r);
  nlohmann::json clocks = {
      {"a", clocks_json(r.a.clocks)},
      {"b", clocks_json(r.b.clocks)},
      {"caution", caution.empty() ? nlohmann::json(nullptr) : nlohmann::json(caution)},
      {"not_sampled", r.clocks_unavailable.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.clocks_unavailable)}};
  return {{"device", r.device},
          {"preset", r.preset},
          {"graph", r.graph},
          {"reps", r.reps},
          {"interrupted", r.planned_reps > r.reps},
          {"replays", r.replays},
          {"node_replays", r.node_replays},
          {"verdict_rule",
           "B against A: faster/slower when |B median - A median| > max(A max - A min, B max - B min), "
           "else neutral"},
          {"a", side(r.a)},
          {"b", side(r.b)},
          {"step_ms", row_json(r.step)},
          {"families_us", fam},
          {"clocks", clocks},
          {"hashes",
           {{"steps", r.hash_steps},
            {"tokens_equal", r.tokens_equal()},
            {"logits_equal", r.logits_equal()},
            {"must_match", r.hashes_must_match},
            {"failure", r.hash_failure()}}}};
}

}  // namespace sg::cli
