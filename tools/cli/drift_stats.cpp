// drift_stats.cpp: see drift_stats.h.
#include "tools/cli/drift_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace sg::cli {

double normalised_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  require(a.size() == b.size(), "drift: logits of {} and {} values", a.size(), b.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return kInf;
    diff = std::max(diff, std::fabs(double(b[i]) - a[i]));
    scale = std::max(scale, std::fabs(double(a[i])));
  }
  if (scale == 0) return diff == 0 ? 0.0 : kInf;
  return diff / scale;
}

DriftStats::DriftStats(int64_t window) : window_(window) { require(window >= 1, "drift: window must be >= 1"); }

void DriftStats::add(const std::vector<float>& a, const std::vector<float>& b, int64_t token_a, int64_t token_b) {
  require(!a.empty(), "drift: empty logits");
  const double e = normalised_max_error(a, b);
  const int64_t pos = total_.count;
  if (windows_.empty() || windows_.back().count == window_) windows_.push_back(DriftWindow{pos});
  const bool agree = token_a == token_b;
  tokens_a_.insert(token_a);
  if (!agree && first_divergence_ < 0) first_divergence_ = pos;
  for (DriftWindow* w : {&windows_.back(), &total_}) {
    ++w->count;
    w->max_err = std::max(w->max_err, e);
    w->sum_err += e;
    w->agree += agree;
  }
}

namespace {
std::string row(const std::string& label, const DriftWindow& w) {
  return fmt::format("{:<16} {:>12.3e} {:>12.3e} {:>10.2f}%\n", label, w.max_err, w.mean_err(),
                     w.count ? 100.0 * static_cast<double>(w.agree) / static_cast<double>(w.count) : 0.0);
}
}  // namespace

std::string format_drift(const DriftStats& s) {
  std::string out = fmt::format("{:<16} {:>12} {:>12} {:>11}\n", "positions", "max error", "mean error", "top-1 agree");
  for (const DriftWindow& w : s.windows()) out += row(fmt::format("{}..{}", w.first, w.first + w.count - 1), w);
  out += row("all", s.total());
  out += fmt::format("A's text: {} distinct tokens in {} positions\n", s.distinct_tokens(), s.positions());
  out +=
      s.first_divergence() < 0
          ? fmt::format("greedy tokens: equal at all {} positions\n", s.positions())
          : fmt::format("greedy tokens: first differ at position {} of {} (a free-running B leaves A's text there)\n",
                        s.first_divergence(), s.positions());
  return out;
}

nlohmann::json drift_json(const DriftStats& s) {
  auto win = [](const DriftWindow& w) {
    const double inf = std::numeric_limits<double>::infinity();
    auto num = [&](double x) { return x == inf ? nlohmann::json("inf") : nlohmann::json(x); };
    return nlohmann::json{{"first", w.first},
                          {"positions", w.count},
                          {"max_error", num(w.max_err)},
                          {"mean_error", num(w.mean_err())},
                          {"top1_agree", w.agree}};
  };
  nlohmann::json windows = nlohmann::json::array();
  for (const DriftWindow& w : s.windows()) windows.push_back(win(w));
  return {
      {"positions", s.positions()},
      {"distinct_tokens", s.distinct_tokens()},
      {"first_divergence", s.first_divergence() < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.first_divergence())},
      {"total", win(s.total())},
      {"windows", windows}};
}

}  // namespace sg::cli
