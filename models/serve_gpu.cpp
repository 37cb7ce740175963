// serve_gpu.cpp: scheduled steps on the GPU model step, their floors, and whole-run node samples
// (see serve_gpu.h).
#include "models/serve_gpu.h"

#include <algorithm>

#include "engine/error.h"

namespace sg {

SchedulerOptions scheduler_options_for(const ModelStep& step) {
  const ModelStepOptions& o = step.options();
  require(o.max_prefill_tokens > 0, "serve: the model step needs prefill buffers (max_prefill_tokens > 0)");
  SchedulerOptions s;
  s.slots = o.num_slots;
  s.max_context = o.max_context;
  s.prefill_budget = o.max_prefill_tokens;
  s.max_prefill_seqs = o.max_prefill_seqs;
  s.decode_keys = step.keys();
  s.prefill_buckets = step.prefill_keys();
  return s;
}

std::vector<int32_t> run_model_step(ModelStep& step, const ScheduledStep& s, RunMode mode) {
  int key = 0;
  if (s.kind == StepKind::prefill) {
    key = step.enqueue_prefill(s.prefill, mode);
  } else {
    key = step.enqueue(s.decode, mode);
  }
  require(key == s.key, "serve: step {} ran with key {}, but the scheduler chose {}", s.index, key, s.key);
  return step.tokens(static_cast<int>(s.requests.size()));
}

double step_floor_ms(const ModelStep& step, const ScheduledStep& s, double gbps, double tflops) {
  const Qwen35Config& c = step.config();
  const double state = step.state_bytes_per_slot(), kv = step.kv_bytes_per_token();
  double bytes = step.weight_bytes();
  double pairs = 0;  // causal (query, key) pairs summed over the sequences
  if (s.kind == StepKind::prefill) {
    for (const PrefillRequest& p : s.prefill) {
      const double start = p.start_position, len = static_cast<double>(p.tokens.size());
      bytes += state * (start > 0 ? 2.0 : 1.0) + kv * (start + len);
      pairs += len * start + len * (len + 1) / 2;
    }
  } else {
    for (const DecodeRequest& d : s.decode) {
      bytes += 2.0 * state + kv * (d.position + 1.0);
      pairs += d.position + 1.0;
    }
  }
  const double weight_elems = step.weight_bytes() / static_cast<double>(dtype_size(step.weight_dtype()));
  const double flops = 2.0 * weight_elems * s.tokens() + 4.0 * c.Hq * c.D * c.num_full_attention() * pairs;
  return std::max(bytes / (gbps * 1e6), flops / (tflops * 1e9));
}

std::vector<NodeSample> node_samples(const StepGraphs& graphs, const std::vector<KernelRecord>& records,
                                     int64_t* unmatched) {
  std::vector<NodeSample> out;
  int64_t matched = 0;
  for (const GraphKey& key : graphs.captured()) {
    for (const NodeStats& n : aggregate(graphs.manifest(key), records)) {
      if (n.calls == 0) continue;
      out.push_back(NodeSample{n.node.label.op, n.node.label.arm, n.calls, n.mean_us * n.calls});
      matched += n.calls;
    }
  }
  if (unmatched) *unmatched = static_cast<int64_t>(records.size()) - matched;
  return out;
}

}  // namespace sg
