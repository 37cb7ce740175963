// step_metadata.h: the per-step metadata of the GPU model step (ARCHITECTURE.md, "Data flow of one
// step"): built once on the host per step from the caller's requests, padded to the graph key's
// capacities, packed into one byte image with 256-byte-aligned sections and uploaded with one copy
// into a static device block; every layer's kernels read the same buffers at fixed offsets. Also
// the prefill token buckets (the prefill half of the graph keys). Pure host code, no CUDA.
//
// Conventions (all arrays int32 unless said otherwise):
// - Sequence i is request i, in the caller's order; its tokens are rows [cu_seqlens[i],
//   cu_seqlens[i+1]) of the packed [T, ...] activations. A decode row is a one-token sequence.
// - Padding: token rows past n_tokens have token 0, position 0, token_seq -1; sequences past n_seqs
//   have slot -1, zero length (cu_seqlens stays at n_tokens), no history, context 0, last_row -1;
//   chunks past n_chunks are {-1, 0, 0}. Kernels exit early on them and write zeros to outputs.
// - Empty prefill sequences (no new tokens) are ALLOWED: a zero-length live sequence keeps its
//   slot and index, produces no chunk and no token, its last_row is -1 (no logits row), and its
//   context length is its start_position. Kernels must leave its state untouched (exactly as for
//   a padding sequence, except that its slot is >= 0). A step must still hold >= 1 request.
// - Validation throws sg::Error naming the request and the limit (see build_*_metadata).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/contracts.h"

namespace sg {

struct DecodeRequest {
  int32_t slot;
  int32_t token;
  int32_t position;  // tokens already in the slot (the new token's absolute position)
};

struct PrefillRequest {
  int32_t slot;
  std::vector<int32_t> tokens;  // may be empty (see above)
  int32_t start_position = 0;   // tokens already in the slot; 0 = no history
};

enum class StepKind : uint8_t { decode, prefill };

// The shape half of a graph key (the other half is the arm selection). Decode: `tokens` = `seqs`
// = the padded batch (rows). Prefill: `tokens` = the token bucket, `seqs` = the most sequences.
struct StepKey {
  StepKind kind = StepKind::decode;
  int tokens = 0;
  int seqs = 0;
  static StepKey decode(int rows) { return {StepKind::decode, rows, rows}; }
  static StepKey prefill(int bucket, int max_seqs) { return {StepKind::prefill, bucket, max_seqs}; }
  int chunk_capacity() const { return conv_max_chunks(tokens, seqs); }  // conv chunk descriptors
  bool operator==(const StepKey&) const = default;
};

// Checks for every request; part of the engine's configuration.
struct StepLimits {
  int num_slots = 0;    // slots are in [0, num_slots)
  int vocab = 0;        // token ids are in [0, vocab)
  int max_context = 0;  // position + new tokens <= max_context
};

// The live counts, packed first in the image (counts section: int32[8], this order).
struct StepCounts {
  int32_t n_seqs = 0;           // live sequences (requests)
  int32_t n_tokens = 0;         // live token rows
  int32_t n_chunks = 0;         // live conv chunk descriptors
  int32_t max_seqlen = 0;       // most new tokens in one sequence
  int32_t max_context_len = 0;  // most KV / state tokens of one sequence after the step
  int32_t token_capacity = 0;   // the key's T (rows or bucket)
  int32_t seq_capacity = 0;     // the key's S (rows or max_seqs)
  int32_t chunk_capacity = 0;   // the key's conv_max_chunks(T, S)
};
static_assert(sizeof(StepCounts) == 8 * sizeof(int32_t));
static_assert(sizeof(ConvChunk) == 3 * sizeof(int32_t));

// Byte offsets of each section in the packed image; a pure function of the StepKey (never of the
// live batch), each a multiple of kMetadataAlign; total is rounded up to it too.
inline constexpr size_t kMetadataAlign = 256;
struct MetadataLayout {
  size_t counts = 0;        // StepCounts
  size_t tokens = 0;        // [T] token ids
  size_t positions = 0;     // [T] absolute positions
  size_t token_seq = 0;     // [T] sequence of each token row, -1 padding
  size_t slots = 0;         // [S] slot per sequence, -1 padding
  size_t cu_seqlens = 0;    // [S+1]
  size_t has_history = 0;   // [S] u8 0/1: start position > 0
  size_t context_lens = 0;  // [S] KV / state length after the step
  size_t last_rows = 0;     // [S] token row of the sequence's last token, -1 when none
  size_t chunks = 0;        // [NC] ConvChunk {seq, start, len}
  size_t total = 0;
  bool operator==(const MetadataLayout&) const = default;
};
// Section sizes grow with T and S, so a block of the largest key's total holds any smaller key.
MetadataLayout metadata_layout(const StepKey& key);

struct PackedMetadata {
  std::vector<std::byte> image;  // layout.total bytes; zeros between sections
  MetadataLayout layout;
};

struct StepMetadata {
  StepKey key;
  StepCounts counts;
  std::vector<int32_t> tokens;        // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> token_seq;     // [T]
  std::vector<int32_t> slots;         // [S]
  std::vector<int32_t> cu_seqlens;    // [S+1]
  std::vector<uint8_t> has_history;   // [S] u8, as conv.fwd and the delta-rule prefill read it
  std::vector<int32_t> context_lens;  // [S]
  std::vector<int32_t> last_rows;     // [S]
  std::vector<ConvChunk> chunks;      // [NC], NC = key.chunk_capacity()

  MetadataLayout layout() const { return metadata_layout(key); }
  // Writes the image into `dst` (at least layout().total bytes, e.g. a pinned staging buffer);
  // bytes between sections are zeroed, so the image is a pure function of the metadata.
  void pack_into(std::span<std::byte> dst) const;
  PackedMetadata pack() const;
};

// Decode: request i is row i; rows past the batch are padding. Throws sg::Error when the key is
// invalid (rows < 1), the batch is empty or has more requests than rows, a slot is out of range or
// repeated, a token id is out of range, a position is negative or position + 1 > max_context.
StepMetadata build_decode_metadata(const std::vector<DecodeRequest>& batch, const StepKey& key,
                                   const StepLimits& limits);
// Prefill: sequences packed in request order. Throws sg::Error when the key is invalid (bucket or
// max_seqs < 1), the batch is empty, has more sequences than max_seqs or more tokens than the
// bucket, a slot is out of range or repeated, a token id is out of range, a start position is
// negative or start_position + tokens > max_context.
StepMetadata build_prefill_metadata(const std::vector<PrefillRequest>& batch, const StepKey& key,
                                    const StepLimits& limits);

// Prefill token buckets: powers of two from 16 up to max_tokens, always including max_tokens
// (just {max_tokens} when it is below 16). Ascending. Throws sg::Error on max_tokens < 1.
std::vector<int> prefill_buckets(int max_tokens);
// The smallest bucket >= n_tokens (n_tokens >= 0), or nullopt when every bucket is smaller (the
// batch must be split or run eagerly). Throws sg::Error on negative n_tokens.
std::optional<int> pad_tokens_to_bucket(const std::vector<int>& buckets, int n_tokens);

}  // namespace sg
