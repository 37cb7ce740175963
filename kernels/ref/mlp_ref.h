// mlp_ref.h: CPU reference for the dense pieces around the mixers:
//   linear      y = W x with W [out, in] (HF nn.Linear layout, no bias)
//   swiglu_mlp  down(silu(gate(x)) * up(x))
//   embedding   row lookup in the [V, H] embedding table
//   argmax      greedy token: first index of the maximum (per row or for one vector)
// Numeric choices:
//   linear: each output is a dot product accumulated in double, sequentially over `in`, rounded
//     once to f32 and then once more with `out` (Store::bf16 -> nearest-even bf16). Double
//     accumulation makes the reference (nearly) independent of summation order, so it is a fair
//     target for GPU GEMMs whatever order they use.
//   swiglu_mlp: g = linear(x, gate_w), u = linear(x, up_w), a = silu(g) = g / (1 + std::exp(-g))
//     in f32, h = a * u in f32, y = linear(h, down_w). Every intermediate Hugging Face materialises
//     in the activation dtype (g, u, a, h) is rounded with `act`, so Store::bf16 reproduces a bf16
//     model's roundings and Store::f32 keeps everything in f32; y is rounded with `out`.
//   argmax: the first index whose value is the maximum (ties -> lowest index). NaN follows torch:
//     NaN counts as larger than every number, so the index of the first NaN is returned when any
//     is present. All -inf returns 0.
#pragma once
#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

void linear(const float* x,  // [T, in] row-major
            const float* W,  // [out, in] row-major
            float* y,        // [T, out] row-major; must not alias x
            int64_t T, int in, int out, Store store_out = Store::f32);

void swiglu_mlp(const float* x,       // [T, H] row-major
                const float* gate_w,  // [I, H] row-major (gate_proj)
                const float* up_w,    // [I, H] row-major (up_proj)
                const float* down_w,  // [H, I] row-major (down_proj)
                float* y,             // [T, H] row-major; must not alias x
                int64_t T, int H, int I, Store act = Store::f32, Store store_out = Store::f32);

// y[t] = table[ids[t]]; throws std::invalid_argument on an id outside [0, V).
void embedding(const float* table,  // [V, H] row-major
               const int64_t* ids,  // [T]
               float* y,            // [T, H] row-major
               int64_t T, int64_t V, int H);

// First index of the maximum of x (NaN handling above).
int64_t argmax(const float* x,  // [n]
               int64_t n);

// argmax of every row.
void argmax_rows(const float* x,  // [T, n] row-major
                 int64_t* idx,    // [T]
                 int64_t T, int64_t n);

}  // namespace sg::ref
