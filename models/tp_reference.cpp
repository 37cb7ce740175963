// tp_reference.cpp: the CPU reference over tensor-parallel ranks (tp_reference.h).
#include "models/tp_reference.h"

#include <fmt/format.h>

#include <atomic>
#include <barrier>
#include <exception>
#include <thread>

#include "engine/error.h"
#include "kernels/ref/mlp_ref.h"
#include "models/tp_plan.h"

namespace sg {

TpGeneration tp_generate(const Qwen35Config& c, const HostWeights& w, int ranks, const std::vector<int64_t>& prompt,
                         int max_new, ReferenceOptions options) {
  if (prompt.empty()) throw Error("tp_generate: the prompt is empty");
  if (max_new < 1) throw Error(fmt::format("tp_generate: max_new ({}) must be >= 1", max_new));
  for (int64_t t : prompt)
    if (t < 0 || t >= c.vocab) throw Error(fmt::format("tp_generate: token {} outside [0, {})", t, c.vocab));
  const TpPlan plan = tp_plan(c, ranks);
  const size_t R = static_cast<size_t>(ranks);
  // The ranks meet at every collective: each publishes its buffer (or its pair), all read them
  // all, and a second meeting lets each overwrite its own. A rank that fails marks the run failed
  // and leaves the meetings; the others see the mark at their next meeting and stop too.
  std::barrier<> meet(ranks);
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  auto sync = [&] {
    meet.arrive_and_wait();
    if (failed.load()) throw Error("tp_generate: another rank failed");
  };
  std::vector<std::vector<float>*> bufs(R, nullptr);
  std::vector<std::pair<float, int64_t>> best(R);
  TpGeneration out;
  out.first_logits.assign(static_cast<size_t>(c.vocab), 0.0f);
  auto run = [&](size_t r) {
    try {
      const TpRank& k = plan.rank[r];
      ReferenceOptions opt = options;
      opt.head_rows = k.vocab.size();
      opt.all_reduce = [&, r](std::vector<float>& v) {
        bufs[r] = &v;
        sync();
        std::vector<float> sum(v.size(), 0.0f);
        for (size_t q = 0; q < R; ++q)
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += (*bufs[q])[i];
        sync();
        v = std::move(sum);
      };
      ReferenceModel m(k.config, shard_weights(c, w, plan, static_cast<int>(r)), 1,
                       static_cast<int64_t>(prompt.size()) + max_new, opt);
      std::vector<float> logits = m.prefill({Sequence{0, prompt}});
      std::copy(logits.begin(), logits.end(), out.first_logits.begin() + k.vocab.begin);  // its own rows
      for (int i = 0; i < max_new; ++i) {
        const int64_t local = ref::argmax(logits.data(), k.vocab.size());
        best[r] = {logits[static_cast<size_t>(local)], k.vocab.begin + local};
        sync();
        const int64_t token = tp_greedy(best);
        sync();
        if (r == 0) out.tokens.push_back(token);
        if (i + 1 < max_new) logits = m.decode({0}, {token});
      }
    } catch (...) {
      if (!failed.exchange(true)) first_error = std::current_exception();
      meet.arrive_and_drop();
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 0; r < R; ++r) threads.emplace_back(run, r);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

}  // namespace sg
