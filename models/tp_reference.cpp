// tp_reference.cpp: the CPU reference over tensor-parallel ranks (tp_reference.h).
#include "models/tp_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <system_error>
#include <thread>

#include "engine/error.h"
#include "kernels/ref/mlp_ref.h"
#include "models/tp_plan.h"

namespace sg {

TpGeneration tp_generate(const Qwen35Config& c, const HostWeights& w, int ranks, const std::vector<int64_t>& prompt,
                         int max_new, ReferenceOptions options, TpFault fault,
                         const std::function<bool(int)>& keep_going) {
  if (prompt.empty()) throw Error("tp_generate: the prompt is empty");
  if (max_new < 1) throw Error(fmt::format("tp_generate: max_new ({}) must be >= 1", max_new));
  for (int64_t t : prompt)
    if (t < 0 || t >= c.vocab) throw Error(fmt::format("tp_generate: token {} outside [0, {})", t, c.vocab));
  const TpPlan plan = tp_plan(c, ranks);
  const size_t R = static_cast<size_t>(ranks);
  // The ranks meet at every collective: each publishes its buffer (or its pair), all read them
  // all, and a second meeting lets each overwrite its own; nothing between the two meetings can
  // throw. A rank that fails marks the run failed and leaves the meetings (arrive_and_drop); the
  // meeting's completion copies the mark into `stop`, so every rank makes the same decision after
  // the same meeting, and none reads a buffer of a rank that is gone.
  std::atomic<bool> failed{false};
  bool stop = false;
  const auto on_meeting = [&]() noexcept { stop = failed.load(); };
  std::barrier meet(ranks, on_meeting);
  std::exception_ptr first_error;
  auto fail_run = [&](std::exception_ptr e) {
    if (!failed.exchange(true)) first_error = std::move(e);
  };
  auto sync = [&] {
    meet.arrive_and_wait();
    if (stop) throw Error("tp_generate: another rank failed");
  };
  std::vector<std::vector<float>*> bufs(R, nullptr);
  std::vector<std::pair<float, int64_t>> best(R);
  std::vector<char> votes(R, 0);  // a rank's wish to stop, published with its pair
  std::atomic<bool> halt{false};  // rank 0's keep_going said no
  TpGeneration out;
  out.first_logits.assign(static_cast<size_t>(c.vocab), 0.0f);
  auto run = [&](size_t r) {
    try {
      const TpRank& k = plan.rank[r];
      int collectives = 0;
      auto collective = [&] {  // the fault drill (tests): this rank fails at its k-th collective
        if (static_cast<int>(r) == fault.rank && collectives++ == fault.collective)
          throw Error(fmt::format("tp_generate: rank {} failed at collective {} (drill)", r, fault.collective));
      };
      ReferenceOptions opt = options;
      opt.head_rows = k.vocab.size();
      opt.all_reduce = [&, r](std::vector<float>& v) {
        collective();
        std::vector<float> sum(v.size(), 0.0f);  // before the first meeting: nothing after it throws
        bufs[r] = &v;
        sync();
        for (size_t q = 0; q < R; ++q)
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += (*bufs[q])[i];
        meet.arrive_and_wait();  // everyone has read every buffer (no rank left in between)
        v.swap(sum);
      };
      ReferenceModel m(k.config, shard_weights(c, w, plan, static_cast<int>(r)), 1,
                       static_cast<int64_t>(prompt.size()) + max_new, opt);
      std::vector<float> logits = m.prefill({Sequence{0, prompt}});
      std::copy(logits.begin(), logits.end(), out.first_logits.begin() + k.vocab.begin);  // its own rows
      for (int i = 0; i < max_new; ++i) {
        collective();
        const int64_t local = ref::argmax(logits.data(), k.vocab.size());
        best[r] = {logits[static_cast<size_t>(local)], k.vocab.begin + local};
        votes[r] = halt.load() ? 1 : 0;
        sync();
        const int64_t token = tp_greedy(best);
        const bool quit = std::find(votes.begin(), votes.end(), 1) != votes.end();  // the same on every rank
        meet.arrive_and_wait();  // everyone has read every pair and vote
        if (quit) break;
        if (r == 0) {
          out.tokens.push_back(token);
          if (keep_going && !keep_going(i + 1)) halt = true;
        }
        if (i + 1 < max_new) logits = m.decode({0}, {token});
      }
    } catch (...) {
      fail_run(std::current_exception());
      meet.arrive_and_drop();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(R);
  for (size_t r = 0; r < R; ++r) {
    try {
      threads.emplace_back(run, r);
    } catch (...) {  // the ranks that did not start leave the meetings, so the others do not wait
      fail_run(std::current_exception());
      for (size_t q = r; q < R; ++q) meet.arrive_and_drop();
      break;
    }
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

}  // namespace sg
