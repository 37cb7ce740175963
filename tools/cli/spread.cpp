// spread.cpp: median, min and max of timings (see spread.h).
#include "tools/cli/spread.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/error.h"

namespace sg::cli {

Spread spread(std::vector<double> v) {
  require(!v.empty(), "spread of no values");
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

std::string format_spread(const std::optional<Spread>& s, int precision) {
  if (!s) return "-";
  return fmt::format("{:.{}f} ({:.{}f}..{:.{}f})", s->median, precision, s->min, precision, s->max, precision);
}

}  // namespace sg::cli
