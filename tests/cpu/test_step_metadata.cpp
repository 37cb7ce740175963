// CPU tests of the per-step metadata (models/step_metadata.h): decode padding, prefill varlen
// packing with empty and history sequences, the packed image's fixed offsets, the conv chunk bound,
// every validation error, and the prefill buckets.
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/step_metadata.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

const StepLimits kLimits{8, 100, 64};  // num_slots, vocab, max_context

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// n int32 values of the packed image at byte offset `off`.
std::vector<int32_t> ints(const PackedMetadata& p, size_t off, size_t n) {
  REQUIRE(off + n * sizeof(int32_t) <= p.image.size());
  std::vector<int32_t> v(n);
  std::memcpy(v.data(), p.image.data() + off, n * sizeof(int32_t));
  return v;
}

std::vector<int32_t> iota_tokens(int n, int first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

}  // namespace

TEST_CASE("decode pads 3 requests into key 4 with a slot -1 row and a zero token", "[metadata]") {
  const std::vector<DecodeRequest> batch{{5, 11, 0}, {2, 22, 7}, {7, 33, 63}};
  const StepMetadata m = build_decode_metadata(batch, StepKey::decode(4), kLimits);
  CHECK(m.tokens == std::vector<int32_t>{11, 22, 33, 0});
  CHECK(m.positions == std::vector<int32_t>{0, 7, 63, 0});
  CHECK(m.token_seq == std::vector<int32_t>{0, 1, 2, -1});
  CHECK(m.slots == std::vector<int32_t>{5, 2, 7, -1});
  CHECK(m.cu_seqlens == std::vector<int32_t>{0, 1, 2, 3, 3});
  CHECK(m.has_history == std::vector<uint8_t>{0, 1, 1, 0});
  CHECK(m.context_lens == std::vector<int32_t>{1, 8, 64, 0});
  CHECK(m.last_rows == std::vector<int32_t>{0, 1, 2, -1});
  CHECK(m.counts.n_seqs == 3);
  CHECK(m.counts.n_tokens == 3);
  CHECK(m.counts.n_chunks == 3);
  CHECK(m.counts.max_seqlen == 1);
  CHECK(m.counts.max_context_len == 64);
  CHECK(m.counts.token_capacity == 4);
  CHECK(m.counts.seq_capacity == 4);
  REQUIRE(m.chunks.size() == static_cast<size_t>(conv_max_chunks(4, 4)));
  CHECK(m.chunks == std::vector<ConvChunk>{{0, 0, 1}, {1, 1, 1}, {2, 2, 1}, {-1, 0, 0}});

  SECTION("the packed image holds the same values at the layout's offsets") {
    const PackedMetadata p = m.pack();
    const MetadataLayout& l = p.layout;
    CHECK(p.image.size() == l.total);
    CHECK(ints(p, l.counts, 8) == std::vector<int32_t>{3, 3, 3, 1, 64, 4, 4, 4});
    CHECK(ints(p, l.tokens, 4) == std::vector<int32_t>{11, 22, 33, 0});
    CHECK(ints(p, l.slots, 4) == std::vector<int32_t>{5, 2, 7, -1});
    CHECK(ints(p, l.cu_seqlens, 5) == std::vector<int32_t>{0, 1, 2, 3, 3});
    CHECK(ints(p, l.context_lens, 4) == std::vector<int32_t>{1, 8, 64, 0});
    CHECK(ints(p, l.chunks, 12) == std::vector<int32_t>{0, 0, 1, 1, 1, 1, 2, 2, 1, -1, 0, 0});
    // Bytes between sections are zero, so the image is a pure function of the metadata.
    for (size_t b = l.tokens + 4 * sizeof(int32_t); b < l.positions; ++b) REQUIRE(p.image[b] == std::byte{0});
    CHECK(m.pack().image == p.image);
  }
  SECTION("pack_into refuses a destination smaller than the image") {
    std::vector<std::byte> small(m.layout().total - 1);
    CHECK_THROWS_AS(m.pack_into(small), Error);
  }
}

