// arm_tuning.cpp: see arm_tuning.h.
#include "graphs/arm_tuning.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/error.h"

namespace sg {

ArmTuning tune_arms(const ArmSelection& start, std::span<const Op> ops,
                    const std::function<std::vector<size_t>(Op op, const ArmSelection& current)>& candidates,
                    const std::function<double(const ArmSelection&)>& time) {
  ArmTuning out;
  out.arms = start;
  std::map<std::string, double> seen;  // describe() -> ms
  auto timed = [&](const ArmSelection& s) {
    const std::string key = s.describe();
    auto it = seen.find(key);
    if (it != seen.end()) return it->second;
    const double ms = time(s);
    require(ms >= 0, "arm tuning: a step time of {} ms for {}", ms, key);
    ++out.timed;
    return seen[key] = ms;
  };
  for (Op op : ops) {
    std::vector<size_t> arms = candidates(op, out.arms);
    if (arms.size() < 2) continue;
    // The arm chosen so far first: it keeps its place on a tie.
    const size_t current = out.arms.index(op);
    const auto cur = std::find(arms.begin(), arms.end(), current);
    if (cur != arms.end()) std::rotate(arms.begin(), cur, cur + 1);
    const size_t first = out.timings.size();
    size_t best = arms.front();
    double best_ms = 0;
    for (size_t i = 0; i < arms.size(); ++i) {
      ArmSelection s = out.arms;
      s.set_index(op, arms[i]);
      const double ms = timed(s);
      out.timings.push_back({std::string(op_name(op)), std::string(op_info(op).arms[arms[i]]), ms, false});
      if (i == 0 || ms < best_ms) {
        best = arms[i];
        best_ms = ms;
      }
    }
    out.arms.set_index(op, best);
    for (size_t i = first; i < out.timings.size(); ++i) {
      out.timings[i].chosen = out.timings[i].arm == op_info(op).arms[best];
    }
  }
  return out;
}

std::string describe_tuning(const std::vector<ArmTiming>& timings) {
  std::string out, op;
  for (const ArmTiming& t : timings) {
    if (t.op != op) {
      out += fmt::format("{}{}: ", out.empty() ? "" : "; ", t.op);
      op = t.op;
    } else {
      out += ", ";
    }
    out += fmt::format("{} {:.3f} ms{}", t.arm, t.ms, t.chosen ? " (kept)" : "");
  }
  return out;
}

}  // namespace sg
