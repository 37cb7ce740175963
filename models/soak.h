// soak.h: the bookkeeping of a soak run (`stepgraph soak`, models/soak_gpu.h): a long deterministic
// run of decode-step graph replays that must neither drift nor leak. Pure host code (tested on the
// CPU, tests/cpu/test_soak.cpp).
//
// The workload repeats exactly: it is cut into periods of `period` replays; each period starts
// from zeroed caches, the same first tokens and position 0, and every replay's greedy tokens are
// the next replay's input tokens. So every period must produce the same tokens, and the same
// tokens as a reference pass of one period run with eager launches (not graphs) before the soak.
//   PeriodLedger: the reference's running hash after each position of the period, and the soak's
//     running hash of the current period, compared after every replay: the first replay whose
//     tokens differ is named. Also a hash of every token of the run (the summary's run hash).
//   MemoryDrift: device memory in use and host RSS sampled every few replays; the first sample is
//     the baseline, and a later sample more than the tolerance above it is a failure naming the
//     replay. Min and max of each over the run.
//   parse_statm_rss: the resident set from /proc/self/statm's text.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sg {

// FNV-1a (64-bit) over the tokens' little-endian bytes, continuing from `h`.
inline constexpr uint64_t kTokenHashSeed = 0xcbf29ce484222325ull;
uint64_t hash_tokens(uint64_t h, std::span<const int32_t> tokens);

// A replay whose tokens left the reference.
struct HashMismatch {
  int64_t replay = 0;          // 0-based index of the replay in the run
  int64_t period = 0;          // 0-based index of its period
  int position = 0;            // its position in the period
  uint64_t got = 0, want = 0;  // the period's running hash after it, and the reference's
  // "replay 41234 (period 40, position 274): the period's token hash 0x... differs from the
  // reference's 0x... (eager launches of the same period)"
  std::string describe() const;
};

class PeriodLedger {
 public:
  // `period` >= 1 replays; the reference holds min(period, replays) positions (a run shorter than
  // one period needs no more). Throws sg::Error for a period or replay count below 1.
  PeriodLedger(int period, int64_t replays);

  int period() const { return period_; }
  int reference_length() const { return reference_length_; }
  int position(int64_t replay) const { return static_cast<int>(replay % period_); }
  // The replay starts a period: the caller zeroes the caches and feeds the first tokens.
  bool starts_period(int64_t replay) const { return position(replay) == 0; }

  // The reference pass: the tokens of its positions 0, 1, ... in order (reference_length() calls).
  void add_reference(std::span<const int32_t> tokens);
  bool reference_complete() const { return static_cast<int>(reference_.size()) == reference_length_; }
  uint64_t reference_hash() const;  // of the whole reference (its last running hash); seed when empty
  // How many different token ids the reference produced (a period of one repeated token would make
  // a weak check; the summary shows this figure).
  int reference_distinct_tokens() const { return static_cast<int>(distinct_.size()); }

  // The soak: the tokens of replay `replay`, replays in order from 0 (an error otherwise, or before
  // the reference is complete). Returns the mismatch when the period's running hash differs from the
  // reference's at the same position; the caller ends the run there.
  std::optional<HashMismatch> add(int64_t replay, std::span<const int32_t> tokens);

  int64_t replays_checked() const { return next_; }
  int64_t periods_completed() const { return next_ / period_; }  // whole periods checked
  uint64_t run_hash() const { return run_hash_; }                // every token of every replay checked so far

 private:
  int period_ = 1;
  int reference_length_ = 1;
  std::vector<uint64_t> reference_;  // running hash after each position
  std::vector<int32_t> distinct_;    // sorted token ids of the reference
  uint64_t period_hash_ = kTokenHashSeed;
  uint64_t run_hash_ = kTokenHashSeed;
  int64_t next_ = 0;
};

// One memory sample, taken after replay `replay` (-1: before the first replay, the baseline).
struct MemorySample {
  int64_t replay = -1;
  uint64_t device_used = 0;  // cudaMemGetInfo: total - free, bytes (the whole device)
  uint64_t host_rss = 0;     // resident set of this process, bytes
};

struct MemoryTolerance {
  uint64_t device_bytes = uint64_t{8} << 20;
  uint64_t host_bytes = uint64_t{16} << 20;
};

struct MemoryRange {
  uint64_t baseline = 0, min = 0, max = 0, last = 0;
  int64_t growth() const { return static_cast<int64_t>(last) - static_cast<int64_t>(baseline); }
  int64_t peak_growth() const { return static_cast<int64_t>(max) - static_cast<int64_t>(baseline); }
};

class MemoryDrift {
 public:
  explicit MemoryDrift(MemoryTolerance tolerance = {}) : tolerance_(tolerance) {}
  // The first sample is the baseline. Returns a failure message when this sample is more than the
  // tolerance above the baseline (device memory checked first):
  // "after replay 41999: device memory in use grew by 64.00 MiB (67108864 bytes) over the
  // baseline of ... taken before the first replay; the tolerance is 8.00 MiB".
  std::optional<std::string> add(const MemorySample& s);
  int samples() const { return samples_; }
  const MemoryRange& device() const { return device_; }
  const MemoryRange& host() const { return host_; }
  const MemoryTolerance& tolerance() const { return tolerance_; }
  int64_t baseline_replay() const { return baseline_replay_; }

 private:
  MemoryTolerance tolerance_;
  MemoryRange device_, host_;
  int samples_ = 0;
  int64_t baseline_replay_ = -1;
};

// The resident set in bytes from the text of /proc/self/statm ("size resident shared text lib data
// dt", in pages): nullopt when the text does not hold two unsigned integers.
std::optional<uint64_t> parse_statm_rss(std::string_view statm, uint64_t page_bytes);
// This process's resident set (reads /proc/self/statm); 0 when it cannot be read.
uint64_t host_rss_bytes();

// "12.50 MiB" (binary units, two decimals), "-3.00 MiB" for negative sizes.
std::string format_mib(int64_t bytes);

// One progress line: "soak [#####---------------] 25000/100000 replays, 12.3 s, hashes ok".
std::string soak_progress_line(int64_t done, int64_t total, double seconds);

}  // namespace sg
