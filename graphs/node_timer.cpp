// node_timer.cpp: CUPTI activity buffers, the clone callback, and aggregation.
#include "graphs/node_timer.h"

#include <cupti.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "engine/error.h"

namespace sg {
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
      KernelRecord r;
      r.graph_id = k->graphId;
      r.node_id = k->graphNodeId;
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.name = k->name ? k->name : "";
      NodeTimer::instance().on_record(std::move(r));
    }
  }
  std::free(buffer);
}

void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(cbdata);
  const auto* gd = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
  uint64_t orig = 0, clone = 0;
  if (cuptiGetGraphNodeId(gd->originalNode, &orig) == CUPTI_SUCCESS &&
      cuptiGetGraphNodeId(gd->node, &clone) == CUPTI_SUCCESS) {
    static_cast<NodeTimer*>(userdata)->on_clone(orig, clone);
  }
}

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

NodeTimer& NodeTimer::instance() {
  static NodeTimer t;
  return t;
}

void NodeTimer::attach() {
  if (attached_) return;
  CUpti_SubscriberHandle sub = nullptr;
  CUptiResult r = cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(on_callback), this);
  require(r != CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
          "per-node timing needs CUPTI, but another tool (compute-sanitizer, ncu, nsys) already holds it; "
          "`stepgraph bench --node-replays 0` runs without per-node timing");
  check_cupti(r);
  subscriber_ = sub;
  check_cupti(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
  check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  attached_ = true;
}

void NodeTimer::start() {
  require(attached_, "NodeTimer::start() before attach()");
  require(!running_, "NodeTimer already running");
  // Records an abandoned window left in CUPTI's buffers arrive now, and are dropped with the rest.
  check_cupti(cuptiActivityFlushAll(1));
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
  }
  check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  running_ = true;
}

std::vector<KernelRecord> NodeTimer::stop() {
  require(running_, "NodeTimer::stop() without start()");
  check(cudaDeviceSynchronize());
  check_cupti(cuptiActivityFlushAll(1));
  check_cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  running_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KernelRecord> out;
  out.swap(records_);
  for (auto& r : out) {
    auto it = clone_to_original_.find(r.node_id);
    if (it != clone_to_original_.end()) r.node_id = it->second;
  }
  return out;
}

void NodeTimer::abandon() noexcept {
  if (!running_) return;
  (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  running_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

void NodeTimer::on_clone(uint64_t original, uint64_t clone) {
  std::lock_guard<std::mutex> lock(mu_);
  clone_to_original_[clone] = original;
}

void NodeTimer::on_record(KernelRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

std::vector<NodeStats> aggregate(const Manifest& m, const std::vector<KernelRecord>& records, int* unmatched) {
  std::map<uint64_t, size_t> by_id;
  for (size_t i = 0; i < m.nodes.size(); ++i) by_id[m.nodes[i].cupti_id] = i;
  // The matched records in start order (then end order), each with its manifest node.
  std::vector<std::pair<const KernelRecord*, size_t>> matched;
  int miss = 0;
  for (const auto& r : records) {
    auto it = by_id.find(r.node_id);
    if (r.node_id == 0 || it == by_id.end()) {
      ++miss;
      continue;
    }
    matched.emplace_back(&r, it->second);
  }
  if (unmatched) *unmatched = miss;
  std::sort(matched.begin(), matched.end(), [](const auto& a, const auto& b) {
    return a.first->start_ns != b.first->start_ns ? a.first->start_ns < b.first->start_ns
                                                  : a.first->end_ns < b.first->end_ns;
  });
  // A record's own time: from the later of its start and the end of every record that started
  // before it, to its end. Kernels that overlap (PDL: a kernel starts, then waits, while the one
  // before it finishes) are so counted once, and a replay's own times add up to its busy time.
  std::vector<std::vector<double>> own(m.nodes.size()), span(m.nodes.size());
  uint64_t busy_until = 0;
  for (const auto& [r, node] : matched) {
    const uint64_t from = std::max(r->start_ns, busy_until);
    own[node].push_back(r->end_ns > from ? static_cast<double>(r->end_ns - from) / 1000.0 : 0.0);
    span[node].push_back(static_cast<double>(r->end_ns - r->start_ns) / 1000.0);
    busy_until = std::max(busy_until, r->end_ns);
  }
  std::vector<NodeStats> out;
  double total = 0;
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    NodeStats s;
    s.node = m.nodes[i];
    auto& t = own[i];
    s.calls = static_cast<int>(t.size());
    if (!t.empty()) {
      double sum = 0;
      for (double x : t) sum += x;
      s.mean_us = sum / static_cast<double>(t.size());
      s.median_us = median_of(t);
      s.min_us = *std::min_element(t.begin(), t.end());
      s.max_us = *std::max_element(t.begin(), t.end());
      s.span_median_us = median_of(span[i]);
      s.gbps = s.median_us > 0 ? s.node.label.bytes / (s.median_us * 1e3) : 0;
      total += s.median_us;
    }
    out.push_back(std::move(s));
  }
  for (auto& s : out) s.share = total > 0 ? s.median_us / total : 0;
  return out;
}

std::string short_kernel_name(const std::string& demangled) {
  constexpr std::string_view anon = "(anonymous namespace)::";
  std::string k = demangled;
  for (size_t p = k.find(anon); p != std::string::npos; p = k.find(anon)) k.replace(p, anon.size(), "");
  k = k.substr(0, k.find('('));
  // Drop the return type, namespaces and the anonymous namespace: keep the last qualified part
  // (template arguments included).
  if (k.rfind("void ", 0) == 0) k = k.substr(5);
  size_t depth = 0, cut = 0;
  for (size_t i = 0; i + 1 < k.size(); ++i) {
    if (k[i] == '<') ++depth;
    if (k[i] == '>' && depth > 0) --depth;
    if (depth == 0 && k[i] == ':' && k[i + 1] == ':') cut = i + 2;
  }
  return k.substr(cut);
}

double FamilyRow::floor_us(double floor_gbps, double peak_tflops) const {
  return std::max(bytes / (floor_gbps * 1e3), flops / (peak_tflops * 1e6));
}

std::vector<FamilyRow> op_families(const std::vector<NodeStats>& stats) {
  std::vector<FamilyRow> rows;
  for (const auto& s : stats) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const FamilyRow& r) { return r.op == s.node.label.op; });
    if (it == rows.end()) {
      rows.push_back(FamilyRow{s.node.label.op});
      it = rows.end() - 1;
    }
    ++it->nodes;
    it->us += s.median_us;
    it->bytes += s.node.label.bytes;
    it->flops += s.node.label.flops;
    if (s.node.waves > 0) {
      it->waves_min = it->waves_min > 0 ? std::min(it->waves_min, s.node.waves) : s.node.waves;
      it->waves_max = std::max(it->waves_max, s.node.waves);
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const FamilyRow& a, const FamilyRow& b) { return a.us != b.us ? a.us > b.us : a.op < b.op; });
  return rows;
}

