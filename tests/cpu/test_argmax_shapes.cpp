// CPU tests of the argmax's split (kernels/argmax_shapes.h): the blocks a row is split over for the
// model's decode buckets at the vocabulary size, the caps and the refusals, and the workspace of a
// split.
#include <algorithm>
#include <cstdint>

#include "kernels/argmax_shapes.h"
#include "models/qwen35_config.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("argmax shapes: the split of a row gives every SM two blocks, one a 2048 logits at most", "[argmax]") {
  const int64_t V = preset("qwen3.5-4b").vocab;  // 248320, the 27B's too
  REQUIRE(V == 248320);
  // The decode buckets on 132 SMs (H100 SXM, H200): ceil(264 / rows), at most V / 2048 = 121.
  CHECK(argmax_pick_chunks(1, V, 132) == 121);
  CHECK(argmax_pick_chunks(2, V, 132) == 121);
  CHECK(argmax_pick_chunks(4, V, 132) == 66);
  CHECK(argmax_pick_chunks(8, V, 132) == 33);
  CHECK(argmax_pick_chunks(16, V, 132) == 17);
  CHECK(argmax_pick_chunks(32, V, 132) == 9);
  CHECK(argmax_pick_chunks(300, V, 132) == 1);  // the rows alone fill every SM twice
  CHECK(argmax_pick_chunks(32, V, 114) == 8);   // 114 SMs (H100 PCIe): ceil(228 / 32)
  // Too few logits to split: one block per 2048 logits at most.
  CHECK(argmax_pick_chunks(4, 100, 132) == 1);
  CHECK(argmax_pick_chunks(1, 4095, 132) == 1);
  CHECK(argmax_pick_chunks(1, 4096, 132) == 2);
  // At most 65535 blocks a row (grid x).
  CHECK(argmax_pick_chunks(1, int64_t{1} << 40, 100000) == kArgmaxMaxChunks);
  // No rows or logits: one block; an SM count below 1 counts as one SM.
  CHECK(argmax_pick_chunks(0, V, 132) == 1);
  CHECK(argmax_pick_chunks(-1, V, 132) == 1);
  CHECK(argmax_pick_chunks(4, 0, 132) == 1);
  CHECK(argmax_pick_chunks(4, -5, 132) == 1);
  CHECK(argmax_pick_chunks(1, V, 0) == 2);
  CHECK(argmax_pick_chunks(1, V, -7) == 2);
  // Over rows, SM counts and vocabulary sizes: the fewest blocks a row that give every SM two
  // blocks, unless the 2048-logit cap comes first.
  for (int sms : {1, 66, 114, 132}) {
    for (int64_t v : {int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{4096}, int64_t{100000}, V}) {
      for (int rows = 1; rows <= 300; ++rows) {
        CAPTURE(sms, v, rows);
        const int c = argmax_pick_chunks(rows, v, sms);
        const int64_t cap = std::max<int64_t>(1, v / kArgmaxChunkLogits);
        CHECK(c >= 1);
        CHECK(c <= cap);
        CHECK((c == cap || static_cast<int64_t>(c) * rows >= 2 * sms));
        if (c > 1) CHECK(static_cast<int64_t>(c - 1) * rows < 2 * sms);
      }
    }
  }
}

TEST_CASE("argmax shapes: a split's workspace is 8 bytes a row and chunk, none without a split", "[argmax]") {
  CHECK(kArgmaxPartialBytes == 8);
  CHECK(argmax_workspace_bytes(32, 9) == 32u * 9 * 8);
  CHECK(argmax_workspace_bytes(1, 121) == 968);
  CHECK(argmax_workspace_bytes(32, 1) == 0);
  CHECK(argmax_workspace_bytes(32, 0) == 0);
  CHECK(argmax_workspace_bytes(0, 9) == 0);
  CHECK(argmax_workspace_bytes(-1, 9) == 0);
  CHECK(argmax_workspace_bytes(65535, kArgmaxMaxChunks) == size_t{65535} * 65535 * 8);  // no int overflow
}
