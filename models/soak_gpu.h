// soak_gpu.h: the soak run on the GPU model step (`stepgraph soak`; bookkeeping in models/soak.h):
// many decode-step graph replays of one batch, with greedy tokens fed back, that must produce the
// same tokens period after period and keep device and host memory flat.
//
//   The batch: `rows` decode rows, row r in cache slot r. A period of `period` replays starts from
//   zeroed caches (ModelStep::clear_caches: every slot empty, no history) with row r's first token
//   soak_first_token(r) at position 0; replay j of the period runs position j, and each replay's
//   argmax tokens (downloaded, a few bytes) are the next replay's input tokens, as `generate` and
//   `serve` feed them. Positions never pass period - 1, so the caches need only `period` tokens per
//   slot however long the run, and every period is the same computation.
//   The reference: one period (or the whole run when shorter) launched eagerly, before any graph
//   replay, on the same step; graph replay is byte-identical to eager by contract (tests/gpu/
//   test_model_step.cpp), so every replay's running period hash must equal the reference's at the
//   same position. The first replay that differs ends the run as a failure naming it.
//   Memory: after replay 0 (the baseline: the first replay's one-time costs are in it), after every
//   `check_every` replays and after the last one, device memory in use (cudaMemGetInfo) and this
//   process's RSS (/proc/self/statm); a sample beyond the tolerance over the baseline ends the run.
//   Any replay that did not replay a captured graph (an eager fallback) is a failure too.
//   With a prompt (SoakOptions::prompt > 0), as a server does: every period (the reference's too)
//   starts with one prefill step of `prompt` tokens a row (soak_prompt_token) into the zeroed caches,
//   graphed in the run and eager in the reference; its greedy tokens are the period's first tokens,
//   and must equal the reference prefill's (a failure naming the replay otherwise); the decode
//   replays then run positions prompt .. prompt + period - 1.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/model_step.h"
#include "models/soak.h"

namespace sg {

struct SoakOptions {
  int64_t replays = 100000;
  int period = 1024;
  int check_every = 1000;
  int rows = 32;
  int prompt = 0;  // prompt tokens a row prefilled at every period's start (0: none, first tokens at position 0)
  MemoryTolerance tolerance;
  // Polled after every replay (and every reference step): true ends the run there, as interrupted.
  std::function<bool()> stop;
  // After every graphed replay: replays done, seconds since the first graphed replay began (the
  // prompts' prefills included).
  std::function<void(int64_t done, double seconds)> on_replay;
};

struct SoakResult {
  int64_t replays_requested = 0;
  int64_t replays_done = 0;  // graphed replays run (and checked)
  int rows = 0, key = 0, period = 0, check_every = 0, prompt = 0;
  int reference_steps = 0;     // eager decode steps of the reference pass run
  int64_t prefills_done = 0;   // graphed prefill steps run (one a period, with a prompt)
  bool interrupted = false;    // stopped by SoakOptions::stop before the end
  std::string failure;         // empty: no failure
  int64_t failed_replay = -1;  // the replay the failure names (-1: none, or before any replay)
  std::optional<HashMismatch> mismatch;
  bool prefill_mismatch = false;  // a period's prefill gave other tokens than the reference's
  uint64_t reference_hash = 0, run_hash = 0;
  int64_t periods_completed = 0;
  int distinct_tokens = 0;  // different token ids in the reference period
  MemoryDrift memory;
  std::vector<MemorySample> samples;
  int eager_fallbacks = 0;                    // during the graphed run
  double reference_seconds = 0, seconds = 0;  // the eager reference pass, the graphed run (prefills included)
  double ms_per_replay() const { return replays_done > 0 ? 1000.0 * seconds / static_cast<double>(replays_done) : 0.0; }
  bool ok() const { return failure.empty(); }
  // "failed", "interrupted" or "ok".
  std::string status() const { return !ok() ? "failed" : interrupted ? "interrupted" : "ok"; }
};

// Row r's first token of every period (without a prompt), and token i of its prompt.
int32_t soak_first_token(int row, int64_t vocab);
int32_t soak_prompt_token(int row, int i, int64_t vocab);

// A step for a soak: `rows` slots and decode rows, `prompt` + `period` tokens per slot, and prefill
// steps of rows x prompt tokens (none without a prompt). The caller sets the dtype, seed, arms and
// settings, then constructs the step and captures it (capture_all(false, prompt > 0)).
ModelStepOptions soak_step_options(int rows, int period, int prompt = 0);

// Device memory in use, the whole device: total - free from cudaMemGetInfo.
uint64_t device_memory_used();

// Runs the soak on `step` (captured). Throws sg::Error when the options do not fit the step (rows
// beyond its slots or decode rows, a period beyond its context); a kernel that faults in a step is
// thrown as that step's fault (ModelStep::tokens: a KernelFault naming the graph), other CUDA
// errors as they come.
// Hash, memory and fallback failures are returned in the result, with what was measured so far.
SoakResult run_soak(ModelStep& step, const SoakOptions& o);

}  // namespace sg