TEST_CASE("metadata offsets depend only on the key, never on the live batch", "[metadata]") {
  SECTION("decode key 8 with 1 and with 8 requests") {
    const StepKey key = StepKey::decode(8);
    const PackedMetadata a = build_decode_metadata({{0, 1, 0}}, key, kLimits).pack();
    std::vector<DecodeRequest> full;
    for (int i = 0; i < 8; ++i) full.push_back({7 - i, i, 3 * i});
    const PackedMetadata b = build_decode_metadata(full, key, kLimits).pack();
    CHECK(a.layout == b.layout);
    CHECK(a.image.size() == b.image.size());
    CHECK(a.layout == metadata_layout(key));
  }
  SECTION("prefill key (64 tokens, 4 seqs) with 1 short and 4 full sequences") {
    const StepKey key = StepKey::prefill(64, 4);
    const PackedMetadata a = build_prefill_metadata({{0, {1, 2, 3}, 0}}, key, kLimits).pack();
    std::vector<PrefillRequest> full;
    for (int i = 0; i < 4; ++i) full.push_back({i, iota_tokens(16, i), 10 * i});
    const PackedMetadata b = build_prefill_metadata(full, key, kLimits).pack();
    CHECK(a.layout == b.layout);
    CHECK(a.image.size() == b.image.size());
  }
  SECTION("sections are 256-byte aligned, in order and disjoint") {
    const MetadataLayout l = metadata_layout(StepKey::decode(4));
    // Every section of key 4 fits in 256 bytes: ten sections.
    CHECK(l.counts == 0);
    CHECK(l.tokens == 256);
    CHECK(l.positions == 512);
    CHECK(l.chunks == 9 * 256);
    CHECK(l.total == 10 * 256);
    const StepKey big = StepKey::prefill(32768, 32);
    const MetadataLayout g = metadata_layout(big);
    const size_t T = 32768 * 4, S = 32 * 4;
    const size_t offs[] = {g.counts,      g.tokens,       g.positions, g.token_seq, g.slots, g.cu_seqlens,
                           g.has_history, g.context_lens, g.last_rows, g.chunks,    g.total};
    const size_t sizes[] = {32,    T, T, T, S,
                            S + 4, S, S, S, static_cast<size_t>(big.chunk_capacity()) * sizeof(ConvChunk)};
    for (size_t i = 0; i + 1 < std::size(offs); ++i) {
      INFO("section " << i);
      CHECK(offs[i] % kMetadataAlign == 0);
      CHECK(offs[i] + sizes[i] <= offs[i + 1]);
      CHECK(offs[i + 1] - (offs[i] + sizes[i]) < kMetadataAlign);
    }
    CHECK(g.total % kMetadataAlign == 0);
  }
  SECTION("the largest key's block holds every smaller key's image") {
    const size_t largest = metadata_layout(StepKey::prefill(32768, 32)).total;
    for (int bucket : prefill_buckets(32768)) {
      for (int seqs : {1, 7, 32}) {
        CAPTURE(bucket, seqs);
        CHECK(metadata_layout(StepKey::prefill(bucket, seqs)).total <= largest);
      }
    }
  }
}

TEST_CASE("prefill packs varlen sequences with an empty and history sequences", "[metadata]") {
  const StepLimits lim{8, 1000, 100};
  const std::vector<PrefillRequest> batch{
      {3, iota_tokens(10, 100), 0},  // fresh, 10 tokens: two chunks (8 + 2)
      {1, {}, 5},                    // empty, with history: no tokens, no chunk, context 5
      {6, iota_tokens(9, 200), 20},  // history 20, 9 tokens: two chunks (8 + 1)
  };
  const StepMetadata m = build_prefill_metadata(batch, StepKey::prefill(32, 4), lim);
  CHECK(m.cu_seqlens == std::vector<int32_t>{0, 10, 10, 19, 19});
  CHECK(m.slots == std::vector<int32_t>{3, 1, 6, -1});
  CHECK(m.has_history == std::vector<uint8_t>{0, 1, 1, 0});
  CHECK(m.context_lens == std::vector<int32_t>{10, 5, 29, 0});
  CHECK(m.last_rows == std::vector<int32_t>{9, -1, 18, -1});
  REQUIRE(m.tokens.size() == 32);
  for (int t = 0; t < 32; ++t) {
    CAPTURE(t);
    const auto u = static_cast<size_t>(t);
    if (t < 10) {
      CHECK(m.tokens[u] == 100 + t);
      CHECK(m.positions[u] == t);
      CHECK(m.token_seq[u] == 0);
    } else if (t < 19) {
      CHECK(m.tokens[u] == 200 + t - 10);
      CHECK(m.positions[u] == 20 + t - 10);
      CHECK(m.token_seq[u] == 2);
    } else {
      CHECK(m.tokens[u] == 0);
      CHECK(m.positions[u] == 0);
      CHECK(m.token_seq[u] == -1);
    }
  }
  REQUIRE(m.chunks.size() == static_cast<size_t>(conv_max_chunks(32, 4)));  // floor((32 + 7*4) / 8) = 7
  CHECK(m.chunks.size() == 7);
  CHECK(m.chunks ==
        std::vector<ConvChunk>{{0, 0, 8}, {0, 8, 2}, {2, 10, 8}, {2, 18, 1}, {-1, 0, 0}, {-1, 0, 0}, {-1, 0, 0}});
  CHECK(m.counts.n_seqs == 3);
  CHECK(m.counts.n_tokens == 19);
  CHECK(m.counts.n_chunks == 4);
  CHECK(m.counts.max_seqlen == 10);
  CHECK(m.counts.max_context_len == 29);

  SECTION("a batch of only empty sequences is a valid no-op step") {
    const StepMetadata e = build_prefill_metadata({{0, {}, 0}, {2, {}, 7}}, StepKey::prefill(16, 2), lim);
    CHECK(e.counts.n_tokens == 0);
    CHECK(e.counts.n_chunks == 0);
    CHECK(e.cu_seqlens == std::vector<int32_t>{0, 0, 0});
    CHECK(e.last_rows == std::vector<int32_t>{-1, -1});
    CHECK(e.context_lens == std::vector<int32_t>{0, 7});
  }
}

