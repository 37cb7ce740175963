// The soak run's bookkeeping (models/soak.h): the token hash, the period ledger (reference prefix
// hashes, per-replay comparison, the replay a mismatch names), the memory drift check (baseline,
// tolerance edges, min and max), the /proc/self/statm parser and the progress line.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/soak.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

// The tokens of position `pos` of a made-up period: two rows.
std::vector<int32_t> period_tokens(int pos) { return {pos * 3 + 1, (pos * 7) % 5}; }

PeriodLedger ledger_with_reference(int period, int64_t replays) {
  PeriodLedger l(period, replays);
  for (int j = 0; j < l.reference_length(); ++j) l.add_reference(period_tokens(j));
  return l;
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

TEST_CASE("soak: the token hash is FNV-1a over the tokens' little-endian bytes", "[soak]") {
  const std::vector<int32_t> none;
  CHECK(hash_tokens(kTokenHashSeed, none) == kTokenHashSeed);
  const std::vector<int32_t> two = {1, -1};  // bytes 01 00 00 00 ff ff ff ff
  CHECK(hash_tokens(kTokenHashSeed, two) == 0xf92ed8f4ce1c3300ull);
  // Hashing in pieces is hashing the whole.
  const std::vector<int32_t> a = {5, 6}, b = {7}, ab = {5, 6, 7};
  CHECK(hash_tokens(hash_tokens(kTokenHashSeed, a), b) == hash_tokens(kTokenHashSeed, ab));
  CHECK(hash_tokens(kTokenHashSeed, a) != hash_tokens(kTokenHashSeed, std::vector<int32_t>{6, 5}));
}

TEST_CASE("soak: periods that repeat the reference pass every replay", "[soak]") {
  PeriodLedger l = ledger_with_reference(4, 10);
  REQUIRE(l.reference_complete());
  CHECK(l.reference_length() == 4);
  CHECK(l.reference_distinct_tokens() == 6);  // {1, 0}, {4, 2}, {7, 4}, {10, 1}
  uint64_t whole = kTokenHashSeed;
  for (int64_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    CHECK(l.starts_period(i) == (i % 4 == 0));
    const auto t = period_tokens(l.position(i));
    CHECK_FALSE(l.add(i, t).has_value());
    whole = hash_tokens(whole, t);
  }
  CHECK(l.replays_checked() == 10);
  CHECK(l.periods_completed() == 2);
  CHECK(l.run_hash() == whole);
  uint64_t ref = kTokenHashSeed;
  for (int j = 0; j < 4; ++j) ref = hash_tokens(ref, period_tokens(j));
  CHECK(l.reference_hash() == ref);
}

TEST_CASE("soak: the first replay whose tokens leave the reference is named with its period and position", "[soak]") {
  PeriodLedger l = ledger_with_reference(4, 12);
  for (int64_t i = 0; i < 9; ++i) REQUIRE_FALSE(l.add(i, period_tokens(l.position(i))).has_value());
  std::vector<int32_t> wrong = period_tokens(l.position(9));
  wrong[1] += 1;
  const auto m = l.add(9, wrong);
  REQUIRE(m.has_value());
  CHECK(m->replay == 9);
  CHECK(m->period == 2);
  CHECK(m->position == 1);
  CHECK(m->got != m->want);
  const std::string text = m->describe();
  CHECK(text.find("replay 9 (period 2, position 1)") != std::string::npos);
  CHECK(text.find("eager launches") != std::string::npos);
  // The period's hash is a running hash: the right tokens after a wrong one still differ, until
  // the next period starts afresh.
  CHECK(l.add(10, period_tokens(2)).has_value());
  CHECK(l.add(11, period_tokens(3)).has_value());
}

TEST_CASE("soak: each period's running hash starts afresh", "[soak]") {
  PeriodLedger l = ledger_with_reference(3, 6);
  for (int64_t i = 0; i < 3; ++i) REQUIRE_FALSE(l.add(i, period_tokens(static_cast<int>(i))).has_value());
  // The period must restart from the seed: the tokens of position 0 again match.
  CHECK_FALSE(l.add(3, period_tokens(0)).has_value());
  CHECK(l.add(4, period_tokens(0)).has_value());  // position 1 expected
}

TEST_CASE("soak: a run shorter than its period needs a reference of the run's length only", "[soak]") {
  PeriodLedger l(1024, 5);
  CHECK(l.reference_length() == 5);
  for (int j = 0; j < 5; ++j) l.add_reference(period_tokens(j));
  CHECK(l.reference_complete());
  CHECK_THROWS_AS(l.add_reference(period_tokens(5)), Error);
  for (int64_t i = 0; i < 5; ++i) CHECK_FALSE(l.add(i, period_tokens(static_cast<int>(i))).has_value());
  CHECK(l.periods_completed() == 0);
}

TEST_CASE("soak: the ledger refuses misuse", "[soak]") {
  CHECK_THROWS_AS(PeriodLedger(0, 10), Error);
  CHECK_THROWS_AS(PeriodLedger(4, 0), Error);
  PeriodLedger l(2, 4);
  l.add_reference(period_tokens(0));
  CHECK_THROWS_AS(l.add(0, period_tokens(0)), Error);  // the reference is not complete
  l.add_reference(period_tokens(1));
  CHECK_THROWS_AS(l.add(1, period_tokens(1)), Error);  // out of order: replay 0 first
  CHECK_FALSE(l.add(0, period_tokens(0)).has_value());
  CHECK_THROWS_AS(l.add(0, period_tokens(0)), Error);  // twice
}

TEST_CASE("soak: memory within the tolerance of the first sample passes and min and max are kept", "[soak]") {
  MemoryDrift d(MemoryTolerance{8 * kMiB, 16 * kMiB});
  CHECK_FALSE(d.add({0, 1000 * kMiB, 300 * kMiB}).has_value());
  CHECK(d.baseline_replay() == 0);
  CHECK_FALSE(d.add({999, 1008 * kMiB, 316 * kMiB}).has_value());  // exactly the tolerance
  CHECK_FALSE(d.add({1999, 990 * kMiB, 290 * kMiB}).has_value());  // below the baseline
  CHECK(d.samples() == 3);
  CHECK(d.device().baseline == 1000 * kMiB);
  CHECK(d.device().min == 990 * kMiB);
  CHECK(d.device().max == 1008 * kMiB);
  CHECK(d.device().last == 990 * kMiB);
  CHECK(d.device().growth() == -static_cast<int64_t>(10 * kMiB));
  CHECK(d.device().peak_growth() == static_cast<int64_t>(8 * kMiB));
  CHECK(d.host().min == 290 * kMiB);
  CHECK(d.host().max == 316 * kMiB);
}

TEST_CASE("soak: device memory one byte past the tolerance fails naming the replay", "[soak]") {
  MemoryDrift d(MemoryTolerance{8 * kMiB, 16 * kMiB});
  REQUIRE_FALSE(d.add({0, 1000 * kMiB, 300 * kMiB}).has_value());
  const auto m = d.add({41999, 1008 * kMiB + 1, 300 * kMiB});
  REQUIRE(m.has_value());
  CHECK(m->find("after replay 41999: device memory in use grew by 8.00 MiB (8388609 bytes)") != std::string::npos);
  CHECK(m->find("taken after replay 0") != std::string::npos);
  CHECK(m->find("the tolerance is 8.00 MiB (8388608 bytes)") != std::string::npos);
  CHECK(d.device().max == 1008 * kMiB + 1);
}

TEST_CASE("soak: host RSS past the tolerance fails and a baseline before any replay is named so", "[soak]") {
  MemoryDrift d(MemoryTolerance{8 * kMiB, 16 * kMiB});
  REQUIRE_FALSE(d.add({-1, 1000 * kMiB, 300 * kMiB}).has_value());
  const auto m = d.add({5, 1000 * kMiB, 400 * kMiB});
  REQUIRE(m.has_value());
  CHECK(m->find("after replay 5: host resident memory (RSS) grew by 100.00 MiB") != std::string::npos);
  CHECK(m->find("taken before the first replay") != std::string::npos);
  // A zero tolerance: any growth fails, no growth passes.
  MemoryDrift z(MemoryTolerance{0, 0});
  REQUIRE_FALSE(z.add({0, 10, 10}).has_value());
  CHECK_FALSE(z.add({1, 10, 10}).has_value());
  CHECK(z.add({2, 11, 10}).has_value());
}

TEST_CASE("soak: the resident set from /proc/self/statm text", "[soak]") {
  CHECK(parse_statm_rss("123 45 6 7 0 8 0\n", 4096) == uint64_t{45} * 4096);
  CHECK(parse_statm_rss("  123\t45", 4096) == uint64_t{45} * 4096);
  CHECK(parse_statm_rss("1 0 0 0 0 0 0", 4096) == uint64_t{0});
  CHECK_FALSE(parse_statm_rss("", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("123", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("123 ", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("abc def", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("123 -4", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("123 4x 5", 4096).has_value());
  CHECK_FALSE(parse_statm_rss("1 18446744073709551615", 4096).has_value());  // overflows in bytes
  CHECK_FALSE(parse_statm_rss("1 18446744073709551616", 1).has_value());     // not a uint64
  // This process: a resident set of at least a page and less than its whole address space.
  const uint64_t rss = host_rss_bytes();
  CHECK(rss >= 4096);
  CHECK(rss < (uint64_t{1} << 40));
}

TEST_CASE("soak: the progress line and MiB figures", "[soak]") {
  CHECK(soak_progress_line(25, 100, 1.5) == "soak [#####---------------] 25/100 replays, 1.5 s, hashes ok");
  CHECK(soak_progress_line(100, 100, 2) == "soak [####################] 100/100 replays, 2.0 s, hashes ok");
  CHECK(soak_progress_line(0, 100, 0) == "soak [--------------------] 0/100 replays, 0.0 s, hashes ok");
  CHECK(format_mib(3 * static_cast<int64_t>(kMiB)) == "3.00 MiB");
  CHECK(format_mib(-static_cast<int64_t>(kMiB) / 2) == "-0.50 MiB");
}
