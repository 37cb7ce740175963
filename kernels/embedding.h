// embedding.h: token embedding lookup, y[t] = table[ids[t]] (docs/MODEL.md; ref::embedding).
// Pure data movement: with table and output of one dtype the copy is byte-exact; f32 -> bf16
// rounds once to nearest even, bf16 -> f32 is exact.
// Ids: the host step-metadata builder validates every live id against [0, V) (ref::embedding
// throws on a bad id); the kernel never reads out of bounds regardless: an id outside [0, V)
// writes a zero row and is not counted or reported. Padding rows may therefore carry any id
// (token 0 is fine and reads row 0), or be zeroed through live_rows.
// Grid: one 256-thread block per token (T = the padded token count, the graph key); rows are
// copied 16 bytes at a time when dtypes match and the rows are 16-byte aligned, else per element.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct EmbeddingParams {
  const void* table = nullptr;  // [V, H] row-major, table_dtype f32 or bf16
  DType table_dtype = DType::bf16;
  const int32_t* ids = nullptr;  // [T] token ids (device)
  void* y = nullptr;             // [T, H] row-major, y_dtype f32 or bf16
  DType y_dtype = DType::bf16;
  int64_t V = 0;
  int H = 0;
  int T = 0;  // padded token count: the grid depends only on T
  // Optional [1] device count of live tokens: tokens t >= *live_rows write a zero row and read no id.
  const int32_t* live_rows = nullptr;
};

// Returns cudaErrorInvalidValue on bad params (null pointers, V < 1, H < 1, T < 0, dtypes), else
// the launch error.
cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace sg
