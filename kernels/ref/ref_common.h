// ref_common.h: small helpers shared by the CPU reference ops (kernels/ref/): the output storage
// rule (`Store`: keep f32, or round to nearest-even bf16 as a GPU kernel storing bf16 would) and
// argument checks that throw std::invalid_argument. Plain C++, no CUDA.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/numeric.h"

namespace sg::ref {

// How a value is stored: as f32, or rounded once to bf16 (round to nearest, ties to even) and
// held in a float (so every reference buffer is a float array whatever the stored dtype).
enum class Store { f32, bf16 };

inline float store(float x, Store s) { return s == Store::bf16 ? sg::round_bf16(x) : x; }

namespace detail {

// Throws std::invalid_argument("<op>: <msg>") when `ok` is false.
inline void require(bool ok, const char* op, const std::string& msg) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + msg);
}

inline void require_ptr(const void* p, const char* op, const char* name) {
  require(p != nullptr, op, std::string(name) + " is a null pointer");
}

// Slot indices of non-padding rows must be distinct: two rows updating one slot in one call have
// no defined order on the GPU. slots [n]; O(n^2) is fine for reference-sized batches.
inline void require_distinct_slots(const int32_t* slots, int n, const char* op) {
  for (int a = 0; a < n; ++a) {
    if (slots[a] < 0) continue;
    for (int b = a + 1; b < n; ++b) {
      require(
          slots[a] != slots[b], op,
          "slot " + std::to_string(slots[a]) + " is used by rows " + std::to_string(a) + " and " + std::to_string(b));
    }
  }
}

// cu_seqlens [n + 1]: starts at 0 and never decreases.
inline void require_cu_seqlens(const int32_t* cu_seqlens, int n, const char* op) {
  require(cu_seqlens[0] == 0, op, "cu_seqlens[0] must be 0, got " + std::to_string(cu_seqlens[0]));
  for (int i = 0; i < n; ++i) {
    require(cu_seqlens[i + 1] >= cu_seqlens[i], op,
            "cu_seqlens must be non-decreasing (cu_seqlens[" + std::to_string(i + 1) +
                "] = " + std::to_string(cu_seqlens[i + 1]) + " < cu_seqlens[" + std::to_string(i) +
                "] = " + std::to_string(cu_seqlens[i]) + ")");
  }
}

}  // namespace detail
}  // namespace sg::ref
