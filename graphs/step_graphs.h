// step_graphs.h: the step-graph runner: one captured CUDA graph and its manifest per graph key,
// for any kind of step. A step hands it its launch sequence as a callback (the same launches
// eagerly and under capture), so this folder knows nothing of models.
//
//   capture_all: warm-up (every key once eagerly, in ascending key order, each after the step has
//     staged padding-only inputs for it), one synchronisation, then capture largest first (keys in
//     descending order: the largest key of each kind first, kinds in the order mixed, prefill,
//     decode) with a NodeRecorder, and build each key's manifest. On a terminal, a progress bar on
//     stderr; nothing otherwise. A stop hook (set_stop) ends the capture loop before its next key.
//   run: replays the key's graph in graph mode when it was captured; otherwise launches the
//     sequence eagerly, counting an eager fallback when a graph was wanted.
//
// The device side (synchronise, capture + manifest, replay, progress) is a small set of hooks,
// GraphDevice::on_stream by default, so the bookkeeping and the capture order are tested on the
// CPU with fake hooks.
#pragma once
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graphs/graph.h"
#include "graphs/manifest.h"

namespace sg {

enum class RunMode { eager, graph };

enum class GraphKind : uint8_t { decode, prefill, mixed };
std::string_view graph_kind_name(GraphKind kind);  // "decode", "prefill", "mixed"

// What a captured graph is keyed by: the kind of step and its padded token rows (decode: the
// padded batch; prefill: the token bucket; mixed: prefill and decode rows in one step). The
// step's other capacities (sequences per prefill) are fixed per step object. Ordered by kind,
// then tokens.
struct GraphKey {
  GraphKind kind = GraphKind::decode;
  int tokens = 0;
  static constexpr GraphKey decode(int rows) { return {GraphKind::decode, rows}; }
  static constexpr GraphKey prefill(int bucket) { return {GraphKind::prefill, bucket}; }
  static constexpr GraphKey mixed(int tokens) { return {GraphKind::mixed, tokens}; }
  auto operator<=>(const GraphKey&) const = default;
};
std::string describe(const GraphKey& key);  // "decode 32", "prefill 1024"

struct CapturedStep {
  CapturedGraph graph;
  Manifest manifest;
};

// The runner's device-side operations.
struct GraphDevice {
  // Waits for everything enqueued so far (between the warm-up and the first capture).
  std::function<void()> sync;
  // Captures `body` (which launches one key's sequence, labelling each launch with the recorder)
  // into a graph named `name` and builds its manifest with `arms`.
  std::function<CapturedStep(const std::string& name, const std::string& arms,
                             const std::function<void(NodeRecorder&)>& body)>
      capture;
  std::function<void(const CapturedGraph&)> replay;
  // After each capture: graphs done, graphs in all, the graph just captured. Empty: no progress.
  std::function<void(int done, int total, const std::string& name)> progress;
  // Asked before each capture: true ends capture_all there (the keys captured so far keep their
  // graphs; a Ctrl-C handler, say). Empty: never stops.
  std::function<bool()> stop;

  // CapturedGraph::capture + build_manifest on `stream`, replays on `stream`, and a progress bar on
  // stderr when stderr is a terminal (isatty), no progress otherwise.
  static GraphDevice on_stream(cudaStream_t stream);
};

// One progress line: "<what> [#####---------------]  3/12 <name>".
std::string progress_line(std::string_view what, int done, int total, const std::string& name);
// progress_line("capturing graphs", ...): "capturing graphs [#####---------------]  3/12 model-decode b=8".
std::string capture_progress_line(int done, int total, const std::string& name);
// A progress callback that redraws one line on stderr when stderr is a terminal (empty otherwise).
std::function<void(int done, int total, const std::string& name)> terminal_progress(std::string what);

class StepGraphs {
 public:
  // Launches `key`'s sequence on the step's stream. `rec` is null when eager (warm-up, run);
  // under capture every launch calls rec->launched(...) with its label.
  using LaunchFn = std::function<void(const GraphKey& key, NodeRecorder* rec)>;
  // Stages padding-only inputs for `key` before its warm-up launch (no cache is read or written).
  using WarmupFn = std::function<void(const GraphKey& key)>;
  // The graph's name in manifests and errors ("model-decode qwen3.5-4b b=32").
  using NameFn = std::function<std::string(const GraphKey& key)>;

  StepGraphs(cudaStream_t stream, LaunchFn launch);
  StepGraphs(GraphDevice device, LaunchFn launch);
  // The launch callback usually points into the step that owns the runner: neither moves.
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Fills what a key's manifest says about the choices it was captured with (Manifest::arms, and
  // Manifest::tuning when the arms were tuned).
  using DescribeFn = std::function<void(const GraphKey& key, Manifest& m)>;

  // Warm-up, then capture (see the top of this file). Keys may come in any order, repeats are
  // ignored; a key captured before is captured again (its graph and manifest are replaced).
  // `arms` is recorded in every manifest (ArmSelection::describe()).
  void capture_all(std::vector<GraphKey> keys, const WarmupFn& warmup, const NameFn& name, const std::string& arms);
  // The same with each key's manifest described by `describe` (per-key arms).
  void capture_all(std::vector<GraphKey> keys, const WarmupFn& warmup, const NameFn& name, const DescribeFn& describe);

  // One step on whatever inputs are staged: returns true when it replayed a graph.
  bool run(const GraphKey& key, RunMode mode);
  // Replays `key`'s graph (an error naming the key when it was not captured).
  void replay(const GraphKey& key) const;

  // Sets GraphDevice::stop (the capture loop's stop question).
  void set_stop(std::function<bool()> stop) { device_.stop = std::move(stop); }

  bool has(const GraphKey& key) const { return captured_.count(key) != 0; }
  const Manifest& manifest(const GraphKey& key) const;
  const CapturedGraph& graph(const GraphKey& key) const;
  std::vector<GraphKey> captured() const;  // ascending
  // Steps run eagerly in graph mode because their key had no graph.
  int eager_fallbacks() const { return eager_fallbacks_; }

 private:
  const CapturedStep& at(const GraphKey& key) const;

  GraphDevice device_;
  LaunchFn launch_;
  std::map<GraphKey, CapturedStep> captured_;
  int eager_fallbacks_ = 0;
};

}  // namespace sg
