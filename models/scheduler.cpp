// scheduler.cpp: admission, step choice, chunking and completion (see scheduler.h), and the loop
// that runs a trace through an executor.
#include "models/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "engine/error.h"
#include "engine/text.h"

namespace sg {
namespace {

// The smallest key >= n, or n itself when there are no keys or every key is smaller.
int pad_to(const std::vector<int>& keys, int n) {
  const auto it = std::lower_bound(keys.begin(), keys.end(), n);
  return it == keys.end() ? n : *it;
}

void check_keys(const std::vector<int>& keys, const char* what) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] < 1 || (i > 0 && keys[i] <= keys[i - 1])) {
      throw Error(fmt::format("scheduler: {} must be positive and ascending (entry {} is {})", what, i, keys[i]));
    }
  }
}

}  // namespace

int ScheduledStep::tokens() const {
  if (kind == StepKind::decode) return static_cast<int>(decode.size());
  int n = 0;
  for (const auto& p : prefill) n += static_cast<int>(p.tokens.size());
  return n;
}

Scheduler::Scheduler(std::vector<ServeRequest> requests, SchedulerOptions options)
    : requests_(std::move(requests)), opt_(std::move(options)) {
  if (opt_.max_prefill_seqs == 0) opt_.max_prefill_seqs = opt_.slots;
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("scheduler: " + what);
  };
  need(opt_.slots >= 1, fmt::format("slots (the concurrency limit) must be >= 1, got {}", opt_.slots));
  need(opt_.prefill_budget >= 1, fmt::format("the prefill token budget must be >= 1, got {}", opt_.prefill_budget));
  need(opt_.max_prefill_seqs >= 1,
       fmt::format("sequences per prefill step must be >= 1, got {}", opt_.max_prefill_seqs));
  need(opt_.max_context >= 1, fmt::format("the context (tokens per slot) must be >= 1, got {}", opt_.max_context));
  need(opt_.max_prefill_streak >= 1, fmt::format("the prefill streak must be >= 1, got {}", opt_.max_prefill_streak));
  check_keys(opt_.decode_keys, "decode keys");
  check_keys(opt_.prefill_buckets, "prefill buckets");
  for (size_t i = 0; i < requests_.size(); ++i) {
    const ServeRequest& q = requests_[i];
    require(q.prompt_vocab > 0 ? q.prompt.empty() : q.prompt.size() == static_cast<size_t>(std::max(q.prompt_len, 0)),
            "scheduler: request {} has prompt_len {} but {} prompt tokens (prepare_prompts first)", i, q.prompt_len,
            q.prompt.size());
  }
  states_.resize(requests_.size());
  arrivals_.resize(requests_.size());
  std::iota(arrivals_.begin(), arrivals_.end(), 0);
  std::stable_sort(arrivals_.begin(), arrivals_.end(),
                   [&](int a, int b) { return requests_[a].arrival_ms < requests_[b].arrival_ms; });
  slot_owner_.assign(static_cast<size_t>(opt_.slots), -1);
  unresolved_ = static_cast<int>(requests_.size());
}

std::optional<double> Scheduler::next_arrival() const {
  if (next_arrival_ >= arrivals_.size()) return std::nullopt;
  return requests_[static_cast<size_t>(arrivals_[next_arrival_])].arrival_ms;
}

int Scheduler::busy_slots() const {
  return static_cast<int>(std::count_if(slot_owner_.begin(), slot_owner_.end(), [](int r) { return r >= 0; }));
}

