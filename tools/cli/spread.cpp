// spread.cpp: median, min and max of timings (see spread.h).
#include "tools/cli/spread.h"

#include <algorithm>

#include "engine/error.h"

namespace sg::cli {

Spread spread(std::vector<double> v) {
  require(!v.empty(), "spread of no values");
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace sg::cli
