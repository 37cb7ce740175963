// scheduler.h: continuous batching for `stepgraph serve`, as pure host code: the scheduler decides
// which requests hold a cache slot and what each step runs; an executor (the CPU reference model,
// models/serve_reference.h, or the GPU ModelStep, models/serve_gpu.h) runs the steps and hands back
// one greedy token per sequence. The same scheduler drives both.
//
// Policy:
//   - Admission: requests are admitted in arrival order (ties in trace order) once the clock has
//     reached their arrival time, each into the lowest free slot; at most `slots` requests hold a
//     slot. First come, first served: a request waiting for a slot is never passed by a later one.
//   - Rejection: a request that can never fit (prompt_len + max_new - 1 tokens, the most its slot
//     ever holds, more than max_context; or an empty prompt, or max_new < 1) is rejected when it
//     arrives, with an error saying why; it takes no slot and the others run on.
//   - Steps are either prefill or decode (never mixed). A prefill step runs whenever an admitted
//     request still has prompt tokens to prefill, except that after `max_prefill_streak`
//     consecutive prefill steps (1 by default) a decode step runs if any request is decoding. So
//     with both kinds of work waiting the steps alternate: a decoding request waits at most
//     max_prefill_streak prefill steps for its next token, and a prefill waits at most one decode
//     step.
//   - A prefill step packs the prompts of admitted requests in admission order, each from where
//     its last chunk ended (the earlier chunks are its history), up to `prefill_budget` tokens and
//     `max_prefill_seqs` sequences: a long prompt is prefilled in several chunks. The chunk that
//     ends a prompt yields the request's first generated token (time to first token).
//   - A decode step runs one row per decoding request (in slot order), feeding back its last
//     token at position prompt_len + generated - 1; its key is the smallest decode key that holds
//     the rows (the padded batch of a captured graph).
//   - A request ends when it has max_new tokens; its slot is free for the next step's admission.
// Times are milliseconds on the executor's clock, measured from the start of the run.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/serve_trace.h"
#include "models/step_metadata.h"

namespace sg {

struct SchedulerOptions {
  int slots = 32;                    // concurrency limit: requests holding a cache slot at once
  int prefill_budget = 2048;         // prompt tokens one prefill step holds
  int max_prefill_seqs = 0;          // sequences one prefill step holds (0: slots)
  int max_context = 0;               // tokens a slot holds (the KV cache length); required
  int max_prefill_streak = 1;        // consecutive prefill steps while a request is decoding
  std::vector<int> decode_keys;      // padded decode batch sizes, ascending (empty: unpadded)
  std::vector<int> prefill_buckets;  // prefill token buckets, ascending (empty: unpadded)
};

// One step for the executor: request i of `requests` is sequence (prefill) or row (decode) i.
struct ScheduledStep {
  StepKind kind = StepKind::decode;
  int index = 0;                        // steps run before this one
  int key = 0;                          // decode: padded rows; prefill: token bucket (or the live count, unpadded)
  std::vector<int> requests;            // the trace index of each sequence / row
  std::vector<PrefillRequest> prefill;  // kind == prefill: slot, the chunk's tokens, start position
  std::vector<DecodeRequest> decode;    // kind == decode: slot, token, position
  int tokens() const;                   // live tokens (prefill: summed chunk lengths; decode: rows)
};

enum class RequestPhase : uint8_t { pending, prefill, decode, finished, rejected };

struct RequestState {
  RequestPhase phase = RequestPhase::pending;
  int slot = -1;                // the slot it holds, -1 when none (pending, finished, rejected)
  int last_slot = -1;           // the slot it held (finished requests)
  int prefilled = 0;            // prompt tokens in its slot
  int chunks = 0;               // prefill chunks run
  std::vector<int32_t> prompt;  // a made prompt's ids (prompt_tokens) while it is prefilled; freed after
  std::vector<int32_t> generated;
  double admitted_ms = -1, first_token_ms = -1, finished_ms = -1;
  std::string error;  // why it was rejected
};

class Scheduler {
 public:
  // Checks the options (sg::Error naming the bad one); the requests need their prompts prepared
  // (prepare_prompts: a length-only prompt's ids are made when it is admitted).
  Scheduler(std::vector<ServeRequest> requests, SchedulerOptions options);

