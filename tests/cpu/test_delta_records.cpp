// The two-kernel delta-rule prefill's record layout (kernels/delta_rule_records.h), which its T
// kernel writes and its recurrence reads back into whole tiles: the record's chunks and the zeroed
// upper core matrices cover the four part tiles exactly once, the lower core matrices go to the
// record and the upper ones are zeroed, and an element's place in the record lands on its place in
// the tile.
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
      CHECK(m - i * (i + 1) / 2 == j);
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
