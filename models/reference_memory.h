// reference_memory.h: the host bytes the CPU reference model (models/reference_model.h) will
// allocate, computed from the config alone, so that a model that cannot fit is refused up front
// with the numbers (engine/host_memory.h) instead of failing in the middle of an allocation. A
// crafted config.json with enormous head sizes is refused this way in microseconds.
#pragma once
#include <cstdint>
#include <string>

#include "models/qwen35_config.h"

namespace sg {

struct ReferenceMemory {
  uint64_t weights = 0;      // every tensor of expected_weights() in f32 (HostWeights)
  uint64_t conv_state = 0;   // GDN layers x slots x C x (K - 1) f32
  uint64_t ssm_state = 0;    // GDN layers x slots x Hv x Dk x Dv f32
  uint64_t kv_cache = 0;     // attention layers x slots x 2 x max_context x Hkv x D f32
  uint64_t activations = 0;  // the scratch of one forward over max_tokens tokens (an upper estimate)
  uint64_t states() const;   // conv + SSM state + KV cache (what the model's constructor allocates)
  uint64_t total() const;    // all of the above; UINT64_MAX when it overflows
  // "weights 1.20 GiB (...), conv state ..., SSM state ..., KV cache ..., activations ..."
  std::string describe() const;
};

// Every figure saturates at UINT64_MAX instead of overflowing.
ReferenceMemory reference_memory(const Qwen35Config& c, int64_t num_slots, int64_t max_context, int64_t max_tokens);

// The bytes of every weight tensor the config needs, in f32 (expected_weights()).
uint64_t reference_weight_bytes(const Qwen35Config& c);

}  // namespace sg
