// spread.h: the median, minimum and maximum of a set of timings (repetitions of a timed loop).
// Pure host code (the commands' reports and the CPU tests use it).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace sg::cli {

struct Spread {
  double median = 0, min = 0, max = 0;
  double width() const { return max - min; }  // max - min: the repetitions' noise
};
// The upper median for an even count (v[n / 2] after sorting). v not empty.
Spread spread(std::vector<double> v);

// "median (min..max)" with `precision` decimals; "-" for no spread.
std::string format_spread(const std::optional<Spread>& s, int precision);

}  // namespace sg::cli