TEST_CASE("cu_seqlens and conv chunk counts stay within the bucket bound", "[metadata]") {
  const StepLimits lim{64, 1000, 100000};
  SECTION("the worst case (m-1 one-token sequences plus one long one) fills the table exactly") {
    std::vector<PrefillRequest> batch;
    for (int i = 0; i < 7; ++i) batch.push_back({i, {1}, 0});
    batch.push_back({7, iota_tokens(57, 0), 0});
    const StepMetadata m = build_prefill_metadata(batch, StepKey::prefill(64, 8), lim);
    CHECK(m.counts.n_tokens == 64);
    CHECK(m.counts.n_chunks == 7 + 8);
    CHECK(m.counts.n_chunks == m.counts.chunk_capacity);
    CHECK(m.chunks.back() == ConvChunk{7, 63, 1});
  }
  SECTION("seeded random batches") {
    uint32_t rng = 12345;
    auto next = [&](uint32_t n) {
      rng = rng * 1664525u + 1013904223u;
      return (rng >> 8) % n;
    };
    for (int trial = 0; trial < 300; ++trial) {
      const std::vector<int> buckets = prefill_buckets(512);
      const int bucket = buckets[next(static_cast<uint32_t>(buckets.size()))];
      const int max_seqs = 1 + static_cast<int>(next(40));
      const int n = 1 + static_cast<int>(next(static_cast<uint32_t>(max_seqs)));
      std::vector<PrefillRequest> batch;
      int left = bucket;
      for (int i = 0; i < n; ++i) {
        const int len = next(4) == 0 ? 0 : static_cast<int>(next(static_cast<uint32_t>(left + 1)));
        left -= len;
        batch.push_back({i, iota_tokens(len, 0), static_cast<int32_t>(next(100))});
      }
      CAPTURE(trial, bucket, max_seqs, n);
      const StepMetadata m = build_prefill_metadata(batch, StepKey::prefill(bucket, max_seqs), lim);
      CHECK(m.counts.n_tokens == bucket - left);
      CHECK(m.cu_seqlens.size() == static_cast<size_t>(max_seqs) + 1);
      CHECK(m.cu_seqlens.back() == m.counts.n_tokens);
      CHECK(m.counts.n_chunks <= m.counts.chunk_capacity);
      CHECK(m.counts.chunk_capacity == conv_max_chunks(bucket, max_seqs));
      int32_t covered = 0;
      for (int c = 0; c < m.counts.n_chunks; ++c) covered += m.chunks[static_cast<size_t>(c)].len;
      CHECK(covered == m.counts.n_tokens);
    }
  }
}

