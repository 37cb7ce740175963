// delta_rule_records.h: the layout of the two-kernel delta-rule prefill's chunk records
// (delta_rule_prefill_wgmma_t.h), as constexpr functions that the kernels (device) and the CPU tests
// (host, tests/cpu/test_delta_records.cpp) share.
//
// A chunk's T and P (each 64 x 64, exact zeros above the diagonal) are stored as bf16 high and low
// part tiles. In shared memory a part tile is the core-matrix layout of wgmma_util.cuh: element
// (r, c) at (r / 8) 1024 + (c / 8) 128 + (r % 8) 16 + (c % 8) 2, i.e. 8 x 8 core matrices of 128
// bytes, core matrix (i, j) at i 1024 + j 128. A record keeps only the 36 core matrices of the lower
// triangle (j <= i; core matrix (i, j) at tri(i) + j, tri(i) = i (i + 1) / 2) of the four tiles T hi,
// T lo, P hi, P lo, one after another, then the gates; the recurrence copies them into whole tiles
// whose 28 upper core matrices it zeroed once.
//
// The recurrence's output tile (one a warpgroup): [64 tokens x 64 value columns] bf16, token c's
// 64 columns a row of 128 bytes, the row's eight 16-byte chunks swizzled by c % 8 (chunk q at
// (q ^ (c % 8)) 16), so that a warp's stores of its accumulators (8 columns x 4 token pairs) fall on
// distinct banks and its 16-byte reads of 4 whole rows on the fewest.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define SG_RECORDS_FN __host__ __device__ constexpr inline
#else
#define SG_RECORDS_FN constexpr inline
#endif

namespace sg::delta_records {

constexpr int kTri = 36;                              // core matrices of a lower triangle of 8 x 8, diagonal included
constexpr int kUpper = 64 - kTri;                     // the 28 above the diagonal
constexpr uint32_t kPartTile = 8192;                  // one whole [64 x 64] bf16 part tile
constexpr uint32_t kRecPart = kTri * 128;             // one part's lower triangle in a record
constexpr int kParts = 4;                             // T hi, T lo, P hi, P lo
constexpr uint32_t kRecGates = kParts * kRecPart;     // where the gates start in a record
constexpr uint32_t kGateBytes = 64 * 8 + 3 * 64 * 4;  // G (double), exp(G), exp(G_last - G), beta of 64 tokens
constexpr uint32_t kRecordBytes = kRecGates + kGateBytes;  // 19,712

// Records a v-head for steps of at most max_tokens tokens in at most max_seqs sequences: chunk ci
// of sequence n is record cu_seqlens[n] / 64 + n + ci (delta_rule_prefill_wgmma_t.h).
constexpr int64_t record_count(int max_tokens, int max_seqs) {
  return (static_cast<int64_t>(max_tokens) + 63) / 64 + max_seqs;
}
// The workspace of the two-kernel prefill (0 for negative arguments), host code such as the memory
// plan included.
constexpr size_t workspace_bytes(int max_tokens, int max_seqs, int Hv) {
  if (max_tokens < 0 || max_seqs < 0 || Hv < 0) return 0;
  return static_cast<size_t>(record_count(max_tokens, max_seqs)) * static_cast<size_t>(Hv) * kRecordBytes;
}

// Row groups of the lower core matrices m = 0 .. 35, three bits each (m < 21 in the first word):
// the i with tri(i) <= m < tri(i + 1), packed at compile time so that tri_row is a shift and a mask.
constexpr uint64_t tri_rows_word(int first, int count) {
  uint64_t w = 0;
  for (int m = first; m < first + count; ++m) {
    int i = 0;
    while ((i + 1) * (i + 2) / 2 <= m) ++i;
    w |= static_cast<uint64_t>(i) << (3 * (m - first));
  }
  return w;
}
constexpr uint64_t kTriRowsLo = tri_rows_word(0, 21), kTriRowsHi = tri_rows_word(21, kTri - 21);

// Row group of lower core matrix m (0 <= m < 36).
SG_RECORDS_FN int tri_row(int m) {
  return static_cast<int>((m < 21 ? kTriRowsLo >> (3 * m) : kTriRowsHi >> (3 * (m - 21))) & 7);
}

// Where 16-byte chunk i (0 <= i < kParts kRecPart / 16) of a record's parts lands in the whole
// tiles (byte offset from T hi's start; part p at p kPartTile).
SG_RECORDS_FN uint32_t record_chunk_tile_offset(int i) {
  const int part = i / (kTri * 8), m = (i / 8) % kTri, row = tri_row(m), col = m - row * (row + 1) / 2;
  return static_cast<uint32_t>(part) * kPartTile + static_cast<uint32_t>(row * 1024 + col * 128 + (i % 8) * 16);
}

// The 16-byte chunk u (0 <= u < kParts kUpper 8) of the whole tiles that no record fills: the upper
// core matrices (row group b < column group a + 1), byte offset as record_chunk_tile_offset's.
SG_RECORDS_FN uint32_t upper_chunk_tile_offset(int u) {
  const int part = u / (kUpper * 8), v = (u / 8) % kUpper, a = tri_row(v), row = v - a * (a + 1) / 2, col = a + 1;
  return static_cast<uint32_t>(part) * kPartTile + static_cast<uint32_t>(row * 1024 + col * 128 + (u % 8) * 16);
}

// Byte offset in a record's part `part` (0 .. 3) of element (r, c) of a lower core matrix
// (c / 8 <= r / 8).
SG_RECORDS_FN uint32_t record_element_offset(int part, int r, int c) {
  const int i = r >> 3, j = c >> 3;
  return static_cast<uint32_t>(part) * kRecPart +
         static_cast<uint32_t>((i * (i + 1) / 2 + j) * 128 + (r & 7) * 16 + (c & 7) * 2);
}

// Byte offset of element (r, c) in the whole tile of part `part` (as record_chunk_tile_offset's).
SG_RECORDS_FN uint32_t tile_element_offset(int part, int r, int c) {
  return static_cast<uint32_t>(part) * kPartTile +
         static_cast<uint32_t>((r >> 3) * 1024 + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2);
}

// Byte offset of 16-byte chunk q (columns 8 q ..) of token c's row in the output tile.
SG_RECORDS_FN uint32_t out_tile_chunk_offset(int c, int q) {
  return static_cast<uint32_t>(c * 128 + ((q ^ (c & 7)) << 4));
}
// Byte offset of element (token c, value column v) in the output tile.
SG_RECORDS_FN uint32_t out_tile_element_offset(int c, int v) {
  return out_tile_chunk_offset(c, v >> 3) + static_cast<uint32_t>((v & 7) * 2);
}

}  // namespace sg::delta_records

#undef SG_RECORDS_FN
