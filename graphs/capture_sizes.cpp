// capture_sizes.cpp: graph keys and padding.
#include "graphs/capture_sizes.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace sg {

std::vector<int> decode_capture_sizes(int max_seqs) {
  if (max_seqs < 1) throw std::invalid_argument(fmt::format("max_seqs must be >= 1, got {}", max_seqs));
  std::vector<int> out;
  for (int s : {1, 2, 4}) {
    if (s <= max_seqs) out.push_back(s);
  }
  for (int s = 8; s <= max_seqs; s += 8) out.push_back(s);
  if (out.back() != max_seqs) out.push_back(max_seqs);
  return out;
}

std::optional<int> pad_to_key(const std::vector<int>& keys, int batch) {
  if (batch < 1) throw std::invalid_argument(fmt::format("batch must be >= 1, got {}", batch));
  for (int k : keys) {
    if (k >= batch) return k;
  }
  return std::nullopt;
}

std::vector<int32_t> pad_slots(const std::vector<int32_t>& live, int padded) {
  if (padded < static_cast<int>(live.size())) {
    throw std::invalid_argument(fmt::format("cannot pad {} rows down to {}", live.size(), padded));
  }
  std::vector<int32_t> out(live);
  out.resize(static_cast<size_t>(padded), -1);
  return out;
}

void validate_slots(const std::vector<int32_t>& slots, int num_slots) {
  std::vector<int> seen(static_cast<size_t>(std::max(num_slots, 0)), -1);
  for (size_t r = 0; r < slots.size(); ++r) {
    int32_t s = slots[r];
    if (s < 0 || s >= num_slots) {
      throw std::invalid_argument(fmt::format("row {}: slot {} out of range [0, {})", r, s, num_slots));
    }
    if (seen[static_cast<size_t>(s)] >= 0) {
      throw std::invalid_argument(
          fmt::format("row {}: slot {} already used by row {}", r, s, seen[static_cast<size_t>(s)]));
    }
    seen[static_cast<size_t>(s)] = static_cast<int>(r);
  }
}

}  // namespace sg
