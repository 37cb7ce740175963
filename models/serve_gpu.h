// serve_gpu.h: the GPU model step (models/model_step.h) as the executor of a serving run
// (models/scheduler.h). A prefill step's chunks run as one prefill step through the graph of the
// bucket the scheduler chose, a decode step's rows through the padded decode graph of its key;
// scheduler slots are cache slots (a chunk at position 0 starts its slot afresh: no history is
// read). Only the greedy tokens come back to the host (not the logits).
#pragma once
#include <cstdint>
#include <vector>

#include "graphs/node_timer.h"
#include "graphs/step_graphs.h"
#include "models/model_step.h"
#include "models/scheduler.h"
#include "models/serve_metrics.h"

namespace sg {

// The scheduler options that match `step`: its slots, context, prefill budget (max_prefill_tokens)
// and sequences per prefill, its decode keys and prefill buckets.
SchedulerOptions scheduler_options_for(const ModelStep& step);

// Runs `s` on `step` (graph replay in RunMode::graph, else eager) and returns one token per
// sequence / row; an error when the step padded to another key than the scheduler's.
std::vector<int32_t> run_model_step(ModelStep& step, const ScheduledStep& s, RunMode mode);

// A lower bound on the step's time: the larger of
//   bytes / gbps: every weight byte, the recurrent state of each sequence (written; read too when
//     it continues a sequence), and the K and V of every cached position each sequence attends to;
//   flops / tflops: 2 x weight elements x live tokens (the projections) + 4 x Hq x D per attention
//     layer for every (query, key) pair (causal), the bf16 tensor-core peak being the usual tflops.
double step_floor_ms(const ModelStep& step, const ScheduledStep& s, double gbps, double tflops);

// Every captured graph's node times over a run (records from NodeTimer::stop()): one sample per
// node with its calls and summed time. `unmatched`: records of no captured graph (eager launches).
std::vector<NodeSample> node_samples(const StepGraphs& graphs, const std::vector<KernelRecord>& records,
                                     int64_t* unmatched = nullptr);

}  // namespace sg
