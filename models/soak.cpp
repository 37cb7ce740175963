// soak.cpp: the soak run's bookkeeping (see soak.h).
#include "models/soak.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>

#include "engine/error.h"

namespace sg {

uint64_t hash_tokens(uint64_t h, std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

std::string HashMismatch::describe() const {
  return fmt::format(
      "replay {} (period {}, position {}): the period's token hash {:#018x} differs from the "
      "reference's {:#018x} (eager launches of the same period)",
      replay, period, position, got, want);
}

PeriodLedger::PeriodLedger(int period, int64_t replays) {
  require(period >= 1, "soak: the period must be at least 1 replay (got {})", period);
  require(replays >= 1, "soak: at least 1 replay is needed (got {})", replays);
  period_ = period;
  reference_length_ = static_cast<int>(std::min<int64_t>(period, replays));
  reference_.reserve(static_cast<size_t>(reference_length_));
}

void PeriodLedger::add_reference(std::span<const int32_t> tokens) {
  require(!reference_complete(), "soak: the reference already holds its {} positions", reference_length_);
  const uint64_t prev = reference_.empty() ? kTokenHashSeed : reference_.back();
  reference_.push_back(hash_tokens(prev, tokens));
  for (int32_t t : tokens) {
    const auto it = std::lower_bound(distinct_.begin(), distinct_.end(), t);
    if (it == distinct_.end() || *it != t) distinct_.insert(it, t);
  }
}

uint64_t PeriodLedger::reference_hash() const { return reference_.empty() ? kTokenHashSeed : reference_.back(); }

std::optional<HashMismatch> PeriodLedger::add(int64_t replay, std::span<const int32_t> tokens) {
  require(reference_complete(), "soak: replay {} checked before the reference pass was complete", replay);
  require(replay == next_, "soak: replay {} checked out of order (expected replay {})", replay, next_);
  const int pos = position(replay);
  require(pos < reference_length_, "soak: replay {} is at position {}, past the reference's {} positions", replay, pos,
          reference_length_);
  if (pos == 0) period_hash_ = kTokenHashSeed;
  period_hash_ = hash_tokens(period_hash_, tokens);
  run_hash_ = hash_tokens(run_hash_, tokens);
  ++next_;
  const uint64_t want = reference_[static_cast<size_t>(pos)];
  if (period_hash_ == want) return std::nullopt;
  return HashMismatch{replay, replay / period_, pos, period_hash_, want};
}

namespace {

void extend(MemoryRange& r, uint64_t v, bool first) {
  if (first) {
    r = MemoryRange{v, v, v, v};
    return;
  }
  r.min = std::min(r.min, v);
  r.max = std::max(r.max, v);
  r.last = v;
}

std::string after_what(int64_t replay) {
  return replay < 0 ? std::string("before the first replay") : fmt::format("after replay {}", replay);
}

std::string format_bytes_exact(uint64_t bytes) {
  return fmt::format("{} ({} bytes)", format_mib(static_cast<int64_t>(bytes)), bytes);
}

}  // namespace

std::optional<std::string> MemoryDrift::add(const MemorySample& s) {
  const bool first = samples_ == 0;
  extend(device_, s.device_used, first);
  extend(host_, s.host_rss, first);
  ++samples_;
  if (first) {
    baseline_replay_ = s.replay;
    return std::nullopt;
  }
  auto grew = [&](const char* what, const MemoryRange& r, uint64_t v, uint64_t tol) -> std::optional<std::string> {
    if (v <= r.baseline || v - r.baseline <= tol) return std::nullopt;
    return fmt::format("{}: {} grew by {} over the baseline of {} taken {}; the tolerance is {}", after_what(s.replay),
                       what, format_bytes_exact(v - r.baseline), format_bytes_exact(r.baseline),
                       after_what(baseline_replay_), format_bytes_exact(tol));
  };
  if (auto m = grew("device memory in use", device_, s.device_used, tolerance_.device_bytes)) return m;
  return grew("host resident memory (RSS)", host_, s.host_rss, tolerance_.host_bytes);
}

std::optional<uint64_t> parse_statm_rss(std::string_view statm, uint64_t page_bytes) {
  uint64_t fields[2] = {0, 0};
  const char* p = statm.data();
  const char* end = statm.data() + statm.size();
  for (uint64_t& f : fields) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const auto [q, ec] = std::from_chars(p, end, f);
    if (ec != std::errc() || q == p) return std::nullopt;
    p = q;
    if (p < end && *p != ' ' && *p != '\t' && *p != '\n') return std::nullopt;
  }
  if (page_bytes != 0 && fields[1] > UINT64_MAX / page_bytes) return std::nullopt;
  return fields[1] * page_bytes;
}

uint64_t host_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  if (!in) return 0;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const long page = ::sysconf(_SC_PAGESIZE);
  return parse_statm_rss(text, static_cast<uint64_t>(page > 0 ? page : 4096)).value_or(0);
}

std::string format_mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

std::string soak_progress_line(int64_t done, int64_t total, double seconds) {
  constexpr int64_t kWidth = 20;
  const int64_t filled = total > 0 ? std::clamp<int64_t>(done, 0, total) * kWidth / total : kWidth;
  return fmt::format("soak [{}{}] {}/{} replays, {:.1f} s, hashes ok", std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kWidth - filled), '-'), done, total, seconds);
}

}  // namespace sg
