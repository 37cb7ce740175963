// kernel_bench.h: the kernel-level benchmark behind `stepgraph kernels`: every arm of every GDN
// op on a standard shape, timed as docs/BENCHMARKS.md's rules prescribe. Each arm is captured into one graph:
// decode shapes launch the kernel once per buffer set (24 sets, like the 24 GDN layers of a step,
// so the 60 MB L2 cannot serve them), prefill shapes once. Arms are timed interleaved over
// repetitions (median, min, max per launch), and their outputs are hashed from the same starting
// state: arms must agree byte for byte. Decode shapes also time, beside conv.update, two probe
// kernels on the fast arm's grid (bench_probes.h): the latency floor of a slot-indexed update.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/gpu_clocks.h"
#include "kernels/contracts.h"
#include "models/qwen35_config.h"

namespace sg::bench {

struct KernelShape {
  std::string name;   // "4b-decode-b32", "27b-prefill-32x1024", ...
  std::string model;  // preset name
  GdnDims dims;
  bool decode = true;
  int rows = 0;     // decode: batch; prefill: sequences
  int seq_len = 0;  // prefill: tokens per sequence
  int tokens() const { return decode ? rows : rows * seq_len; }
};

// "4b-decode-b32", "27b-decode-b8", "4b-prefill-32x1024", "tiny-prefill-4x100"; throws sg::Error
// listing the standard shapes on anything else.
KernelShape parse_shape(const std::string& name);
std::vector<std::string> standard_shapes();

struct ArmResult {
  std::string op, arm, kernel;  // arm after fallbacks; kernel = contract's kernel name
  Dim3 grid, block;
  double median_us = 0, min_us = 0, max_us = 0;  // per launch
  double bytes = 0;                              // 0 for probes
  uint64_t hash = 0;
  bool hash_matches_reference = true;  // always true for probes (not hashed)
  bool probe = false;                  // a floor probe (bench_probes.h), not an arm
  int channels = 0;                    // conv.update fast and its probes: channels per thread V; else 0
  double flops = 0;                    // per launch where a FLOPs floor applies (790 TFLOP/s); else 0
  // A value of a setting (delta_rule.prefill's forms), not an arm: compared with the first row by
  // the L2-normalised error of its outputs and final state, each within its tolerance.
  bool setting = false;
  std::string reference;  // the row it was compared with (the first that ran)
  double out_error = 0, state_error = 0, out_tolerance = 0, state_tolerance = 0;
  std::vector<ClockSample> clocks;  // sampled while its timed replays ran (empty without a sampler)
  bool within_tolerance() const { return out_error <= out_tolerance && state_error <= state_tolerance; }
};

struct BenchConfig {
  int reps = 7;                  // interleaved repetitions
  int min_launches = 200;        // launches per repetition (rounded up to whole graph replays)
  int sets = 24;                 // buffer sets for decode shapes
  std::vector<std::string> ops;  // empty = all ops that apply to the shape
  // conv.update fast: one row per V (channels per thread, 2, 4 or 8), each with its floor probes;
  // empty = the contract's pick only.
  std::vector<int> conv_update_channels;
  // conv.update fast: each V above at each of these block sizes (128, 256, 512); empty = the default.
  std::vector<int> conv_update_blocks;
};

// `clocks` (optional): sampled around each row's timed replays, into ArmResult::clocks.
std::vector<ArmResult> run_kernel_bench(const KernelShape& shape, const BenchConfig& cfg,
                                        const std::function<void(const std::string&)>& progress,
                                        ClockSampler* clocks = nullptr);

}  // namespace sg::bench
