// weight_parts.h: where every checkpoint tensor goes in the model step's device weights, stated
// once. The step fuses several checkpoint tensors into one projection weight (q|k|v|z|b|a into
// a GDN layer's in_proj, q|k|v into an attention layer's qkv_proj, gate and up into gate_up, in
// halves or in interleaved groups of rows for the SwiGLU epilogue); load_host_weights uploads by
// this table, and the CPU tests check that its parts name every tensor of the checkpoint once and
// tile every step weight exactly. Pure host code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/qwen35_config.h"
#include "models/step_layout.h"

namespace sg {

struct WeightPart {
  std::string name;    // the checkpoint tensor (Hugging Face name)
  std::string tensor;  // the step weight it goes into, e.g. "layers.3.gdn.in_proj"
  TensorView dst;      // that weight (lay_out_step's view): [rows, cols] or 1-D
  int64_t row0 = 0;    // the part's first row in dst (1-D: first element)
  int64_t rows = 0;    // its rows (1-D: elements); the checkpoint tensor holds rows x cols values
  int64_t group = 0;   // 0: rows [row0, row0 + rows); G > 0: G rows at a time, group j at row0 + 2 G j
};

// Values a row of dst (1 for a 1-D tensor).
int64_t weight_part_cols(const WeightPart& p);
// dst's row for the part's row r (0 <= r < rows).
int64_t weight_part_row(const WeightPart& p, int64_t r);

// The parts of the step weights `t` for config c, gate_up in groups of gu_group rows (0: gate_proj
// then up_proj, halves), in checkpoint order (expected_weights'): embed_tokens, then per layer
// its norms, mixer and MLP, then the final norm and lm_head (absent when tied).
std::vector<WeightPart> weight_parts(const Qwen35Config& c, const StepTensors& t, int64_t gu_group);

}  // namespace sg
