// The two-kernel delta-rule prefill's record layout (kernels/delta_rule_records.h), which its T
// kernel writes and its recurrence reads back into whole tiles: the record's chunks and the zeroed
// upper core matrices cover the four part tiles exactly once, the lower core matrices go to the
// record and the upper ones are zeroed, and an element's place in the record lands on its place in
// the tile; the recurrence's output tile gives each element one place and its stores and reads no
// bank conflicts.
#include <cstdint>
#include <vector>

#include "kernels/delta_rule_records.h"
#include "tests/support/catch.h"

using namespace sg::delta_records;

TEST_CASE("delta records: the triangle's index and its inverse", "[delta_records]") {
  int m = 0;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j <= i; ++j, ++m) {
      CAPTURE(i, j, m);
      CHECK(tri_row(m) == i);
      // The inverse's column, as record_chunk_tile_offset computes it: core matrix m's first chunk
      // (part 0) lands at row group i, column group j of the tile.
      CHECK(record_chunk_tile_offset(8 * m) == static_cast<uint32_t>(i * 1024 + j * 128));
    }
  }
  CHECK(m == kTri);
  CHECK(kTri + kUpper == 64);
  CHECK(kRecGates == 4 * 36 * 128);
}

TEST_CASE("delta records: record chunks and zeroed chunks cover the four tiles once", "[delta_records]") {
  constexpr int kChunks = kParts * static_cast<int>(kPartTile) / 16;  // 16-byte chunks of the four tiles
  std::vector<int> hits(kChunks, 0), from_record(kChunks, 0);
  const int record_chunks = static_cast<int>(kRecGates / 16), upper_chunks = kParts * kUpper * 8;
  CHECK(record_chunks + upper_chunks == kChunks);
  for (int i = 0; i < record_chunks; ++i) {
    const uint32_t o = record_chunk_tile_offset(i);
    REQUIRE(o % 16 == 0);
    REQUIRE(o < kParts * kPartTile);
    ++hits[o / 16];
    from_record[o / 16] = 1;
    // A record chunk of part p lands in tile p, in a lower core matrix.
    const uint32_t in_tile = o % kPartTile;
    CHECK(static_cast<int>(o / kPartTile) == i / (kTri * 8));
    CHECK(in_tile % 1024 / 128 <= in_tile / 1024);
  }
  for (int u = 0; u < upper_chunks; ++u) {
    const uint32_t o = upper_chunk_tile_offset(u);
    REQUIRE(o % 16 == 0);
    REQUIRE(o < kParts * kPartTile);
    ++hits[o / 16];
    const uint32_t in_tile = o % kPartTile;
    CHECK(in_tile % 1024 / 128 > in_tile / 1024);  // column group > row group
  }
  int once = 0;
  for (int h : hits) once += h == 1;
  CHECK(once == kChunks);
  // Consecutive record chunks fill whole core matrices (eight 16-byte rows each) in order.
  for (int i = 0; i < record_chunks; i += 8) {
    const uint32_t o = record_chunk_tile_offset(i);
    CHECK(o % 128 == 0);
    for (int w = 1; w < 8; ++w) CHECK(record_chunk_tile_offset(i + w) == o + 16 * static_cast<uint32_t>(w));
  }
}

TEST_CASE("delta records: an element's record place lands on its tile place", "[delta_records]") {
  for (int part = 0; part < kParts; ++part) {
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < 64; ++c) {
        if ((c >> 3) > (r >> 3)) continue;  // an upper core matrix: zero, not in the record
        const uint32_t ro = record_element_offset(part, r, c);
        CAPTURE(part, r, c, ro);
        REQUIRE(ro < kRecGates);
        CHECK(record_chunk_tile_offset(static_cast<int>(ro / 16)) + ro % 16 == tile_element_offset(part, r, c));
      }
    }
  }
  // The tile layout itself: core matrix (r / 8, c / 8) of 128 bytes, rows of 16 bytes, bf16 elements.
  CHECK(tile_element_offset(0, 0, 0) == 0);
  CHECK(tile_element_offset(0, 0, 1) == 2);
  CHECK(tile_element_offset(0, 1, 0) == 16);
  CHECK(tile_element_offset(0, 0, 8) == 128);
  CHECK(tile_element_offset(0, 8, 0) == 1024);
  CHECK(tile_element_offset(1, 63, 63) == 8192 + 7 * 1024 + 7 * 128 + 7 * 16 + 7 * 2);
}

TEST_CASE("delta records: the recurrence's output tile", "[delta_records]") {
  // Every element of the [64 x 64] bf16 tile has its own place, inside its token's 128-byte row, and
  // the chunk offsets are the element offsets of columns 8 q.
  std::vector<int> hits(64 * 64, 0);
  for (int c = 0; c < 64; ++c) {
    for (int v = 0; v < 64; ++v) {
      const uint32_t o = out_tile_element_offset(c, v);
      REQUIRE(o % 2 == 0);
      REQUIRE(o < 64 * 64 * 2);
      CHECK(static_cast<int>(o / 128) == c);
      ++hits[o / 2];
      if (v % 8 == 0) CHECK(out_tile_chunk_offset(c, v / 8) == o);
    }
  }
  int once = 0;
  for (int h : hits) once += h == 1;
  CHECK(once == 64 * 64);
  // A warp's store of one accumulator element i (lane g = lane / 4 holds value column 16 w + g + 8 h,
  // lane t = lane % 4 token 8 j + 2 t + e): 32 lanes, every bank at most one 4-byte word (two lanes
  // may write the two halves of one word).
  for (int w = 0; w < 4; ++w) {
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1, j = i >> 2, e = i & 1;
      std::vector<int64_t> word_of_bank(32, -1);
      bool conflict = false;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        const uint32_t word = out_tile_element_offset(8 * j + 2 * t + e, 16 * w + g + 8 * h) / 4;
        int64_t& seen = word_of_bank[word % 32];
        if (seen >= 0 && seen != static_cast<int64_t>(word)) conflict = true;
        seen = word;
      }
      CAPTURE(w, i);
      CHECK_FALSE(conflict);
    }
  }
  // A warp's 16-byte reads (lane l of warp k reads chunk u = 32 k + l: token u / 8, chunk u % 8): its
  // four tokens' rows, each the 32 banks once, so four wavefronts for the 512 bytes, the fewest.
  for (int k = 0; k < 16; ++k) {
    std::vector<int> bank_hits(32, 0);
    for (int l = 0; l < 32; ++l) {
      const int u = 32 * k + l;
      const uint32_t o = out_tile_chunk_offset(u / 8, u % 8);
      for (int b = 0; b < 4; ++b) ++bank_hits[(o / 4 + b) % 32];
    }
    for (int b = 0; b < 32; ++b) CHECK(bank_hits[b] == 4);
  }
}
