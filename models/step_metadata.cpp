// step_metadata.cpp: building, validating and packing the per-step metadata; prefill buckets.
#include "models/step_metadata.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/error.h"

namespace sg {
namespace {

size_t align_up(size_t x) { return (x + kMetadataAlign - 1) / kMetadataAlign * kMetadataAlign; }

const char* kind_name(StepKind k) { return k == StepKind::decode ? "decode" : "prefill"; }

void check_key(const StepKey& key, StepKind want) {
  if (key.kind != want) {
    throw Error(
        fmt::format("{} metadata needs a {} key, got a {} key", kind_name(want), kind_name(want), kind_name(key.kind)));
  }
  if (want == StepKind::decode && (key.tokens < 1 || key.seqs != key.tokens)) {
    throw Error(fmt::format("decode key: rows must be >= 1 with tokens = seqs, got tokens {} and seqs {}", key.tokens,
                            key.seqs));
  }
  if (want == StepKind::prefill && (key.tokens < 1 || key.seqs < 1)) {
    throw Error(fmt::format("prefill key: token bucket {} and max_seqs {} must both be >= 1", key.tokens, key.seqs));
  }
}

void check_limits(const StepLimits& l) {
  if (l.num_slots < 1 || l.vocab < 1 || l.max_context < 1) {
    throw Error(fmt::format("step limits: num_slots {}, vocab {} and max_context {} must all be >= 1", l.num_slots,
                            l.vocab, l.max_context));
  }
}

// Slot range and uniqueness; `seen` maps slot -> first request using it.
void check_slot(int32_t slot, size_t i, const StepLimits& l, std::vector<int>& seen) {
  if (slot < 0 || slot >= l.num_slots) {
    throw Error(fmt::format("request {}: slot {} out of range [0, {}) (num_slots)", i, slot, l.num_slots));
  }
  int& first = seen[static_cast<size_t>(slot)];
  if (first >= 0) throw Error(fmt::format("request {}: slot {} already used by request {}", i, slot, first));
  first = static_cast<int>(i);
}

void check_token(int32_t tok, size_t i, const std::string& where, const StepLimits& l) {
  if (tok < 0 || tok >= l.vocab) {
    throw Error(fmt::format("request {}{}: token id {} out of range [0, {}) (vocab)", i, where, tok, l.vocab));
  }
}

void check_context(int32_t pos, int64_t len, size_t i, const StepLimits& l) {
  if (pos < 0) throw Error(fmt::format("request {}: position {} is negative", i, pos));
  if (pos + len > l.max_context) {
    throw Error(fmt::format("request {}: position {} + {} new token(s) = {} exceeds max_context {}", i, pos, len,
                            pos + len, l.max_context));
  }
}

// Every array at its capacity with the padding values; live entries are filled by the callers.
StepMetadata padded(const StepKey& key) {
  StepMetadata m;
  m.key = key;
  const auto T = static_cast<size_t>(key.tokens), S = static_cast<size_t>(key.seqs);
  m.tokens.assign(T, 0);
  m.positions.assign(T, 0);
  m.token_seq.assign(T, -1);
  m.slots.assign(S, -1);
  m.cu_seqlens.assign(S + 1, 0);
  m.has_history.assign(S, 0);
  m.context_lens.assign(S, 0);
  m.last_rows.assign(S, -1);
  m.chunks.assign(static_cast<size_t>(key.chunk_capacity()), ConvChunk{-1, 0, 0});
  m.counts.token_capacity = key.tokens;
  m.counts.seq_capacity = key.seqs;
  m.counts.chunk_capacity = key.chunk_capacity();
  return m;
}

// Fills cu_seqlens' padding tail, the chunks and the counts from the live per-sequence entries.
void finish(StepMetadata& m, int n_seqs) {
  const int32_t n_tokens = m.cu_seqlens[static_cast<size_t>(n_seqs)];
  for (size_t s = static_cast<size_t>(n_seqs) + 1; s < m.cu_seqlens.size(); ++s) m.cu_seqlens[s] = n_tokens;
  const std::vector<ConvChunk> live = build_conv_chunks(m.cu_seqlens);
  require(live.size() <= m.chunks.size(), "{} conv chunks exceed the key's bound {}", live.size(), m.chunks.size());
  std::copy(live.begin(), live.end(), m.chunks.begin());
  m.counts.n_seqs = n_seqs;
  m.counts.n_tokens = n_tokens;
  m.counts.n_chunks = static_cast<int32_t>(live.size());
  for (int s = 0; s < n_seqs; ++s) {
    const auto u = static_cast<size_t>(s);
    m.counts.max_seqlen = std::max(m.counts.max_seqlen, m.cu_seqlens[u + 1] - m.cu_seqlens[u]);
    m.counts.max_context_len = std::max(m.counts.max_context_len, m.context_lens[u]);
  }
}

template <class T>
void put(std::span<std::byte> dst, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(dst.data() + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

MetadataLayout metadata_layout(const StepKey& key) {
  require(key.tokens >= 1 && key.seqs >= 1, "metadata_layout: tokens {} and seqs {} must be >= 1", key.tokens,
          key.seqs);
  const auto T = static_cast<size_t>(key.tokens), S = static_cast<size_t>(key.seqs);
  const auto NC = static_cast<size_t>(key.chunk_capacity());
  MetadataLayout l;
  size_t at = 0;
  auto section = [&](size_t& field, size_t bytes) {
    field = at;
    at = align_up(at + bytes);
  };
  section(l.counts, sizeof(StepCounts));
  section(l.tokens, T * sizeof(int32_t));
  section(l.positions, T * sizeof(int32_t));
  section(l.token_seq, T * sizeof(int32_t));
  section(l.slots, S * sizeof(int32_t));
  section(l.cu_seqlens, (S + 1) * sizeof(int32_t));
  section(l.has_history, S * sizeof(uint8_t));
  section(l.context_lens, S * sizeof(int32_t));
  section(l.last_rows, S * sizeof(int32_t));
  section(l.chunks, NC * sizeof(ConvChunk));
  l.total = at;
  return l;
}

void StepMetadata::pack_into(std::span<std::byte> dst) const {
  const MetadataLayout l = layout();
  require(dst.size() >= l.total, "pack_into: destination holds {} bytes but the image needs {}", dst.size(), l.total);
  const auto T = static_cast<size_t>(key.tokens), S = static_cast<size_t>(key.seqs);
  require(tokens.size() == T && positions.size() == T && token_seq.size() == T && slots.size() == S &&
              cu_seqlens.size() == S + 1 && has_history.size() == S && context_lens.size() == S &&
              last_rows.size() == S && chunks.size() == static_cast<size_t>(key.chunk_capacity()),
          "pack_into: array sizes do not match the key (tokens {}, seqs {})", T, S);
  std::memset(dst.data(), 0, l.total);
  std::memcpy(dst.data() + l.counts, &counts, sizeof(StepCounts));
  put(dst, l.tokens, tokens);
  put(dst, l.positions, positions);
  put(dst, l.token_seq, token_seq);
  put(dst, l.slots, slots);
  put(dst, l.cu_seqlens, cu_seqlens);
  put(dst, l.has_history, has_history);
  put(dst, l.context_lens, context_lens);
  put(dst, l.last_rows, last_rows);
  put(dst, l.chunks, chunks);
}

PackedMetadata StepMetadata::pack() const {
  PackedMetadata p;
  p.layout = layout();
  p.image.resize(p.layout.total);
  pack_into(p.image);
  return p;
}

StepMetadata build_decode_metadata(const std::vector<DecodeRequest>& batch, const StepKey& key,
                                   const StepLimits& limits) {
  check_key(key, StepKind::decode);
  check_limits(limits);
  if (batch.empty()) throw Error("decode batch is empty (a step needs at least one request)");
  if (batch.size() > static_cast<size_t>(key.tokens)) {
    throw Error(fmt::format("decode batch of {} requests exceeds the graph key's {} rows", batch.size(), key.tokens));
  }
  std::vector<int> seen(static_cast<size_t>(limits.num_slots), -1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const DecodeRequest& r = batch[i];
    check_slot(r.slot, i, limits, seen);
    check_token(r.token, i, "", limits);
    check_context(r.position, 1, i, limits);
  }
  StepMetadata m = padded(key);
  for (size_t i = 0; i < batch.size(); ++i) {
    const DecodeRequest& r = batch[i];
    m.tokens[i] = r.token;
    m.positions[i] = r.position;
    m.token_seq[i] = static_cast<int32_t>(i);
    m.slots[i] = r.slot;
    m.cu_seqlens[i + 1] = static_cast<int32_t>(i + 1);
    m.has_history[i] = r.position > 0 ? 1 : 0;
    m.context_lens[i] = r.position + 1;
    m.last_rows[i] = static_cast<int32_t>(i);
  }
  finish(m, static_cast<int>(batch.size()));
  return m;
}

StepMetadata build_prefill_metadata(const std::vector<PrefillRequest>& batch, const StepKey& key,
                                    const StepLimits& limits) {
  check_key(key, StepKind::prefill);
  check_limits(limits);
  if (batch.empty()) throw Error("prefill batch is empty (a step needs at least one request)");
  if (batch.size() > static_cast<size_t>(key.seqs)) {
    throw Error(fmt::format("prefill batch has {} sequences but the graph key allows at most {} (max_seqs)",
                            batch.size(), key.seqs));
  }
  std::vector<int> seen(static_cast<size_t>(limits.num_slots), -1);
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const PrefillRequest& r = batch[i];
    check_slot(r.slot, i, limits, seen);
    for (size_t t = 0; t < r.tokens.size(); ++t) check_token(r.tokens[t], i, fmt::format(", token {}", t), limits);
    check_context(r.start_position, static_cast<int64_t>(r.tokens.size()), i, limits);
    total += static_cast<int64_t>(r.tokens.size());
  }
  if (total > key.tokens) {
    throw Error(fmt::format("prefill batch has {} tokens but the graph key's token bucket is {}", total, key.tokens));
  }
  StepMetadata m = padded(key);
  int32_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const PrefillRequest& r = batch[i];
    const auto len = static_cast<int32_t>(r.tokens.size());
    for (int32_t t = 0; t < len; ++t) {
      const auto u = static_cast<size_t>(row + t);
      m.tokens[u] = r.tokens[static_cast<size_t>(t)];
      m.positions[u] = r.start_position + t;
      m.token_seq[u] = static_cast<int32_t>(i);
    }
    row += len;
    m.slots[i] = r.slot;
    m.cu_seqlens[i + 1] = row;
    m.has_history[i] = r.start_position > 0 ? 1 : 0;
    m.context_lens[i] = r.start_position + len;
    m.last_rows[i] = len > 0 ? row - 1 : -1;
  }
  finish(m, static_cast<int>(batch.size()));
  return m;
}

std::vector<int> prefill_buckets(int max_tokens) {
  if (max_tokens < 1) throw Error(fmt::format("prefill_buckets: max_tokens must be >= 1, got {}", max_tokens));
  std::vector<int> out;
  for (int64_t b = 16; b < max_tokens; b *= 2) out.push_back(static_cast<int>(b));
  out.push_back(max_tokens);
  return out;
}

std::optional<int> pad_tokens_to_bucket(const std::vector<int>& buckets, int n_tokens) {
  if (n_tokens < 0) throw Error(fmt::format("pad_tokens_to_bucket: n_tokens must be >= 0, got {}", n_tokens));
  for (int b : buckets) {
    if (b >= n_tokens) return b;
  }
  return std::nullopt;
}

}  // namespace sg