void add_family_work(std::vector<FamilyRow>& rows, const FamilyWork& work) {
  for (auto& r : rows) {
    if (r.op != work.op) continue;
    r.bytes += work.bytes;
    r.flops += work.flops;
  }
}

std::string format_family_table(const std::vector<FamilyRow>& rows, double floor_gbps, double peak_tflops,
                                const std::string& note) {
  double total = 0;
  for (const auto& r : rows) total += r.us;
  std::string out = fmt::format("  {:<22} {:>6} {:>12} {:>7} {:>9} {:>9} {:>7} {:>11} {:>13}\n", "op", "nodes",
                                "us/step", "share", "GB/s", "TFLOP/s", "%floor", "over floor", "waves");
  double over_total = 0;
  auto rate = [](double amount, double us, double unit) {
    return amount > 0 && us > 0 ? fmt::format("{:.1f}", amount / (us * unit)) : std::string("-");
  };
  for (const auto& r : rows) {
    const double f = r.floor_us(floor_gbps, peak_tflops);
    const std::string lo = fmt::format("{:.2f}", r.waves_min), hi = fmt::format("{:.2f}", r.waves_max);
    const std::string waves = r.waves_max <= 0 ? std::string("-") : lo == hi ? lo : lo + "-" + hi;
    // Time over the floor, 0 for a family faster than it (loads that overlapped its predecessor).
    const bool floored = f > 0 && r.us > 0;
    const double over = floored ? std::max(0.0, r.us - f) : 0.0;
    over_total += over;
    out += fmt::format("  {:<22} {:>6} {:>12.1f} {:>6.1f}% {:>9} {:>9} {:>7} {:>11} {:>13}\n", r.op, r.nodes, r.us,
                       total > 0 ? 100 * r.us / total : 0.0, rate(r.bytes, r.us, 1e3), rate(r.flops, r.us, 1e6),
                       floored ? fmt::format("{:.0f}%", 100 * f / r.us) : std::string("-"),
                       floored ? fmt::format("{:.1f}", over) : std::string("-"), waves);
  }
  out += fmt::format("  {:<22} {:>6} {:>12.1f} {:>7} {:>9} {:>9} {:>7} {:>11.1f}\n", "(all)", "", total, "", "", "", "",
                     over_total);
  out += fmt::format(
      "  (%floor: the family's labelled bytes at {:.1f} TB/s or its matrix products' FLOPs at {:.0f} TFLOP/s, "
      "the larger, over its time; over floor: its time less that floor, us, 0 when below it, summed in (all) over the "
      "families that have a floor; waves: the nodes' blocks over what the SMs hold at once; {})\n",
      floor_gbps / 1e3, peak_tflops, note);
  return out;
}

std::string format_node_table(const std::vector<NodeStats>& stats, double floor_gbps) {
  std::string out = fmt::format(
      "{:>4} {:>5} {:<18} {:<10} {:<34} {:>14} {:>10} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>7}\n", "node",
      "layer", "op", "arm", "kernel", "grid", "block", "waves", "calls", "median_us", "min_us", "max_us", "span_us",
      "share", "GB/s", "%floor");
  for (const auto& s : stats) {
    std::string kernel = short_kernel_name(s.node.kernel);
    if (kernel.size() > 34) kernel = kernel.substr(0, 33) + "~";
    out += fmt::format(
        "{:>4} {:>5} {:<18} {:<10} {:<34} {:>14} {:>10} {:>7} {:>6} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>5.1f}% "
        "{:>9.1f} {:>6.1f}%\n",
        s.node.index, s.node.label.layer, s.node.label.op, s.node.label.arm, kernel,
        fmt::format("{}x{}x{}", s.node.grid.x, s.node.grid.y, s.node.grid.z),
        fmt::format("{}x{}x{}", s.node.block.x, s.node.block.y, s.node.block.z),
        s.node.waves > 0 ? fmt::format("{:.2f}", s.node.waves) : std::string("-"), s.calls, s.median_us, s.min_us,
        s.max_us, s.span_median_us, 100 * s.share, s.gbps, floor_gbps > 0 ? 100 * s.gbps / floor_gbps : 0.0);
  }
  return out;
}

}  // namespace sg
