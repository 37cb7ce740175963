// argmax.h: greedy sampling, the first index of the maximum of each row of f32 logits, exactly as
// ref::argmax (kernels/ref/mlp_ref.h): ties go to the lowest index; NaN counts as larger than
// every number (torch), so a row with any NaN returns the index of its first NaN; a row of all
// -inf returns 0; +0 and -0 tie. The result is exact (no tolerance): the per-thread scans and the
// cross-thread combine use one strict total order on (is-NaN, value, -index), so any reduction
// order picks the same element.
// Grid: one 1024-thread block per row (rows = the padded row count, the graph key), or, split,
// `chunks` 256-thread blocks per row, each reducing a contiguous slice; the last of a row's blocks
// to finish (a per-row counter) combines their partials. The split depends only on rows and V
// (argmax_pick_chunks), so it is fixed per graph key. Rows are read as float4 when the row stride
// is a multiple of 4 and logits is 16-byte aligned (the slices start at multiples of 4).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/argmax_shapes.h"

namespace sg {

// A row's best logit and its token id, as a tensor-parallel rank hands it to tp_argmax (tp_argmax.h).
struct ArgmaxPair {
  float value;
  int32_t index;
};

struct ArgmaxParams {
  const float* logits = nullptr;  // [rows, ld] f32, the first V columns of each row are read
  int64_t ld = 0;                 // elements between rows, >= V; 0 = V
  int64_t V = 0;                  // 1 .. 2^31 - 1 (Qwen3.5: 248320)
  int rows = 0;                   // padded row count
  int32_t* out = nullptr;         // [rows] token ids
  // Optional [1] device count of live rows: rows r >= *live_rows write 0 and read nothing.
  const int32_t* live_rows = nullptr;
  // Optional split (chunks > 1): workspace of argmax_workspace_bytes(rows, chunks) bytes, and
  // [rows] int32 counters that are zero before the launch (the kernel leaves them zero again).
  int chunks = 1;
  void* workspace = nullptr;
  int32_t* counters = nullptr;
  // Optional [rows]: also each row's (best value, its index + index_base), the value being the
  // logit itself (NaN where the row's first NaN won); padding rows get (0, 0). A tensor-parallel
  // rank's LM head holds vocabulary rows from index_base on, so index_base makes the id global.
  ArgmaxPair* pairs = nullptr;
  int64_t index_base = 0;
};

// Returns cudaErrorInvalidValue on bad params, else the launch error.
cudaError_t argmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace sg