TEST_CASE("every metadata validation error names the request and the limit", "[metadata]") {
  const StepKey d4 = StepKey::decode(4);
  SECTION("decode") {
    CHECK(error_of([&] { build_decode_metadata({}, d4, kLimits); }) ==
          "decode batch is empty (a step needs at least one request)");
    const std::vector<DecodeRequest> five{{0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {3, 1, 0}, {4, 1, 0}};
    CHECK(error_of([&] { build_decode_metadata(five, d4, kLimits); }) ==
          "decode batch of 5 requests exceeds the graph key's 4 rows");
    CHECK(error_of([&] {
            build_decode_metadata({{0, 1, 0}, {8, 1, 0}}, d4, kLimits);
          }) == "request 1: slot 8 out of range [0, 8) (num_slots)");
    CHECK(error_of([&] {
            build_decode_metadata({{-1, 1, 0}}, d4, kLimits);
          }) == "request 0: slot -1 out of range [0, 8) (num_slots)");
    CHECK(error_of([&] {
            build_decode_metadata({{5, 1, 0}, {1, 1, 0}, {5, 1, 0}}, d4, kLimits);
          }) == "request 2: slot 5 already used by request 0");
    CHECK(error_of([&] {
            build_decode_metadata({{0, 100, 0}}, d4, kLimits);
          }) == "request 0: token id 100 out of range [0, 100) (vocab)");
    CHECK(error_of([&] {
            build_decode_metadata({{0, -3, 0}}, d4, kLimits);
          }) == "request 0: token id -3 out of range [0, 100) (vocab)");
    CHECK(error_of([&] { build_decode_metadata({{0, 1, -1}}, d4, kLimits); }) == "request 0: position -1 is negative");
    CHECK(error_of([&] {
            build_decode_metadata({{0, 1, 64}}, d4, kLimits);
          }) == "request 0: position 64 + 1 new token(s) = 65 exceeds max_context 64");
    CHECK(error_of([&] { build_decode_metadata({{0, 1, 63}}, d4, kLimits); }) == "(no error)");
  }
  SECTION("prefill") {
    const StepKey p = StepKey::prefill(32, 4);
    const StepLimits lim{8, 1000, 100};
    CHECK(error_of([&] { build_prefill_metadata({}, p, lim); }) ==
          "prefill batch is empty (a step needs at least one request)");
    std::vector<PrefillRequest> five;
    for (int i = 0; i < 5; ++i) five.push_back({i, {1}, 0});
    CHECK(error_of([&] { build_prefill_metadata(five, p, lim); }) ==
          "prefill batch has 5 sequences but the graph key allows at most 4 (max_seqs)");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, iota_tokens(20, 0), 0}, {1, iota_tokens(13, 0), 0}}, p, lim);
          }) == "prefill batch has 33 tokens but the graph key's token bucket is 32");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, {1}, 0}, {0, {1}, 0}}, p, lim);
          }) == "request 1: slot 0 already used by request 0");
    CHECK(error_of([&] {
            build_prefill_metadata({{9, {1}, 0}}, p, lim);
          }) == "request 0: slot 9 out of range [0, 8) (num_slots)");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, {1}, 0}, {1, {5, 6, 1000}, 0}}, p, lim);
          }) == "request 1, token 2: token id 1000 out of range [0, 1000) (vocab)");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, iota_tokens(11, 0), 90}}, p, lim);
          }) == "request 0: position 90 + 11 new token(s) = 101 exceeds max_context 100");
    CHECK(error_of([&] { build_prefill_metadata({{0, {}, -2}}, p, lim); }) == "request 0: position -2 is negative");
    CHECK(error_of([&] { build_prefill_metadata({{0, iota_tokens(10, 0), 90}}, p, lim); }) == "(no error)");
  }
  SECTION("keys and limits") {
    CHECK(error_of([&] {
            build_decode_metadata({{0, 1, 0}}, StepKey::prefill(16, 4), kLimits);
          }) == "decode metadata needs a decode key, got a prefill key");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, {1}, 0}}, d4, kLimits);
          }) == "prefill metadata needs a prefill key, got a decode key");
    CHECK(error_of([&] {
            build_decode_metadata({{0, 1, 0}}, StepKey::decode(0), kLimits);
          }) == "decode key: rows must be >= 1 with tokens = seqs, got tokens 0 and seqs 0");
    CHECK(error_of([&] {
            build_prefill_metadata({{0, {1}, 0}}, StepKey::prefill(0, 4), kLimits);
          }) == "prefill key: token bucket 0 and max_seqs 4 must both be >= 1");
    CHECK(error_of([&] {
            build_decode_metadata({{0, 1, 0}}, d4, StepLimits{0, 100, 64});
          }) == "step limits: num_slots 0, vocab 100 and max_context 64 must all be >= 1");
  }
}

TEST_CASE("prefill buckets are powers of two from 16 and include the maximum", "[metadata]") {
  CHECK(prefill_buckets(32768) == std::vector<int>{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768});
  CHECK(prefill_buckets(1000) == std::vector<int>{16, 32, 64, 128, 256, 512, 1000});
  CHECK(prefill_buckets(17) == std::vector<int>{16, 17});
  CHECK(prefill_buckets(16) == std::vector<int>{16});
  CHECK(prefill_buckets(10) == std::vector<int>{10});
  CHECK(prefill_buckets(1) == std::vector<int>{1});
  CHECK(error_of([] { prefill_buckets(0); }) == "prefill_buckets: max_tokens must be >= 1, got 0");

  const std::vector<int> b = prefill_buckets(32768);
  CHECK(pad_tokens_to_bucket(b, 0) == 16);
  CHECK(pad_tokens_to_bucket(b, 1) == 16);
  CHECK(pad_tokens_to_bucket(b, 16) == 16);
  CHECK(pad_tokens_to_bucket(b, 17) == 32);
  CHECK(pad_tokens_to_bucket(b, 1000) == 1024);
  CHECK(pad_tokens_to_bucket(b, 32768) == 32768);
  CHECK_FALSE(pad_tokens_to_bucket(b, 32769).has_value());
  CHECK(pad_tokens_to_bucket(prefill_buckets(1000), 600) == 1000);
  CHECK(error_of([&] { pad_tokens_to_bucket(b, -1); }) == "pad_tokens_to_bucket: n_tokens must be >= 0, got -1");
}