  // Admits (and rejects) what has arrived by now_ms, then returns the next step, or nullopt when
  // nothing can run now (nothing admitted: wait for next_arrival(), or done()).
  std::optional<ScheduledStep> next(double now_ms);
  // Takes the step's tokens (one per sequence / row: the greedy next token; for a prefill chunk
  // that does not end its prompt the token is ignored) at now_ms; frees the slots of finished
  // requests.
  void complete(const ScheduledStep& step, const std::vector<int32_t>& tokens, double now_ms);

  bool done() const { return unresolved_ == 0; }
  int resolved() const { return static_cast<int>(requests_.size()) - unresolved_; }  // finished or rejected
  int64_t generated_tokens() const { return generated_; }
  // The earliest arrival of a request not yet admitted or rejected (nullopt when none).
  std::optional<double> next_arrival() const;
  int busy_slots() const;
  const std::vector<ServeRequest>& requests() const { return requests_; }
  const std::vector<RequestState>& states() const { return states_; }
  const SchedulerOptions& options() const { return opt_; }
  int steps() const { return steps_; }

 private:
  void admit(double now_ms);
  void finish(int r, double now_ms);
  ScheduledStep prefill_step();
  ScheduledStep decode_step();
  const std::vector<int32_t>& prompt(int r) const;  // request r's ids: as given, or made on admission

  std::vector<ServeRequest> requests_;
  SchedulerOptions opt_;
  std::vector<RequestState> states_;
  std::vector<int> arrivals_;    // request indices in arrival order
  size_t next_arrival_ = 0;      // arrivals_[next_arrival_..] have not arrived yet
  std::deque<int> queue_;        // arrived, waiting for a slot, in arrival order
  std::vector<int> admitted_;    // requests holding a slot, in admission order
  std::vector<int> slot_owner_;  // per slot: the request holding it, -1 when free
  int unresolved_ = 0;           // requests neither finished nor rejected
  int prefill_streak_ = 0;
  int steps_ = 0;
  int64_t generated_ = 0;
  bool in_flight_ = false;  // a step was handed out and not completed yet
};

// One step as run: for the metrics.
struct StepRecord {
  StepKind kind = StepKind::decode;
  int key = 0;
  int seqs = 0;    // sequences (prefill) or rows (decode)
  int tokens = 0;  // live tokens
  double start_ms = 0, end_ms = 0;
  double floor_ms = 0;  // the executor's floor for the step (0 when it has none)
};

// What runs the steps. `run` returns one token per sequence / row.
inline constexpr double kStopPollMs = 100;  // the longest wait between two calls of ServeExecutor::stop

struct ServeExecutor {
  std::function<double()> now_ms;  // a monotonic clock, any origin
  std::function<std::vector<int32_t>(const ScheduledStep&)> run;
  std::function<void(double clock_ms)> wait_until;                   // idle until now_ms() reads clock_ms
  std::function<double(const ScheduledStep&)> floor_ms;              // optional
  std::function<void(const Scheduler&, const StepRecord&)> on_step;  // optional (progress)
  // Optional, asked before each step and each wait (a wait for a later arrival is cut into slices
  // of kStopPollMs, the hook asked between them): true ends the run there (a Ctrl-C); the result is
  // marked interrupted and keeps what the steps so far did.
  std::function<bool()> stop;
};

// The steady clock in milliseconds and a sleeping wait, around `run`.
ServeExecutor wall_clock_executor(std::function<std::vector<int32_t>(const ScheduledStep&)> run);

struct ServeResult {
  std::vector<ServeRequest> requests;
  std::vector<RequestState> states;  // every request finished or rejected
  std::vector<StepRecord> steps;
  double wall_ms = 0;         // from the start to the end of the last step
  int slots_busy_at_end = 0;  // 0 unless something went wrong, or the run was interrupted
  bool interrupted = false;   // ServeExecutor::stop ended the run: some requests are unresolved
};

// Runs the whole trace: next step, run, complete, until every request is finished or rejected (or
// exec.stop says stop).
ServeResult run_serve(std::vector<ServeRequest> requests, const SchedulerOptions& options, const ServeExecutor& exec);

}  // namespace sg