void Scheduler::admit(double now_ms) {
  // Arrived requests join the queue; one that can never fit is rejected at once.
  while (next_arrival_ < arrivals_.size()) {
    const int r = arrivals_[next_arrival_];
    const ServeRequest& q = requests_[static_cast<size_t>(r)];
    if (q.arrival_ms > now_ms) break;
    ++next_arrival_;
    RequestState& st = states_[static_cast<size_t>(r)];
    const int64_t most = int64_t{q.prompt_len} + q.max_new - 1;
    if (q.prompt_len < 1 || q.max_new < 1) {
      st.error = fmt::format("prompt of {} tokens and max_new {}: both must be >= 1", q.prompt_len, q.max_new);
    } else if (most > opt_.max_context) {
      st.error = fmt::format(
          "prompt of {} + {} needs {} cached tokens, more than the context of {} per slot, so it can never run",
          count_of(q.prompt_len, "token"), count_of(q.max_new, "new token"), most, count_of(opt_.max_context, "token"));
    }
    if (!st.error.empty()) {
      st.phase = RequestPhase::rejected;
      st.finished_ms = now_ms;
      --unresolved_;
      continue;
    }
    queue_.push_back(r);
  }
  // First come, first served into the lowest free slot.
  while (!queue_.empty()) {
    const auto free = std::find(slot_owner_.begin(), slot_owner_.end(), -1);
    if (free == slot_owner_.end()) break;
    const int r = queue_.front();
    queue_.pop_front();
    RequestState& st = states_[static_cast<size_t>(r)];
    st.phase = RequestPhase::prefill;
    const ServeRequest& q = requests_[static_cast<size_t>(r)];
    if (q.prompt_vocab > 0) st.prompt = prompt_tokens(q);  // made now: only admitted prompts hold ids
    st.slot = static_cast<int>(free - slot_owner_.begin());
    st.admitted_ms = now_ms;
    *free = r;
    admitted_.push_back(r);
  }
}

std::optional<ScheduledStep> Scheduler::next(double now_ms) {
  require(!in_flight_, "scheduler: next() before the previous step completed");
  admit(now_ms);
  bool has_prefill = false, has_decode = false;
  for (int r : admitted_) {
    has_prefill = has_prefill || states_[static_cast<size_t>(r)].phase == RequestPhase::prefill;
    has_decode = has_decode || states_[static_cast<size_t>(r)].phase == RequestPhase::decode;
  }
  if (!has_prefill && !has_decode) return std::nullopt;
  const bool prefill = has_prefill && (!has_decode || prefill_streak_ < opt_.max_prefill_streak);
  ScheduledStep s = prefill ? prefill_step() : decode_step();
  prefill_streak_ = prefill ? prefill_streak_ + 1 : 0;
  s.index = steps_++;
  in_flight_ = true;
  return s;
}

ScheduledStep Scheduler::prefill_step() {
  ScheduledStep s;
  s.kind = StepKind::prefill;
  int budget = opt_.prefill_budget;
  for (int r : admitted_) {
    const RequestState& st = states_[static_cast<size_t>(r)];
    if (st.phase != RequestPhase::prefill) continue;
    if (budget == 0 || static_cast<int>(s.prefill.size()) == opt_.max_prefill_seqs) break;
    const ServeRequest& q = requests_[static_cast<size_t>(r)];
    const int len = std::min(q.prompt_len - st.prefilled, budget);
    budget -= len;
    const auto first = prompt(r).begin() + st.prefilled;
    s.prefill.push_back(PrefillRequest{st.slot, std::vector<int32_t>(first, first + len), st.prefilled});
    s.requests.push_back(r);
  }
  s.key = pad_to(opt_.prefill_buckets, s.tokens());
  return s;
}

const std::vector<int32_t>& Scheduler::prompt(int r) const {
  const ServeRequest& q = requests_[static_cast<size_t>(r)];
  return q.prompt_vocab > 0 ? states_[static_cast<size_t>(r)].prompt : q.prompt;
}

ScheduledStep Scheduler::decode_step() {
  ScheduledStep s;
  s.kind = StepKind::decode;
  for (int r : slot_owner_) {  // slot order
    if (r < 0) continue;
    const RequestState& st = states_[static_cast<size_t>(r)];
    if (st.phase != RequestPhase::decode) continue;
    const int position = requests_[static_cast<size_t>(r)].prompt_len + static_cast<int>(st.generated.size()) - 1;
    s.decode.push_back(DecodeRequest{st.slot, st.generated.back(), position});
    s.requests.push_back(r);
  }
  s.key = pad_to(opt_.decode_keys, static_cast<int>(s.decode.size()));
  return s;
}

