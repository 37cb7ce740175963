// clock_json.cpp: a clock summary as JSON (clock_json.h).
#include "tools/cli/clock_json.h"

#include <nlohmann/json.hpp>

namespace sg::cli {

nlohmann::json clocks_json(const ClockSummary& c) {
  nlohmann::json held = nlohmann::json::object();
  for (const auto& [bit, n] : c.reasons) held[clock_reason_name(bit)] = n;
  return {{"samples", c.samples},
          {"sm_mhz", {{"median", c.sm_median}, {"min", c.sm_min}, {"max", c.sm_max}}},
          {"mem_mhz", c.mem_median},
          {"power_w", c.power_w_median},
          {"held_down", held}};
}

}  // namespace sg::cli
