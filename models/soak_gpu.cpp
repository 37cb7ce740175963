// soak_gpu.cpp: the soak run on the GPU model step (see soak_gpu.h).
#include "models/soak_gpu.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "graphs/capture_sizes.h"

namespace sg {

int32_t soak_first_token(int row, int64_t vocab) { return static_cast<int32_t>((int64_t{row} * 7919 + 17) % vocab); }

int32_t soak_prompt_token(int row, int i, int64_t vocab) {
  return static_cast<int32_t>((int64_t{row} * 104729 + int64_t{i} * 7919 + 3) % vocab);
}

ModelStepOptions soak_step_options(int rows, int period, int prompt) {
  ModelStepOptions o;
  o.num_slots = rows;
  o.max_decode_batch = rows;
  o.max_context = period + prompt;
  o.max_prefill_tokens = rows * prompt;  // 0: decode steps only
  o.max_prefill_seqs = rows;
  return o;
}

uint64_t device_memory_used() {
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes > free_bytes ? total_bytes - free_bytes : 0;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The prompts of a period's prefill: row r in slot r, from position 0.
std::vector<PrefillRequest> prompt_batch(int rows, int prompt, int64_t vocab) {
  std::vector<PrefillRequest> batch(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    batch[r].slot = r;
    for (int i = 0; i < prompt; ++i) batch[r].tokens.push_back(soak_prompt_token(r, i, vocab));
  }
  return batch;
}

// The batch of one replay: row r in slot r with its token, all rows at `position`.
void fill_batch(std::vector<DecodeRequest>& batch, const std::vector<int32_t>& tokens, int position) {
  for (size_t r = 0; r < batch.size(); ++r) batch[r] = DecodeRequest{static_cast<int32_t>(r), tokens[r], position};
}

void first_tokens(std::vector<int32_t>& tokens, int64_t vocab) {
  for (size_t r = 0; r < tokens.size(); ++r) tokens[r] = soak_first_token(static_cast<int>(r), vocab);
}

}  // namespace

SoakResult run_soak(ModelStep& step, const SoakOptions& o) {
  const ModelStepOptions& so = step.options();
  if (o.rows < 1 || o.rows > so.max_decode_batch || o.rows > so.num_slots) {
    throw Error(fmt::format("soak: {} rows do not fit the step ({} slots, {} decode rows)", o.rows, so.num_slots,
                            so.max_decode_batch));
  }
  if (o.check_every < 1) throw Error(fmt::format("soak: --check-every must be at least 1 (got {})", o.check_every));
  PeriodLedger ledger(o.period, o.replays);
  if (o.prompt < 0) throw Error(fmt::format("soak: the prompt must not be negative (got {})", o.prompt));
  if (int64_t{o.prompt} + ledger.reference_length() > so.max_context) {
    throw Error(fmt::format(
        "soak: a prompt of {} tokens and a period of {} positions do not fit the step's context of {} tokens per slot",
        o.prompt, ledger.reference_length(), so.max_context));
  }
  if (o.prompt > 0 && o.rows > so.max_prefill_seqs) {
    throw Error(fmt::format("soak: a prefill of {} rows does not fit the step's {} prefill sequences", o.rows,
                            so.max_prefill_seqs));
  }
  if (int64_t{o.prompt} * o.rows > so.max_prefill_tokens) {
    throw Error(fmt::format("soak: a prefill of {} rows x {} prompt tokens does not fit the step's {} prefill tokens",
                            o.rows, o.prompt, so.max_prefill_tokens));
  }
  const auto key = pad_to_key(step.keys(), o.rows);
  SoakResult res;
  res.replays_requested = o.replays;
  res.rows = o.rows;
  res.key = key ? *key : o.rows;
  res.period = o.period;
  res.check_every = o.check_every;
  res.prompt = o.prompt;
  res.memory = MemoryDrift(o.tolerance);
  // Every sample's slot is taken (and touched) now, so that keeping them grows no memory later:
  // the baseline, one per check, the last.
  res.samples.resize(static_cast<size_t>(2 + o.replays / o.check_every));
  size_t samples = 0;
  const int64_t vocab = step.config().vocab;
  auto stopping = [&] { return o.stop && o.stop(); };

  std::vector<int32_t> tokens(static_cast<size_t>(o.rows));
  std::vector<DecodeRequest> batch(static_cast<size_t>(o.rows));
  const std::vector<PrefillRequest> prompts = prompt_batch(o.prompt > 0 ? o.rows : 0, o.prompt, vocab);
  std::vector<int32_t> reference_first;  // the reference prefill's tokens (with a prompt)
  // A period's start: zeroed caches, then the prompts' prefill (its tokens the first ones) or the
  // fixed first tokens.
  auto start_period = [&](RunMode mode) {
    step.clear_caches();
    if (o.prompt > 0) {
      step.enqueue_prefill(prompts, mode);  // its greedy tokens without the logits' download
      tokens = step.tokens(o.rows);
    } else {
      first_tokens(tokens, vocab);
    }
  };

  // The reference: one period launched eagerly.
  const auto t_ref = Clock::now();
  start_period(RunMode::eager);
  reference_first = tokens;
  for (int j = 0; j < ledger.reference_length(); ++j) {
    fill_batch(batch, tokens, o.prompt + j);
    step.enqueue(batch, RunMode::eager);
    tokens = step.tokens(o.rows);
    ledger.add_reference(tokens);
    ++res.reference_steps;
    if (stopping()) break;
  }
  res.reference_seconds = seconds_since(t_ref);
  res.reference_hash = ledger.reference_hash();
  res.distinct_tokens = ledger.reference_distinct_tokens();
  if (!ledger.reference_complete()) {  // stopped during the reference: no replay ran, nothing sampled
    res.interrupted = true;
    res.samples.clear();
    return res;
  }

  // The graphed run.
  const int fallbacks_before = step.eager_fallbacks();
  int64_t last_sampled = -2;
  auto sample = [&](int64_t replay) -> bool {
    const MemorySample s{replay, device_memory_used(), host_rss_bytes()};
    res.samples[samples++] = s;
    last_sampled = replay;
    if (auto m = res.memory.add(s)) {
      res.failure = *m;
      res.failed_replay = replay;
      return false;
    }
    return true;
  };
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < o.replays; ++i) {
    if (ledger.starts_period(i)) {
      start_period(RunMode::graph);
      if (o.prompt > 0) {
        ++res.prefills_done;
        if (step.eager_fallbacks() != fallbacks_before) {
          res.failure = fmt::format(
              "replay {}: the prompt's prefill ran eagerly (no prefill graph was captured for "
              "{} rows x {} tokens)",
              i, o.rows, o.prompt);
          res.failed_replay = i;
          break;
        }
        if (tokens != reference_first) {
          res.prefill_mismatch = true;
          res.failure = fmt::format(
              "replay {} (period {}): the prompt's prefill gave other greedy tokens than the eager reference's", i,
              i / o.period);
          res.failed_replay = i;
          break;
        }
      }
    }
    fill_batch(batch, tokens, o.prompt + ledger.position(i));
    step.enqueue(batch, RunMode::graph);
    tokens = step.tokens(o.rows);
    res.replays_done = i + 1;
    if (step.eager_fallbacks() != fallbacks_before) {
      res.failure =
          fmt::format("replay {}: the step ran eagerly (no graph was captured for decode key {})", i, res.key);
      res.failed_replay = i;
      break;
    }
    if (const auto m = ledger.add(i, tokens)) {
      res.mismatch = m;
      res.failure = m->describe();
      res.failed_replay = i;
      break;
    }
    const bool check_now = i == 0 || (i + 1) % o.check_every == 0;
    if (check_now && !sample(i)) break;
    if (o.on_replay) o.on_replay(i + 1, seconds_since(t0));
    if (i + 1 < o.replays && stopping()) {
      res.interrupted = true;
      break;
    }
  }
  res.seconds = seconds_since(t0);
  // The last replay is always sampled (unless the run failed before it could be).
  if (res.ok() && res.replays_done > 0 && last_sampled != res.replays_done - 1) sample(res.replays_done - 1);
  res.samples.resize(samples);
  res.eager_fallbacks = step.eager_fallbacks() - fallbacks_before;
  res.run_hash = ledger.run_hash();
  res.periods_completed = ledger.periods_completed();
  return res;
}

}  // namespace sg
