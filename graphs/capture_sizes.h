// capture_sizes.h: which step shapes get a CUDA graph, and how a live batch pads up to one.
// Pure host logic (no CUDA), covered by CPU tests.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace sg {

// Decode graph keys: 1, 2, 4, then multiples of 8 up to max_seqs, always including max_seqs.
// Ascending. max_seqs >= 1.
std::vector<int> decode_capture_sizes(int max_seqs);
// The smallest key >= batch, or nullopt when the batch is larger than every key (eager fallback).
std::optional<int> pad_to_key(const std::vector<int>& keys, int batch);
// Slots for a padded decode batch: the live slots then -1 for each padding row.
std::vector<int32_t> pad_slots(const std::vector<int32_t>& live, int padded);
// Checks a live batch's slots: each in [0, num_slots), none repeated. Throws sg-style
// std::invalid_argument naming the first offending row.
void validate_slots(const std::vector<int32_t>& slots, int num_slots);

}  // namespace sg
