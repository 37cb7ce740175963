// drift_stats.h: what `stepgraph drift` reports: how far side B's logits and greedy tokens move
// from side A's over a long generation when both consume A's tokens (teacher forcing on A's greedy
// choice). Per position: the normalised max logit error max|b - a| / max|a| and whether the two
// greedy tokens agree; per window of positions: the largest and the mean error and the agreement;
// over the run: the first position where the tokens differ (where a free-running B would first
// leave A's text). Pure host logic.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace sg::cli {

struct DriftWindow {
  int64_t first = 0, count = 0;  // positions first .. first + count - 1 (0: the prompt's last token)
  double max_err = 0, sum_err = 0;
  int64_t agree = 0;  // positions whose greedy tokens agree
  double mean_err() const { return count ? sum_err / static_cast<double>(count) : 0.0; }
};

class DriftStats {
 public:
  explicit DriftStats(int64_t window);  // window >= 1 positions
  // One position: both sides' logits [V] and greedy tokens. Throws Error on a size mismatch or
  // V < 1. A non-finite error (NaN or infinite logits) is recorded as infinite.
  void add(const std::vector<float>& a, const std::vector<float>& b, int64_t token_a, int64_t token_b);

  int64_t positions() const { return total_.count; }
  int64_t first_divergence() const { return first_divergence_; }  // -1: none
  // Distinct tokens in A's text (a text of few distinct tokens makes agreement easy).
  int64_t distinct_tokens() const { return static_cast<int64_t>(tokens_a_.size()); }
  const DriftWindow& total() const { return total_; }
  const std::vector<DriftWindow>& windows() const { return windows_; }

 private:
  int64_t window_;
  int64_t first_divergence_ = -1;
  DriftWindow total_;
  std::vector<DriftWindow> windows_;
  std::set<int64_t> tokens_a_;
};

// The normalised max error max_i |b_i - a_i| / max_i |a_i| (0 when both are all zeros; infinite
// when a is all zeros and b is not, or when any value is not finite).
double normalised_max_error(const std::vector<float>& a, const std::vector<float>& b);

// The table `stepgraph drift` prints (a header line per side is the command's).
std::string format_drift(const DriftStats& s);
nlohmann::json drift_json(const DriftStats& s);

}  // namespace sg::cli
