// serve_metrics.h: what a serving run (models/scheduler.h) reports: throughput (all tokens and
// output tokens per second of the run), time to first token and time per output token at p50, p90
// and p99 over the requests, steps per kind and key with their summed time (and floor, when the
// executor gives one), a hash of every request's tokens, and, from a GPU run under CUPTI, the
// graph-node time per op family summed over the whole run, with the conv and post-conv families
// (conv.*, postconv, the fused gdn.* ops) broken out by arm. Pure host code.
//   TTFT of a request: the end of the step that ran its last prompt chunk, minus its arrival.
//   TPOT of a request: (its end - its first token) / (tokens - 1); requests of one token have none.
// Percentiles are nearest-rank: the smallest value with at least p% of the values at or below it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/scheduler.h"

namespace sg {

struct Percentiles {
  int count = 0;
  double p50 = 0, p90 = 0, p99 = 0;
};
Percentiles percentiles(std::vector<double> values);

struct StepKeyStats {
  int steps = 0;
  int64_t tokens = 0;   // live tokens
  double ms = 0;        // summed step time
  double floor_ms = 0;  // summed floors
};

struct ServeMetrics {
  int requests = 0, completed = 0, rejected = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;  // of completed requests
  double wall_ms = 0;
  double tokens_per_s = 0, output_tokens_per_s = 0;
  Percentiles ttft_ms, tpot_ms;
  std::map<std::pair<StepKind, int>, StepKeyStats> steps;  // per kind and key (step_name)
  StepKeyStats all_steps;
  int chunked_requests = 0;  // prompts prefilled in more than one chunk
  int max_chunks = 0;
  uint64_t token_hash = 0;  // every completed request's index, count and tokens, in trace order
  int slots_busy_at_end = 0;
};
ServeMetrics serve_metrics(const ServeResult& r);
// "decode 32", "prefill 2048".
std::string step_name(StepKind kind, int key);

// The request's own token hash (token_hash of its generated tokens).
uint64_t request_hash(const RequestState& st);

// A text report: throughput, latencies, steps per key, chunking, token hash, rejections.
std::string format_metrics(const ServeMetrics& m, const ServeResult& r);
nlohmann::json metrics_json(const ServeMetrics& m);
// Every request: trace index, line, lengths, arrival, slot, chunks, TTFT, TPOT, tokens, hash or error.
nlohmann::json requests_json(const ServeResult& r);

// One graph node's time over a run (NodeStats: calls and calls x mean).
struct NodeSample {
  std::string op, arm;
  int64_t calls = 0;
  double total_us = 0;
};
struct FamilyTime {
  std::string family;
  int64_t calls = 0;
  double total_ms = 0;
  double mean_us() const { return calls > 0 ? 1000.0 * total_ms / static_cast<double>(calls) : 0.0; }
};
// "conv.update [fast]" for the conv and post-conv families (op conv.*, postconv*, gdn.*), else the op.
std::string serve_op_family(const std::string& op, const std::string& arm);
// Summed per family, largest total first.
std::vector<FamilyTime> family_times(const std::vector<NodeSample>& nodes);
std::string format_family_table(const std::vector<FamilyTime>& families);
nlohmann::json families_json(const std::vector<FamilyTime>& families);

// "serve [########------------] 12/32 requests, 1536 tokens out, 2.1 s"
std::string serve_progress_line(int done, int total, int64_t output_tokens, double elapsed_ms);

}  // namespace sg
