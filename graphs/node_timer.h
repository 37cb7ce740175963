// node_timer.h: per-node kernel timing of graph replays through CUPTI's activity API.
// Each replayed kernel arrives as a record carrying its graph id and graph node id; a resource
// callback maps the nodes cloned at instantiation back to the captured nodes, whose ids the
// manifest holds. CUPTI allows one subscriber per process, so there is one NodeTimer.
// Use: NodeTimer::instance().attach() BEFORE instantiating the graphs to be timed (clone map),
// then start(); replay N times; stop() returns the records. Keep whole-graph timing out of the
// start()/stop() window so CUPTI's overhead never enters reported step times.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "graphs/manifest.h"

namespace sg {

struct KernelRecord {
  uint32_t graph_id = 0;
  uint64_t node_id = 0;  // mapped to the captured node's id when a clone mapping exists
  uint64_t start_ns = 0, end_ns = 0;
  std::string name;
};

class NodeTimer {
 public:
  static NodeTimer& instance();
  void attach();  // idempotent
  void start();
  std::vector<KernelRecord> stop();
  // Ends a window that stop() did not end (an error between the two, a kernel fault that lost the
  // context): disables CUPTI's activity collection without flushing or synchronising, ignoring its
  // errors, and drops the records (those still in CUPTI's buffers are dropped by the next start()).
  // Does nothing when the timer is not running.
  void abandon() noexcept;
  bool attached() const { return attached_; }

  // Internal (called from CUPTI's callbacks).
  void on_clone(uint64_t original, uint64_t clone);
  void on_record(KernelRecord r);

 private:
  NodeTimer() = default;
  bool attached_ = false, running_ = false;
  void* subscriber_ = nullptr;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> clone_to_original_;
  std::vector<KernelRecord> records_;
};

// One start()..stop() window of the timer: starts it, and abandons it on destruction unless
// stop() returned, so that no error path leaves CUPTI collecting (on a lost context too).
class NodeTimerWindow {
 public:
  NodeTimerWindow() { NodeTimer::instance().start(); }
  ~NodeTimerWindow() {
    if (open_) NodeTimer::instance().abandon();
  }
  NodeTimerWindow(const NodeTimerWindow&) = delete;
  NodeTimerWindow& operator=(const NodeTimerWindow&) = delete;
  // NodeTimer::stop(); on an error the window stays open, so its destructor abandons it.
  std::vector<KernelRecord> stop() {
    std::vector<KernelRecord> records = NodeTimer::instance().stop();
    open_ = false;
    return records;
  }

 private:
  bool open_ = true;
};

// A node's time is its own time: from the later of its start and the end of every kernel of the
// graph that started before it, to its end. Without overlap that is the kernel's duration; under
// programmatic dependent launch a kernel starts early and waits in griddepcontrol.wait while the
// one before it finishes, and its own time leaves that overlap out, so the nodes' times add up to
// the graph's busy time. span is the kernel's whole duration, overlap included.
struct NodeStats {
  ManifestNode node;
  int calls = 0;
  double mean_us = 0, median_us = 0, min_us = 0, max_us = 0;  // own time
  double span_median_us = 0;                                  // start to end, overlap included
  double share = 0;                                           // of the summed own time of the graph
  double gbps =
      0;  // label.bytes / median own time (above the card's bandwidth when the node's loads overlapped the node before)
};

// The median of `v` (the mean of the middle two for an even count; 0 for none).
double median_of(std::vector<double> v);

// Aggregates records of one graph's replays per manifest node (own times from the records of this
// manifest only, in start order). Records whose node id is not in the manifest are ignored;
// `unmatched` counts them.
std::vector<NodeStats> aggregate(const Manifest& m, const std::vector<KernelRecord>& records, int* unmatched = nullptr);
// "conv_update_fast_kernel" from "void sg::(anonymous namespace)::conv_update_fast_kernel(sg::...)".
std::string short_kernel_name(const std::string& demangled);
// A fixed-width table: node, layer, op, arm, kernel, grid, block, calls, median/min/max us, GB/s, % of floor.
std::string format_node_table(const std::vector<NodeStats>& stats, double floor_gbps);

// One op family of a graph (the nodes whose label has that op): node medians, label bytes and
// label FLOPs summed.
struct FamilyRow {
  std::string op;
  int nodes = 0;
  double us = 0, bytes = 0, flops = 0;
  double waves_min = 0, waves_max = 0;  // over its nodes whose waves are known (ManifestNode); 0: none
  // The family's floor (us): the larger of its bytes at floor_gbps and its FLOPs at peak_tflops.
  double floor_us(double floor_gbps, double peak_tflops) const;
};
// The families of `stats`, the longest first (ties by name).
std::vector<FamilyRow> op_families(const std::vector<NodeStats>& stats);
// Work that a family's node labels cannot carry because it depends on the batch, not on the graph
// key (attention's KV bytes read in decode, its causal FLOPs in prefill): the caller, who knows its
// workload, adds it. Added to the row of `op` when `rows` has one (none: nothing to add to).
struct FamilyWork {
  std::string op;
  double bytes = 0, flops = 0;
};
void add_family_work(std::vector<FamilyRow>& rows, const FamilyWork& work);
// A fixed-width table: op, nodes, us a step, share, GB/s, TFLOP/s (where FLOPs are labelled), the
// floor's fraction of the time and the time over the floor (where bytes or FLOPs are labelled), the
// nodes' waves over the device ("0.61", or "0.61-1.94" when they differ); then a row "(all)" with
// the summed time and time over the floor, and a line saying what the floor is; `note` ends that
// line (what was added to the labels, or what they leave out).
std::string format_family_table(const std::vector<FamilyRow>& rows, double floor_gbps, double peak_tflops,
                                const std::string& note = "attention's KV reads are not labelled");

}  // namespace sg