void Scheduler::complete(const ScheduledStep& step, const std::vector<int32_t>& tokens, double now_ms) {
  require(in_flight_ && step.index == steps_ - 1,
          "scheduler: complete() of step {} without it being the step in flight", step.index);
  require(tokens.size() == step.requests.size(),
          "scheduler: step {} has {} sequences but the executor returned {} tokens", step.index, step.requests.size(),
          tokens.size());
  in_flight_ = false;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    const int r = step.requests[i];
    RequestState& st = states_[static_cast<size_t>(r)];
    const ServeRequest& q = requests_[static_cast<size_t>(r)];
    if (step.kind == StepKind::prefill) {
      st.prefilled += static_cast<int>(step.prefill[i].tokens.size());
      ++st.chunks;
      if (st.prefilled < q.prompt_len) continue;
      st.phase = RequestPhase::decode;
      std::vector<int32_t>().swap(st.prompt);  // a made prompt is not read again
      st.first_token_ms = now_ms;
    }
    st.generated.push_back(tokens[i]);
    ++generated_;
    if (static_cast<int>(st.generated.size()) >= q.max_new) finish(r, now_ms);
  }
}

void Scheduler::finish(int r, double now_ms) {
  RequestState& st = states_[static_cast<size_t>(r)];
  st.phase = RequestPhase::finished;
  st.finished_ms = now_ms;
  st.last_slot = st.slot;
  slot_owner_[static_cast<size_t>(st.slot)] = -1;
  st.slot = -1;
  admitted_.erase(std::find(admitted_.begin(), admitted_.end(), r));
  --unresolved_;
}

ServeExecutor wall_clock_executor(std::function<std::vector<int32_t>(const ScheduledStep&)> run) {
  ServeExecutor e;
  e.now_ms = [] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  e.wait_until = [now = e.now_ms](double clock_ms) {
    const double wait = clock_ms - now();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait));
  };
  e.run = std::move(run);
  return e;
}

ServeResult run_serve(std::vector<ServeRequest> requests, const SchedulerOptions& options, const ServeExecutor& exec) {
  require(exec.now_ms && exec.run && exec.wait_until, "run_serve: the executor needs a clock, run and wait_until");
  Scheduler s(std::move(requests), options);
  ServeResult res;
  const double t0 = exec.now_ms();
  while (!s.done()) {
    if (exec.stop && exec.stop()) {
      res.interrupted = true;
      break;
    }
    const double now = exec.now_ms() - t0;
    std::optional<ScheduledStep> step = s.next(now);
    if (!step) {
      if (s.done()) break;  // the last requests were rejected
      const std::optional<double> at = s.next_arrival();
      require(at.has_value(), "run_serve: nothing to run and no request to come, with requests unresolved");
      // With a stop hook, waited in slices, so that a Ctrl-C during a wait for a late arrival (a
      // trace may wait up to a day) ends the run at once.
      exec.wait_until(exec.stop ? std::min(t0 + *at, exec.now_ms() + kStopPollMs) : t0 + *at);
      continue;
    }
    StepRecord rec;
    rec.kind = step->kind;
    rec.key = step->key;
    rec.seqs = static_cast<int>(step->requests.size());
    rec.tokens = step->tokens();
    rec.start_ms = now;
    if (exec.floor_ms) rec.floor_ms = exec.floor_ms(*step);
    const std::vector<int32_t> tokens = exec.run(*step);
    rec.end_ms = exec.now_ms() - t0;
    s.complete(*step, tokens, rec.end_ms);
    res.steps.push_back(rec);
    if (exec.on_step) exec.on_step(s, rec);
  }
  res.wall_ms = res.steps.empty() ? 0 : res.steps.back().end_ms;
  res.slots_busy_at_end = s.busy_slots();
  res.requests = s.requests();
  res.states = s.states();
  return res;
}

}  // namespace sg
