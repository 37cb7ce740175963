// fuzz_step_metadata: random decode and prefill batches (models/step_metadata.h) built from the
// input: a key, limits and requests that are mostly valid, sometimes not. The target decides on
// its own whether the batch is valid and checks that the builder throws sg::Error exactly when it
// is not; for an accepted batch it checks every convention of the header: live rows and sequences
// in request order, the padding values, cu_seqlens, last_rows, context lengths, the conv chunks
// tiling every sequence, the counts, the layout's alignment and the packed image.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "engine/error.h"
#include "models/step_metadata.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

struct Seq {  // one request, decode or prefill
  int32_t slot, start;
  std::vector<int32_t> tokens;
};

// Mostly in [lo, hi]; now and then just outside it.
int32_t pick(FuzzedDataProvider& in, int32_t lo, int32_t hi) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return lo - 1;
    case 1: return hi + 1;
    default: return in.ConsumeIntegralInRange<int32_t>(lo, hi);
  }
}

template <class T>
bool all_equal(const std::vector<T>& v, size_t from, T value) {
  return std::all_of(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), [&](const T& x) { return x == value; });
}

void check_metadata(const sg::StepMetadata& m, const sg::StepKey& key, const std::vector<Seq>& seqs) {
  const auto T = static_cast<size_t>(key.tokens), S = static_cast<size_t>(key.seqs);
  const size_t NC = static_cast<size_t>(key.chunk_capacity());
  FUZZ_CHECK(m.key == key, "key");
  FUZZ_CHECK(m.tokens.size() == T && m.positions.size() == T && m.token_seq.size() == T, "token arrays");
  FUZZ_CHECK(m.slots.size() == S && m.cu_seqlens.size() == S + 1 && m.has_history.size() == S &&
                 m.context_lens.size() == S && m.last_rows.size() == S && m.chunks.size() == NC,
             "sequence arrays");
  const auto n = seqs.size();
  int32_t row = 0, max_len = 0, max_ctx = 0;
  FUZZ_CHECK(m.cu_seqlens[0] == 0, "cu_seqlens[0]");
  for (size_t i = 0; i < n; ++i) {
    const Seq& s = seqs[i];
    const auto len = static_cast<int32_t>(s.tokens.size());
    FUZZ_CHECK(m.slots[i] == s.slot, "slot of %zu", i);
    FUZZ_CHECK(m.cu_seqlens[i] == row && m.cu_seqlens[i + 1] == row + len, "cu_seqlens of %zu", i);
    for (int32_t t = 0; t < len; ++t) {
      const auto u = static_cast<size_t>(row + t);
      FUZZ_CHECK(m.tokens[u] == s.tokens[static_cast<size_t>(t)] && m.positions[u] == s.start + t &&
                     m.token_seq[u] == static_cast<int32_t>(i),
                 "row %zu", u);
    }
    FUZZ_CHECK(m.has_history[i] == (s.start > 0 ? 1 : 0), "has_history of %zu", i);
    FUZZ_CHECK(m.context_lens[i] == s.start + len, "context of %zu", i);
    FUZZ_CHECK(m.last_rows[i] == (len > 0 ? row + len - 1 : -1), "last_row of %zu", i);
    row += len;
    max_len = std::max(max_len, len);
    max_ctx = std::max(max_ctx, s.start + len);
  }
  const auto rows = static_cast<size_t>(row);
  FUZZ_CHECK(rows <= T, "rows past the key");
  FUZZ_CHECK(all_equal(m.tokens, rows, 0) && all_equal(m.positions, rows, 0) && all_equal(m.token_seq, rows, -1),
             "padding rows");
  FUZZ_CHECK(all_equal(m.slots, n, -1) && all_equal(m.cu_seqlens, n + 1, row) &&
                 all_equal(m.has_history, n, uint8_t{0}) && all_equal(m.context_lens, n, 0) &&
                 all_equal(m.last_rows, n, -1),
             "padding sequences");
  // Chunks: sequence by sequence, each non-empty sequence tiled in order by chunks of 1..8 tokens.
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t at = m.cu_seqlens[i];
    while (at < m.cu_seqlens[i + 1]) {
      FUZZ_CHECK(c < NC, "more chunks than the key's capacity");
      const sg::ConvChunk& ch = m.chunks[c++];
      FUZZ_CHECK(ch.seq == static_cast<int32_t>(i) && ch.start == at && ch.len >= 1 && ch.len <= sg::kConvChunkTokens &&
                     at + ch.len <= m.cu_seqlens[i + 1],
                 "chunk %zu", c - 1);
      at += ch.len;
    }
  }
  for (size_t k = c; k < NC; ++k) FUZZ_CHECK(m.chunks[k] == (sg::ConvChunk{-1, 0, 0}), "padding chunk %zu", k);
  const sg::StepCounts& k = m.counts;
  FUZZ_CHECK(k.n_seqs == static_cast<int32_t>(n) && k.n_tokens == row && k.n_chunks == static_cast<int32_t>(c) &&
                 k.max_seqlen == max_len && k.max_context_len == max_ctx && k.token_capacity == key.tokens &&
                 k.seq_capacity == key.seqs && k.chunk_capacity == key.chunk_capacity(),
             "counts");
  // Layout: a pure function of the key, sections aligned and in order; the image holds the arrays.
  const sg::MetadataLayout l = m.layout();
  FUZZ_CHECK(l == sg::metadata_layout(key), "layout");
  const size_t offs[] = {l.counts,      l.tokens,       l.positions, l.token_seq, l.slots, l.cu_seqlens,
                         l.has_history, l.context_lens, l.last_rows, l.chunks,    l.total};
  for (size_t i = 0; i < std::size(offs); ++i) {
    FUZZ_CHECK(offs[i] % sg::kMetadataAlign == 0, "section %zu misaligned", i);
    FUZZ_CHECK(i == 0 || offs[i] >= offs[i - 1], "sections out of order");
  }
  const sg::PackedMetadata p = m.pack();
  FUZZ_CHECK(p.image.size() == l.total && p.layout == l, "image size");
  auto same = [&](size_t off, const void* src, size_t bytes) {
    return bytes == 0 || std::memcmp(p.image.data() + off, src, bytes) == 0;
  };
  FUZZ_CHECK(same(l.counts, &m.counts, sizeof m.counts), "image counts");
  FUZZ_CHECK(same(l.tokens, m.tokens.data(), T * 4) && same(l.positions, m.positions.data(), T * 4) &&
                 same(l.token_seq, m.token_seq.data(), T * 4) && same(l.slots, m.slots.data(), S * 4) &&
                 same(l.cu_seqlens, m.cu_seqlens.data(), (S + 1) * 4) && same(l.has_history, m.has_history.data(), S) &&
                 same(l.context_lens, m.context_lens.data(), S * 4) && same(l.last_rows, m.last_rows.data(), S * 4) &&
                 same(l.chunks, m.chunks.data(), NC * sizeof(sg::ConvChunk)),
             "image sections");
  // Too small a destination is refused, never overrun.
  std::vector<std::byte> small(l.total - 1);
  bool threw = false;
  try {
    m.pack_into(small);
  } catch (const sg::Error&) {
    threw = true;
  }
  FUZZ_CHECK(threw, "pack_into a short buffer did not throw");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool decode = in.ConsumeBool();
  sg::StepLimits lim;
  lim.num_slots = pick(in, 1, 64);
  lim.vocab = pick(in, 1, 1000);
  lim.max_context = pick(in, 1, 4096);
  const int32_t tokens = pick(in, 1, 256);
  const int32_t seqs = decode ? tokens : pick(in, 1, 64);
  const sg::StepKey key = decode ? sg::StepKey::decode(tokens) : sg::StepKey::prefill(tokens, seqs);

  std::vector<Seq> batch(in.ConsumeIntegralInRange<size_t>(0, 70));
  for (Seq& s : batch) {
    s.slot = pick(in, 0, std::max(lim.num_slots - 1, 0));
    s.start = pick(in, 0, std::max(lim.max_context - 1, 0));
    const size_t len = decode ? 1 : in.ConsumeIntegralInRange<size_t>(0, in.ConsumeBool() ? 2 : 40);
    s.tokens.resize(len);
    for (int32_t& t : s.tokens) t = pick(in, 0, std::max(lim.vocab - 1, 0));
  }

  // What the header says is valid.
  bool valid = key.tokens >= 1 && key.seqs >= 1 && lim.num_slots >= 1 && lim.vocab >= 1 && lim.max_context >= 1 &&
               !batch.empty() && batch.size() <= static_cast<size_t>(decode ? key.tokens : key.seqs);
  std::set<int32_t> used;
  int64_t total = 0;
  for (const Seq& s : batch) {
    valid = valid && s.slot >= 0 && s.slot < lim.num_slots && used.insert(s.slot).second && s.start >= 0 &&
            s.start + static_cast<int64_t>(s.tokens.size()) <= lim.max_context;
    for (int32_t t : s.tokens) valid = valid && t >= 0 && t < lim.vocab;
    total += static_cast<int64_t>(s.tokens.size());
  }
  valid = valid && total <= key.tokens;

  try {
    sg::StepMetadata m;
    if (decode) {
      std::vector<sg::DecodeRequest> reqs;
      for (const Seq& s : batch) reqs.push_back({s.slot, s.tokens[0], s.start});
      m = sg::build_decode_metadata(reqs, key, lim);
    } else {
      std::vector<sg::PrefillRequest> reqs;
      for (const Seq& s : batch) reqs.push_back({s.slot, s.tokens, s.start});
      m = sg::build_prefill_metadata(reqs, key, lim);
    }
    FUZZ_CHECK(valid, "an invalid %s batch was accepted", decode ? "decode" : "prefill");
    check_metadata(m, key, batch);
  } catch (const sg::Error& e) {
    FUZZ_CHECK(!valid, "a valid %s batch was refused: %s", decode ? "decode" : "prefill", e.what());
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message");
  }

  // Prefill buckets: ascending powers of two from 16, ending at max_tokens; padding picks the least.
  const int max_tokens = pick(in, 1, 1 << 20);
  const int n = pick(in, 0, max_tokens);
  std::vector<int> b;
  try {
    b = sg::prefill_buckets(max_tokens);
  } catch (const sg::Error&) {
    FUZZ_CHECK(max_tokens < 1, "prefill_buckets(%d) refused", max_tokens);
    return 0;
  }
  FUZZ_CHECK(max_tokens >= 1 && !b.empty() && b.back() == max_tokens && std::is_sorted(b.begin(), b.end()) &&
                 std::adjacent_find(b.begin(), b.end()) == b.end(),
             "buckets for %d", max_tokens);
  try {
    const std::optional<int> got = sg::pad_tokens_to_bucket(b, n);
    FUZZ_CHECK(n >= 0, "negative n_tokens accepted");
    if (n > max_tokens) {
      FUZZ_CHECK(!got, "a bucket past the largest");
    } else {
      FUZZ_CHECK(got && *got >= n && (*got == b.front() || *(std::lower_bound(b.begin(), b.end(), *got) - 1) < n),
                 "bucket for %d", n);
    }
  } catch (const sg::Error&) {
    FUZZ_CHECK(n < 0, "pad_tokens_to_bucket(%d) refused", n);
  }
  return 0;
}
