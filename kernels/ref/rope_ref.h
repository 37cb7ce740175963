// rope_ref.h: CPU reference for the partial rotary embedding of the attention layers.
//   "rotate half" convention over the first rotary_dim features of each head; with
//   h = rotary_dim / 2, feature i (i < h) pairs with feature i + h:
//     y[i]     = x[i] * cos(a_i) - x[i + h] * sin(a_i)
//     y[i + h] = x[i + h] * cos(a_i) + x[i] * sin(a_i)
//   a_i = pos * inv_freq_i, inv_freq_i = theta^(-2i/rotary_dim), pos = absolute token index;
//   features rotary_dim..D-1 pass through unchanged.
// Numeric choices: everything in f32, the way Hugging Face computes it (the goal is to match HF):
//   inv_freq_i = 1.0f / std::pow(float(theta), float(2i) / float(rotary_dim))
//                (f32 pow, f32 divide)
//   a_i        = float(pos) * inv_freq_i   (one f32 product)
//   cos, sin   = std::cos(a_i), std::sin(a_i) in f32
//   y          = x * cos -/+ x_pair * sin in f32, rounded once with `out`.
// (HF then casts cos/sin to the activation dtype and rotates in that dtype; with Store::f32 we do
// not. Qwen3.5's interleaved M-RoPE reduces to this when the three position ids are equal, as
// they are for text.) theta arrives as double (the config's value) and is rounded to f32 first,
// as torch does. Positions must be < 2^24 so float(pos) is exact.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

// The rotary_dim/2 inverse frequencies, computed as documented above.
std::vector<float> rope_inv_freq(int rotary_dim, double theta);  // -> [rotary_dim / 2]

// Applies the rotary embedding in place to every head of every token.
void rope(float* x,                  // [T, H, D] row-major; rotated in place
          const int64_t* positions,  // [T] absolute position of each token, 0 <= pos < 2^24
          int64_t T, int H, int D, int rotary_dim, double theta, Store out = Store::f32);

}  // namespace sg::ref
