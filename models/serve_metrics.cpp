// serve_metrics.cpp: the metrics of a serving run, their text and JSON forms, op families and the
// progress line (see serve_metrics.h).
#include "models/serve_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/text.h"

namespace sg {
namespace {

using nlohmann::json;

json percentiles_json(const Percentiles& p) {
  if (p.count == 0) return {{"count", 0}, {"p50", nullptr}, {"p90", nullptr}, {"p99", nullptr}};  // no sample: none
  return {{"count", p.count}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

std::string percentiles_line(const char* what, const Percentiles& p) {
  if (p.count == 0) return fmt::format("{}: none\n", what);
  return fmt::format("{}: p50 {:.3f} ms, p90 {:.3f} ms, p99 {:.3f} ms ({})\n", what, p.p50, p.p90, p.p99,
                     count_of(static_cast<long long>(p.count), "request"));
}

}  // namespace

std::string step_name(StepKind kind, int key) {
  return fmt::format("{} {}", kind == StepKind::prefill ? "prefill" : "decode", key);
}

Percentiles percentiles(std::vector<double> values) {
  Percentiles p;
  p.count = static_cast<int>(values.size());
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto rank = [&](double q) {
    const auto n = static_cast<double>(values.size());
    const size_t k = static_cast<size_t>(std::max(1.0, std::ceil(q / 100.0 * n)));
    return values[std::min(k, values.size()) - 1];
  };
  p.p50 = rank(50);
  p.p90 = rank(90);
  p.p99 = rank(99);
  return p;
}

uint64_t request_hash(const RequestState& st) { return token_hash(st.generated); }

ServeMetrics serve_metrics(const ServeResult& r) {
  ServeMetrics m;
  m.requests = static_cast<int>(r.requests.size());
  m.wall_ms = r.wall_ms;
  m.slots_busy_at_end = r.slots_busy_at_end;
  m.token_hash = token_hash({});
  std::vector<double> ttft, tpot;
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const ServeRequest& q = r.requests[i];
    const RequestState& st = r.states[i];
    if (st.phase == RequestPhase::rejected) ++m.rejected;
    if (st.phase != RequestPhase::finished) continue;
    ++m.completed;
    m.prompt_tokens += q.prompt_len;
    m.output_tokens += static_cast<int64_t>(st.generated.size());
    ttft.push_back(st.first_token_ms - q.arrival_ms);
    if (st.generated.size() > 1) {
      tpot.push_back((st.finished_ms - st.first_token_ms) / static_cast<double>(st.generated.size() - 1));
    }
    if (st.chunks > 1) ++m.chunked_requests;
    m.max_chunks = std::max(m.max_chunks, st.chunks);
    const int32_t head[2] = {static_cast<int32_t>(i), static_cast<int32_t>(st.generated.size())};
    m.token_hash = token_hash(st.generated, token_hash(head, m.token_hash));
  }
  m.ttft_ms = percentiles(std::move(ttft));
  m.tpot_ms = percentiles(std::move(tpot));
  const double secs = m.wall_ms / 1000.0;
  if (secs > 0) {
    m.tokens_per_s = static_cast<double>(m.prompt_tokens + m.output_tokens) / secs;
    m.output_tokens_per_s = static_cast<double>(m.output_tokens) / secs;
  }
  for (const StepRecord& s : r.steps) {
    for (StepKeyStats* k : {&m.steps[{s.kind, s.key}], &m.all_steps}) {
      ++k->steps;
      k->tokens += s.tokens;
      k->ms += s.end_ms - s.start_ms;
      k->floor_ms += s.floor_ms;
    }
  }
  return m;
}

std::string format_metrics(const ServeMetrics& m, const ServeResult& r) {
  std::string out;
  out += fmt::format("requests: {} completed, {} rejected, of {}; slots busy at the end: {}\n", m.completed, m.rejected,
                     m.requests, m.slots_busy_at_end);
  out += fmt::format("tokens: {} prompt + {} generated in {:.1f} ms: {:.1f} tokens/s in all, {:.1f} output tokens/s\n",
                     m.prompt_tokens, m.output_tokens, m.wall_ms, m.tokens_per_s, m.output_tokens_per_s);
  out += percentiles_line("time to first token", m.ttft_ms);
  out += percentiles_line("time per output token", m.tpot_ms);
  out += fmt::format("prompts prefilled in more than one chunk: {} (at most {})\n", m.chunked_requests,
                     count_of(m.max_chunks, "chunk"));
  const bool floors = m.all_steps.floor_ms > 0;
  out += fmt::format("steps: {} ({:.1f} ms summed{})\n", m.all_steps.steps, m.all_steps.ms,
                     floors ? fmt::format(", floor {:.1f} ms = {:.0f}% of it", m.all_steps.floor_ms,
                                          m.all_steps.ms > 0 ? 100 * m.all_steps.floor_ms / m.all_steps.ms : 0.0)
                            : "");
  out += fmt::format("  {:<14} {:>6} {:>10} {:>11} {:>10}{}\n", "key", "steps", "tokens", "total ms", "ms/step",
                     floors ? fmt::format(" {:>10}", "floor ms") : "");
  for (const auto& [key, k] : m.steps) {
    out += fmt::format("  {:<14} {:>6} {:>10} {:>11.2f} {:>10.3f}{}\n", step_name(key.first, key.second), k.steps,
                       k.tokens, k.ms, k.ms / k.steps, floors ? fmt::format(" {:>10.2f}", k.floor_ms) : "");
  }
  out += fmt::format("token hash: {:016x}\n", m.token_hash);
  for (size_t i = 0; i < r.states.size(); ++i) {
    if (r.states[i].phase != RequestPhase::rejected) continue;
    const int line = r.requests[i].line;
    out += fmt::format("rejected: request {}{}: {}\n", i, line > 0 ? fmt::format(" (line {})", line) : "",
                       r.states[i].error);
  }
  return out;
}

json metrics_json(const ServeMetrics& m) {
  json steps = json::object();
  for (const auto& [key, k] : m.steps) {
    steps[step_name(key.first, key.second)] = {
        {"steps", k.steps}, {"tokens", k.tokens}, {"ms", k.ms}, {"floor_ms", k.floor_ms}};
  }
  return {{"requests", m.requests},
          {"completed", m.completed},
          {"rejected", m.rejected},
          {"prompt_tokens", m.prompt_tokens},
          {"output_tokens", m.output_tokens},
          {"wall_ms", m.wall_ms},
          {"tokens_per_s", m.tokens_per_s},
          {"output_tokens_per_s", m.output_tokens_per_s},
          {"ttft_ms", percentiles_json(m.ttft_ms)},
          {"tpot_ms", percentiles_json(m.tpot_ms)},
          {"steps", steps},
          {"step_ms", m.all_steps.ms},
          {"floor_ms", m.all_steps.floor_ms},
          {"chunked_requests", m.chunked_requests},
          {"max_chunks", m.max_chunks},
          {"token_hash", fmt::format("{:016x}", m.token_hash)},
          {"slots_busy_at_end", m.slots_busy_at_end}};
}

json requests_json(const ServeResult& r) {
  json out = json::array();
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const ServeRequest& q = r.requests[i];
    const RequestState& st = r.states[i];
    json j = {{"index", i}, {"prompt_len", q.prompt_len}, {"max_new", q.max_new}, {"arrival_ms", q.arrival_ms}};
    if (q.line > 0) j["line"] = q.line;
    if (st.phase == RequestPhase::rejected) {
      j["error"] = st.error;
    } else {
      j["slot"] = st.last_slot;
      j["chunks"] = st.chunks;
      j["ttft_ms"] = st.first_token_ms - q.arrival_ms;
      if (st.generated.size() > 1) {
        j["tpot_ms"] = (st.finished_ms - st.first_token_ms) / static_cast<double>(st.generated.size() - 1);
      }
      j["generated"] = st.generated.size();
      j["token_hash"] = fmt::format("{:016x}", request_hash(st));
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string serve_op_family(const std::string& op, const std::string& arm) {
  const bool by_arm = op.rfind("conv.", 0) == 0 || op.rfind("postconv", 0) == 0 || op.rfind("gdn.", 0) == 0;
  return by_arm ? fmt::format("{} [{}]", op, arm) : op;
}

std::vector<FamilyTime> family_times(const std::vector<NodeSample>& nodes) {
  std::map<std::string, FamilyTime> by;
  for (const NodeSample& n : nodes) {
    FamilyTime& f = by[serve_op_family(n.op, n.arm)];
    f.calls += n.calls;
    f.total_ms += n.total_us / 1000.0;
  }
  std::vector<FamilyTime> out;
  for (auto& [name, f] : by) {
    f.family = name;
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const FamilyTime& a, const FamilyTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string format_family_table(const std::vector<FamilyTime>& families) {
  double total = 0;
  for (const auto& f : families) total += f.total_ms;
  std::string out =
      fmt::format("  {:<36} {:>9} {:>12} {:>11} {:>7}\n", "op family [arm]", "calls", "total ms", "mean us", "share");
  for (const auto& f : families) {
    out += fmt::format("  {:<36} {:>9} {:>12.3f} {:>11.2f} {:>6.1f}%\n", f.family, f.calls, f.total_ms, f.mean_us(),
                       total > 0 ? 100 * f.total_ms / total : 0.0);
  }
  out += fmt::format("  {:<36} {:>9} {:>12.3f}\n", "all graph nodes", "", total);
  return out;
}

json families_json(const std::vector<FamilyTime>& families) {
  json out = json::array();
  for (const auto& f : families) {
    out.push_back({{"family", f.family}, {"calls", f.calls}, {"total_ms", f.total_ms}, {"mean_us", f.mean_us()}});
  }
  return out;
}

std::string serve_progress_line(int done, int total, int64_t output_tokens, double elapsed_ms) {
  constexpr int kWidth = 20;
  const int filled = total > 0 ? std::clamp(done, 0, total) * kWidth / total : kWidth;
  return fmt::format(
      "serve [{}{}] {}/{} requests, {} tokens out, {:.1f} s", std::string(static_cast<size_t>(filled), '#'),
      std::string(static_cast<size_t>(kWidth - filled), '-'), done, total, output_tokens, elapsed_ms / 1000.0);
}

}  // namespace sg
