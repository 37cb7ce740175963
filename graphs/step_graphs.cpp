// step_graphs.cpp: warm-up, capture order, replay-or-eager, and the default device hooks.
#include "graphs/step_graphs.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "engine/error.h"

namespace sg {

std::string_view graph_kind_name(GraphKind kind) {
  switch (kind) {
    case GraphKind::decode: return "decode";
    case GraphKind::prefill: return "prefill";
    case GraphKind::mixed: return "mixed";
  }
  return "?";
}

std::string describe(const GraphKey& key) { return fmt::format("{} {}", graph_kind_name(key.kind), key.tokens); }

std::string progress_line(std::string_view what, int done, int total, const std::string& name) {
  constexpr int kWidth = 20;
  const int filled = total > 0 ? std::clamp(done, 0, total) * kWidth / total : kWidth;
  const int digits = static_cast<int>(std::to_string(std::max(total, 0)).size());
  return fmt::format("{} [{}{}] {:>{}}/{} {}", what, std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kWidth - filled), '-'), done, digits, total, name);
}

std::string capture_progress_line(int done, int total, const std::string& name) {
  return progress_line("capturing graphs", done, total, name);
}

std::function<void(int, int, const std::string&)> terminal_progress(std::string what) {
  if (!isatty(fileno(stderr))) return {};
  return [what = std::move(what)](int done, int total, const std::string& name) {
    // \r and erase-to-end-of-line redraw the one line; the last step ends it.
    std::fprintf(stderr, "\r%s\x1b[K%s", progress_line(what, done, total, name).c_str(), done == total ? "\n" : "");
    std::fflush(stderr);
  };
}

GraphDevice GraphDevice::on_stream(cudaStream_t stream) {
  GraphDevice d;
  d.sync = [stream] { check(cudaStreamSynchronize(stream)); };
  d.capture = [stream](const std::string& name, const std::string& arms,
                       const std::function<void(NodeRecorder&)>& body) {
    NodeRecorder rec;
    CapturedGraph g = CapturedGraph::capture(name, stream, [&] { body(rec); });
    Manifest m = build_manifest(name, arms, g.graph(), rec);
    return CapturedStep{std::move(g), std::move(m)};
  };
  d.replay = [stream](const CapturedGraph& g) { g.replay(stream); };
  d.progress = terminal_progress("capturing graphs");
  return d;
}

StepGraphs::StepGraphs(cudaStream_t stream, LaunchFn launch)
    : StepGraphs(GraphDevice::on_stream(stream), std::move(launch)) {}

StepGraphs::StepGraphs(GraphDevice device, LaunchFn launch) : device_(std::move(device)), launch_(std::move(launch)) {
  require(device_.sync && device_.capture && device_.replay && launch_,
          "step graphs: the device hooks and the launch callback must all be set");
}

void StepGraphs::capture_all(std::vector<GraphKey> keys, const WarmupFn& warmup, const NameFn& name,
                             const std::string& arms) {
  capture_all(std::move(keys), warmup, name, [&arms](const GraphKey&, Manifest& m) { m.arms = arms; });
}

void StepGraphs::capture_all(std::vector<GraphKey> keys, const WarmupFn& warmup, const NameFn& name,
                             const DescribeFn& describe) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // Warm-up: every key once eagerly, so libraries and kernels initialise nothing lazily inside a
  // capture.
  for (const GraphKey& key : keys) {
    if (warmup) warmup(key);
    launch_(key, nullptr);
  }
  device_.sync();
  // Largest first.
  const int total = static_cast<int>(keys.size());
  int done = 0;
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    if (device_.stop && device_.stop()) break;
    const GraphKey key = *it;
    const std::string graph_name = name(key);
    Manifest described;
    describe(key, described);
    CapturedStep c = device_.capture(graph_name, described.arms, [&](NodeRecorder& rec) { launch_(key, &rec); });
    c.manifest.tuning = std::move(described.tuning);
    captured_[key] = std::move(c);
    if (device_.progress) device_.progress(++done, total, graph_name);
  }
}

bool StepGraphs::run(const GraphKey& key, RunMode mode) {
  if (mode == RunMode::graph) {
    auto it = captured_.find(key);
    if (it != captured_.end()) {
      device_.replay(it->second.graph);
      return true;
    }
    ++eager_fallbacks_;
  }
  launch_(key, nullptr);
  return false;
}

void StepGraphs::replay(const GraphKey& key) const { device_.replay(at(key).graph); }

const CapturedStep& StepGraphs::at(const GraphKey& key) const {
  auto it = captured_.find(key);
  if (it == captured_.end()) {
    std::string have;
    for (const auto& [k, c] : captured_) have += (have.empty() ? "" : ", ") + describe(k);
    throw Error(fmt::format("no graph captured for {} (captured: {})", describe(key), have.empty() ? "none" : have));
  }
  return it->second;
}

const Manifest& StepGraphs::manifest(const GraphKey& key) const { return at(key).manifest; }
const CapturedGraph& StepGraphs::graph(const GraphKey& key) const { return at(key).graph; }

std::vector<GraphKey> StepGraphs::captured() const {
  std::vector<GraphKey> out;
  out.reserve(captured_.size());
  for (const auto& [k, c] : captured_) out.push_back(k);
  return out;
}

}  // namespace sg
