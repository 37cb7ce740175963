// cmd_kernels.cpp: `stepgraph kernels`: every arm of every GDN op on the standard shapes (or
// --shape), graph replays, interleaved repetitions, bytes and fraction of the bandwidth floor;
// decode shapes add conv.update's floor probes (rows marked floor:..., no bytes); under each shape,
// each op's GPU clocks during its rows' timed replays, with a caution for a row that ran at others.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "engine/text.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/clock_report.h"
#include "tools/cli/commands.h"
#include "tools/cli/kernel_bench.h"
#include "tools/cli/sigint.h"

namespace sg::cli {
namespace {

// Throws sg::Error "OPTION: 'X' is given twice" for an entry that appears twice in a list option.
template <class T>
void reject_repeats(const std::vector<T>& list, std::string_view option) {
  for (size_t i = 0; i < list.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (list[j] == list[i])
        throw Error(fmt::format("{}: '{}' is given twice", option, printable(fmt::format("{}", list[i]))));
    }
  }
}

// Under a shape's table: each op's clocks over its rows' timed replays, and a caution for a row that
// ran at other clocks than the op's first row (its time is then not only its kernel's).
void print_op_clocks(const std::vector<bench::ArmResult>& rs) {
  for (size_t i = 0; i < rs.size();) {
    size_t j = i;
    std::vector<ClockSample> all;
    std::vector<NamedClocks> rows;
    for (; j < rs.size() && rs[j].op == rs[i].op; ++j) {
      all.insert(all.end(), rs[j].clocks.begin(), rs[j].clocks.end());
      rows.push_back({rs[j].arm, summarize_clocks(rs[j].clocks)});
    }
    fmt::print("  {} clocks: {}\n", rs[i].op, describe_clocks(summarize_clocks(all)));
    for (const std::string& c : clock_cautions(rows)) fmt::print("  caution: {}: {}\n", rs[i].op, c);
    i = j;
  }
}

constexpr double kFloorGBps = 4300.0;
constexpr double kFloorTflops = 790.0;  // what a bf16 GEMM reaches on the H200

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
      "Time every arm of the GDN ops (conv.update, conv.fwd, postconv, gdn.prefill, gdn.decode, and gdn.decode.bf16 "
      "with a bf16 SSM state) on standard shapes: "
      "each arm captured in a CUDA "
      "graph (decode: 24 rotating buffer sets, as the 24 GDN layers of a step), timed interleaved over repetitions "
      "(median, min, max per launch), outputs hashed (arms must agree byte for byte), bytes moved and the fraction of "
      "the 4.3 TB/s floor printed beside each time. Decode shapes also time two probe kernels on the conv.update fast "
      "arm's grid, measured the same way (rows floor:empty-grid/vN: an empty kernel; floor:slot+state/vN: each thread "
      "reads slots[row], then one 16-byte word of that slot's state row, and stores it back): the latency floor of "
      "a slot-indexed update, not arms (no bytes, no hash). Prefill shapes also time delta_rule.prefill's forms "
      "(scan, chunked, mma, wgmma, wgmma-t where they run): values of the --delta-prefill setting, not arms, so "
      "each is compared with the scan by the L2-normalised error of its outputs (bf16, at most 8e-3) and final "
      "states (f32, at most 1.1e-4), and its TFLOP/s against the 790 a bf16 GEMM reaches (the chunked WY "
      "products); and attention.prefill's forms (simt, mma, wgmma where they run) with the preset's attention heads, "
      "compared with simt by the L2-normalised error of their outputs (at most 3.2e-2: each within 2^-6 of the f32 "
      "reference), with TFLOP/s on the causal q K^T and P V products. Every shape also times each projection "
      "weight of the preset (gdn.in_proj, gdn.out_proj, attn.qkv_proj, attn.o_proj, mlp.gate_up, mlp.down, lm_head) "
      "at the rows the step gives it (prefill: every token, and one row a sequence for lm_head) through the --gemm "
      "forms (cublas; at most 32 rows lt: cuBLASLt's fastest heuristic algorithm timed on the shape, and skinny: the "
      "tensor-core weight-streaming kernel with the model's block rows and splits, the weights rotating so that "
      "each launch reads its W from memory; above 32 rows wgmma: the own warpgroup GEMM, and mlp.gate_up+swiglu: "
      "cublas followed by the swiglu kernel against "
      "the wgmma GEMM with SwiGLU in its epilogue), compared with the first row by the L2-normalised error of the "
      "output (at most 1e-2). Under each shape, each op's GPU clocks during its rows' timed replays (NVML), with a "
      "caution "
      "for a row that ran at other clocks than the op's first row.");
  static KernelsOptions o;
  cmd->add_option("--shape", o.shapes,
                  "Shapes (default: the four standard ones). MODEL-decode-bN or MODEL-prefill-SxL, "
                  "MODEL in 4b, 27b, tiny")
      ->delimiter(',');
  cmd->add_option(
         "--op", o.ops,
         "Only these ops (conv.update, conv.fwd, postconv, gdn.prefill, gdn.decode, gdn.decode.bf16: the "
         "same arms with a bf16 SSM state, the ssm-state setting; delta_rule.prefill: the forms of the "
         "--delta-prefill setting, prefill shapes; attention.prefill: the forms of the --attn-prefill setting, "
         "prefill shapes; gemm: each projection weight at the shape's rows through the forms of the --gemm "
         "setting, and on prefill shapes gate_up with its SwiGLU)")
      ->delimiter(',')
      ->check(CLI::IsMember({"conv.update", "conv.fwd", "postconv", "gdn.prefill", "gdn.decode", "gdn.decode.bf16",
                             "delta_rule.prefill", "attention.prefill", "gemm"}));
  cmd->add_option("--reps", o.cfg.reps, "Interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--launches", o.cfg.min_launches, "Kernel launches per repetition")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--conv-update-channels", o.cfg.conv_update_channels,
                  "conv.update fast: time these channels per thread V (2, 4, 8; e.g. 2,4,8), one row fast/vN each, "
                  "with the floor probes of each V's grid (default: the contract's pick from the shape, "
                  "conv_update_fast_channels in kernels/contracts.h; '(pick)' marks it in a sweep). Every V gives "
                  "the same bytes")
      ->delimiter(',')
      ->check(CLI::IsMember({2, 4, 8}));
  cmd->add_option("--conv-update-blocks", o.cfg.conv_update_blocks,
                  "conv.update fast: time each V at these threads per block (128, 256, 512; e.g. 128,512), rows "
                  "fast/vN/bB with their floor probes (default: 128 only). Every block size gives the same bytes")
      ->delimiter(',')
      ->check(CLI::IsMember({128, 256, 512}));
  cmd->add_option("--json", o.json,
                  "Also write the results to this JSON file (probe rows have \"probe\": true and "
                  "null bytes, GB/s, floor fraction and hash; a setting's rows have \"setting\": true, "
                  "\"compared_with\", \"out_error\", \"state_error\", their tolerances and \"within_tolerance\"; "
                  "rows with a FLOPs count have \"flops\", \"tflops\" and \"flops_floor_fraction\"; grid and "
                  "block are null where the launch is a library's or several kernels')");
  cmd->callback([&action] {
    action = [] {
      // A list entry given twice would be timed twice under one name: refused.
      reject_repeats(o.shapes, "--shape");
      reject_repeats(o.ops, "--op");
      reject_repeats(o.cfg.conv_update_channels, "--conv-update-channels");
      reject_repeats(o.cfg.conv_update_blocks, "--conv-update-blocks");
      o.cfg.ops = o.ops;  // --op (empty: every op that applies to the shape)
      auto shapes = o.shapes.empty() ? bench::standard_shapes() : o.shapes;
      std::vector<bench::KernelShape> parsed;
      for (const auto& s : shapes) parsed.push_back(bench::parse_shape(s));  // validate all first
      check_writable(o.json, "--json");  // before the run, so that its results are never lost
      DeviceInfo dev = probe_device();
      if (!dev.ok) throw Error(fmt::format("stepgraph kernels times CUDA kernels, so it needs a GPU: {}", dev.reason));
      fmt::print(
          "device: {}\nrule: median of {} interleaved repetitions (min..max); decode shapes rotate {} buffer "
          "sets; floor = bytes / 4.3 TB/s\n\n",
          dev.describe(), o.cfg.reps, o.cfg.sets);
      // The clocks, power and clock limits while each row's replays are timed (gpu_clocks.h).
      ClockSampler clocks(dev.ordinal);
      if (!clocks.available()) fmt::print("clocks: not sampled ({})\n\n", clocks.unavailable_reason());
      nlohmann::json out = nlohmann::json::array();
      int mismatches = 0;
      // Ctrl-C: the shape under way finishes, then what was measured is printed and written (exit 130).
      const SigintGuard guard;
      size_t done = 0;
      for (const auto& s : parsed) {
        if (sigint_received()) break;
        ++done;
        auto rs = bench::run_kernel_bench(
            s, o.cfg, [](const std::string& m) { fmt::print(stderr, "{}\n", m); },
            clocks.available() ? &clocks : nullptr);
        fmt::print("{}\n", s.name);
        fmt::print("  {:<12} {:<22} {:<28} {:>12} {:>8} {:>10} {:>19} {:>10} {:>8} {:>8} {}\n", "op", "arm", "kernel",
                   "grid", "block", "median_us", "min..max", "bytes", "GB/s", "%floor",
                   "bytes==ref (a setting: error)");
        for (const auto& r : rs) {
          const std::string grid = fmt::format("{}x{}x{}", r.grid.x, r.grid.y, r.grid.z);
          const std::string times = fmt::format("{:.2f}..{:.2f}", r.min_us, r.max_us);
          nlohmann::json row = {{"shape", s.name},
                                {"op", r.op},
                                {"arm", r.arm},
                                {"kernel", r.kernel},
                                {"grid", {r.grid.x, r.grid.y, r.grid.z}},
                                {"block", r.block.x},
                                {"median_us", r.median_us},
                                {"min_us", r.min_us},
                                {"max_us", r.max_us},
                                {"probe", r.probe}};
          if (r.channels > 0) row["channels"] = r.channels;
          row["clocks"] = clocks_json(clocks.summarize(r.clocks));
          if (r.grid.x == 0) row["grid"] = row["block"] = nullptr;  // a library's or several kernels' launch
          if (r.probe) {                                            // a floor probe: the time only
            fmt::print("  {:<12} {:<22} {:<28} {:>12} {:>8} {:>10.2f} {:>19} {:>10} {:>8} {:>8} {}\n", r.op, r.arm,
                       r.kernel, grid, r.block.x, r.median_us, times, "-", "-", "-", "-");
            for (const char* k : {"bytes", "gbps", "floor_fraction", "hash", "bytes_match_reference"}) row[k] = nullptr;
            out.push_back(row);
            continue;
          }
          const double gbps = r.bytes / (r.median_us * 1e3);
          // An arm must give the reference arm's bytes; a setting's value stays within its
          // tolerances of the first row (and may give other bytes).
          const bool ok = r.setting ? r.within_tolerance() : r.hash_matches_reference;
          const std::string verdict =
              r.setting ? fmt::format("err out {:.1e} state {:.1e} {}", r.out_error, r.state_error, ok ? "ok" : "OVER")
                        : (ok ? "yes" : "NO");
          const std::string flops =
              r.flops > 0 ? fmt::format("  {:.1f} TFLOP/s ({:.1f}% of 790)", r.flops / (r.median_us * 1e6),
                                        100 * r.flops / (r.median_us * 1e6) / kFloorTflops)
                          : "";
          fmt::print("  {:<12} {:<22} {:<28} {:>12} {:>8} {:>10.2f} {:>19} {:>10} {:>8.0f} {:>7.1f}% {}{}\n", r.op,
                     r.arm, r.kernel, r.grid.x > 0 ? grid : "-", r.block.x > 0 ? fmt::format("{}", r.block.x) : "-",
                     r.median_us, times, format_bytes(r.bytes), gbps, 100 * gbps / kFloorGBps, verdict, flops);
          mismatches += !ok;
          row["bytes"] = r.bytes;
          row["gbps"] = gbps;
          row["floor_fraction"] = gbps / kFloorGBps;
          row["hash"] = fmt::format("{:016x}", r.hash);
          row["bytes_match_reference"] = r.hash_matches_reference;
          if (r.flops > 0) {
            row["flops"] = r.flops;
            row["tflops"] = r.flops / (r.median_us * 1e6);
            row["flops_floor_fraction"] = r.flops / (r.median_us * 1e6) / kFloorTflops;
          }
          if (r.setting) {
            row["setting"] = true;
            row["compared_with"] = r.reference;
            row["out_error"] = r.out_error;
            row["state_error"] = r.state_error;
            row["out_tolerance"] = r.out_tolerance;
            row["state_tolerance"] = r.state_tolerance;
            row["within_tolerance"] = ok;
          }
          out.push_back(row);
        }
        if (clocks.available()) print_op_clocks(rs);
        fmt::print("\n");
      }
      const bool interrupted = sigint_received();
      if (interrupted) {
        fmt::print("interrupted (SIGINT) after {} of {} shapes: the rows above are what was measured\n", done,
                   parsed.size());
      }
      if (!o.json.empty()) {
        std::ofstream f(o.json);
        require(static_cast<bool>(f), "cannot write {}", o.json);
        f << nlohmann::json{{"device", dev.describe()}, {"interrupted", interrupted}, {"results", out}}.dump(2) << "\n";
      }
      if (mismatches) {
        fmt::print("{} row(s) did NOT reproduce the reference arm's bytes or went past their setting's tolerance\n",
                   mismatches);
      }
      return mismatches ? 3 : interrupted ? kInterruptedExit : 0;
    };
  });
}

}  // namespace sg::cli
