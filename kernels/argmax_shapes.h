// argmax_shapes.h: the shape logic of the greedy-sampling argmax (argmax.h), CUDA-free so that the
// CPU tests cover it: how many blocks a row is split over, and the workspace of a split.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sg {

constexpr size_t kArgmaxPartialBytes = 8;     // a split's partial: the chunk's best value (f32), its index (i32)
constexpr int64_t kArgmaxChunkLogits = 2048;  // the fewest logits a chunk of a split row is given
constexpr int kArgmaxMaxChunks = 65535;       // chunks a row: grid x

// Bytes of the split's partials: kArgmaxPartialBytes per (row, chunk); 0 without a split
// (chunks <= 1) or rows.
size_t argmax_workspace_bytes(int rows, int chunks);
// Blocks per row for `rows` rows of V logits on `num_sms` SMs: enough to give every SM two blocks
// (ceil(2 num_sms / rows)), at most one per 2048 logits (V / 2048, at least 1) and 65535; 1 for no
// rows or logits. A num_sms below 1 counts as 1.
int argmax_pick_chunks(int rows, int64_t V, int num_sms);

}  // namespace sg
