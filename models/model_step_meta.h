// model_step_meta.h (internal to models/model_step*.cpp): device pointers into the static step
// metadata block for a key, and small view helpers shared by the launch files.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "models/step_metadata.h"

namespace sg::detail {

// Device pointers into the static metadata block (step_metadata.h) laid out for `key`.
struct MetaPtrs {
  const int32_t* n_seqs = nullptr;       // [1] live sequences (StepCounts::n_seqs)
  const int32_t* n_tokens = nullptr;     // [1] live token rows (StepCounts::n_tokens)
  const int32_t* n_chunks = nullptr;     // [1] live conv chunk descriptors
  const int32_t* tokens = nullptr;       // [T]
  const int32_t* positions = nullptr;    // [T]
  const int32_t* token_seq = nullptr;    // [T]
  const int32_t* slots = nullptr;        // [S] (decode: row i is sequence i, so per row)
  const int32_t* cu_seqlens = nullptr;   // [S + 1]
  const uint8_t* has_history = nullptr;  // [S]
  const int32_t* last_rows = nullptr;    // [S]
  const ConvChunk* chunks = nullptr;     // [key.chunk_capacity()]
};

inline MetaPtrs meta_ptrs(const void* block, const StepKey& key) {
  static_assert(offsetof(StepCounts, n_seqs) == 0 && offsetof(StepCounts, n_tokens) == 4 &&
                offsetof(StepCounts, n_chunks) == 8);
  const char* base = static_cast<const char*>(block);
  const MetadataLayout l = metadata_layout(key);
  const auto* counts = reinterpret_cast<const int32_t*>(base + l.counts);
  MetaPtrs m;
  m.n_seqs = counts;
  m.n_tokens = counts + 1;
  m.n_chunks = counts + 2;
  m.tokens = reinterpret_cast<const int32_t*>(base + l.tokens);
  m.positions = reinterpret_cast<const int32_t*>(base + l.positions);
  m.token_seq = reinterpret_cast<const int32_t*>(base + l.token_seq);
  m.slots = reinterpret_cast<const int32_t*>(base + l.slots);
  m.cu_seqlens = reinterpret_cast<const int32_t*>(base + l.cu_seqlens);
  m.has_history = reinterpret_cast<const uint8_t*>(base + l.has_history);
  m.last_rows = reinterpret_cast<const int32_t*>(base + l.last_rows);
  m.chunks = reinterpret_cast<const ConvChunk*>(base + l.chunks);
  return m;
}

// A contiguous [rows, cols] view at `data`.
inline TensorView mat(void* data, DType t, int64_t rows, int64_t cols) {
  return TensorView::contiguous(data, t, {rows, cols});
}

inline const void* offset(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * static_cast<int64_t>(dtype_size(t));
}

}  // namespace sg::detail
