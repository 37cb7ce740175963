// cmd_kernels.cpp: `stepgraph kernels`: every arm of every GDN op on the standard shapes (or
// --shape), graph replays, interleaved repetitions, bytes and fraction of the bandwidth floor.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "tools/cli/commands.h"
#include "tools/cli/kernel_bench.h"

namespace sg::cli {
namespace {
constexpr double kFloorGBps = 4300.0;

struct KernelsOptions {
  std::vector<std::string> shapes;
  std::vector<std::string> ops;
  bench::BenchConfig cfg;
  std::string json;
};
}  // namespace

void register_kernels(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "kernels",
      "Time every arm of the GDN ops (conv.update, conv.fwd, postconv, gdn.prefill, gdn.decode) on standard shapes: each arm captured in a CUDA "
      "graph (decode: 24 rotating buffer sets, as the 24 GDN layers of a step), timed interleaved over repetitions "
      "(median, min, max per launch), outputs hashed (arms must agree byte for byte), bytes moved and the fraction of "
      "the 4.3 TB/s floor printed beside each time.");
  static KernelsOptions o;
  cmd->add_option("--shape", o.shapes, "Shapes (default: the four standard ones). MODEL-decode-bN or MODEL-prefill-SxL, "
                                       "MODEL in 4b, 27b, tiny")
      ->delimiter(',');
  cmd->add_option("--op", o.ops, "Only these ops (conv.update, conv.fwd, postconv, gdn.prefill, gdn.decode)")->delimiter(',');
  cmd->add_option("--reps", o.cfg.reps, "Interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--launches", o.cfg.min_launches, "Kernel launches per repetition")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--json", o.json, "Also write the results to this JSON file");
  cmd->callback([&action] {
    action = [] {
      o.cfg.ops = o.ops;  // --op (empty: every op that applies to the shape)
      auto shapes = o.shapes.empty() ? bench::standard_shapes() : o.shapes;
      std::vector<bench::KernelShape> parsed;
      for (const auto& s : shapes) parsed.push_back(bench::parse_shape(s));  // validate all first
      DeviceInfo dev = probe_device();
      require(dev.ok, "stepgraph kernels needs a CUDA device: {}", dev.reason);
      fmt::print("device: {}\nrule: median of {} interleaved repetitions (min..max); decode shapes rotate {} buffer "
                 "sets; floor = bytes / 4.3 TB/s\n\n",
                 dev.describe(), o.cfg.reps, o.cfg.sets);
      nlohmann::json out = nlohmann::json::array();
      int mismatches = 0;
      for (const auto& s : parsed) {
        auto rs = bench::run_kernel_bench(s, o.cfg, [](const std::string& m) { fmt::print(stderr, "{}\n", m); });
        fmt::print("{}\n", s.name);
        fmt::print("  {:<12} {:<22} {:<28} {:>12} {:>8} {:>10} {:>19} {:>10} {:>8} {:>8} {}\n", "op", "arm", "kernel",
                   "grid", "block", "median_us", "min..max", "bytes", "GB/s", "%floor", "bytes==ref");
        for (const auto& r : rs) {
          const double gbps = r.bytes / (r.median_us * 1e3);
          fmt::print("  {:<12} {:<22} {:<28} {:>12} {:>8} {:>10.2f} {:>19} {:>10} {:>8.0f} {:>7.1f}% {}\n", r.op, r.arm,
                     r.kernel, fmt::format("{}x{}x{}", r.grid.x, r.grid.y, r.grid.z),
                     fmt::format("{}", r.block.x), r.median_us, fmt::format("{:.2f}..{:.2f}", r.min_us, r.max_us),
                     format_bytes(r.bytes), gbps, 100 * gbps / kFloorGBps, r.hash_matches_reference ? "yes" : "NO");
          mismatches += !r.hash_matches_reference;
          out.push_back({{"shape", s.name}, {"op", r.op}, {"arm", r.arm}, {"kernel", r.kernel},
                         {"grid", {r.grid.x, r.grid.y, r.grid.z}}, {"block", r.block.x}, {"median_us", r.median_us},
                         {"min_us", r.min_us}, {"max_us", r.max_us}, {"bytes", r.bytes}, {"gbps", gbps},
                         {"floor_fraction", gbps / kFloorGBps}, {"hash", fmt::format("{:016x}", r.hash)},
                         {"bytes_match_reference", r.hash_matches_reference}});
        }
        fmt::print("\n");
      }
      if (!o.json.empty()) {
        std::ofstream f(o.json);
        require(static_cast<bool>(f), "cannot write {}", o.json);
        f << nlohmann::json{{"device", dev.describe()}, {"results", out}}.dump(2) << "\n";
      }
      if (mismatches) fmt::print("{} arm(s) did NOT reproduce the reference arm's bytes\n", mismatches);
      return mismatches ? 3 : 0;
    };
  });
}

}  // namespace sg::cli
