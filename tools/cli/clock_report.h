// clock_report.h: what the timing commands say about the GPU's clocks (engine/gpu_clocks.h): a
// clock summary as the JSON that bench, ab and kernels write (samples, the SM clock's median and
// range, the memory clock, the power and the samples per limiting reason), and the cautions for
// rows measured one after another and read side by side (kernels' arms of one op).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/gpu_clocks.h"

namespace sg::cli {

// {"samples", "sm_mhz": {"median", "min", "max"}, "mem_mhz", "power_w", "held_down": {reason: samples}}
nlohmann::json clocks_json(const ClockSummary& c);
// The same, and null for no summary (clocks not sampled).
nlohmann::json clocks_json(const std::optional<ClockSummary>& c);

struct NamedClocks {
  std::string name;  // the row ("fast", "wgmma-t", ...)
  ClockSummary clocks;
};
// For each row after the first whose clocks differ from the first row's (compare_clocks, the first
// row named first): "<row>: <the difference>". Rows without samples are left out, and so is every
// row when the first has none.
std::vector<std::string> clock_cautions(const std::vector<NamedClocks>& rows);

}  // namespace sg::cli
