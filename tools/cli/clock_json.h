// clock_json.h: a clock summary (engine/gpu_clocks.h) as the JSON that bench and ab write: samples,
// the SM clock's median and range, the memory clock, the power and the samples per limiting reason.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "engine/gpu_clocks.h"

namespace sg::cli {

// {"samples", "sm_mhz": {"median", "min", "max"}, "mem_mhz", "power_w", "held_down": {reason: samples}}
nlohmann::json clocks_json(const ClockSummary& c);

}  // namespace sg::cli
