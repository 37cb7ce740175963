// mlp_ref.cpp: linear (double accumulation), SwiGLU MLP, embedding lookup and argmax, plain loops
// (see mlp_ref.h for the numeric choices).
#include "kernels/ref/mlp_ref.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace sg::ref {

void linear(const float* x, const float* W, float* y, int64_t T, int in, int out, Store store_out) {
  if (T <= 0 || in <= 0 || out <= 0) {
    throw std::invalid_argument(fmt::format("linear: T ({}), in ({}) and out ({}) must be > 0", T, in, out));
  }
  if (!x || !W || !y) throw std::invalid_argument("linear: null pointer argument");
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * in;
    for (int o = 0; o < out; ++o) {
      const float* wo = W + static_cast<int64_t>(o) * in;
      double acc = 0.0;
      for (int i = 0; i < in; ++i) acc += static_cast<double>(wo[i]) * static_cast<double>(xt[i]);
      y[t * out + o] = store(static_cast<float>(acc), store_out);
    }
  }
}

void swiglu_mlp(const float* x, const float* gate_w, const float* up_w, const float* down_w, float* y, int64_t T, int H,
                int I, Store act, Store store_out) {
  if (T <= 0 || H <= 0 || I <= 0) {
    throw std::invalid_argument(fmt::format("swiglu_mlp: T ({}), H ({}) and I ({}) must be > 0", T, H, I));
  }
  if (!x || !gate_w || !up_w || !down_w || !y) {
    throw std::invalid_argument("swiglu_mlp: null pointer argument");
  }
  std::vector<float> g(static_cast<size_t>(T) * I);  // [T, I]
  std::vector<float> u(static_cast<size_t>(T) * I);  // [T, I]
  linear(x, gate_w, g.data(), T, H, I, act);
  linear(x, up_w, u.data(), T, H, I, act);
  for (size_t i = 0; i < g.size(); ++i) {
    const float a = store(g[i] / (1.0f + std::exp(-g[i])), act);
    g[i] = store(a * u[i], act);  // g now holds h = silu(gate) * up
  }
  linear(g.data(), down_w, y, T, I, H, store_out);
}

void embedding(const float* table, const int64_t* ids, float* y, int64_t T, int64_t V, int H) {
  if (T <= 0 || V <= 0 || H <= 0) {
    throw std::invalid_argument(fmt::format("embedding: T ({}), V ({}) and H ({}) must be > 0", T, V, H));
  }
  if (!table || !ids || !y) throw std::invalid_argument("embedding: null pointer argument");
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = ids[t];
    if (id < 0 || id >= V) {
      throw std::invalid_argument(
          fmt::format("embedding: token {} has id {} outside the vocabulary [0, {})", t, id, V));
    }
    std::copy(table + id * H, table + (id + 1) * H, y + t * H);
  }
}

int64_t argmax(const float* x, int64_t n) {
  if (n <= 0) throw std::invalid_argument(fmt::format("argmax: n ({}) must be > 0", n));
  if (!x) throw std::invalid_argument("argmax: null pointer argument");
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return i;  // torch: NaN is the maximum; the first one wins
    if (x[i] > x[best]) best = i;    // strict: a tie keeps the earlier index
  }
  return best;
}

void argmax_rows(const float* x, int64_t* idx, int64_t T, int64_t n) {
  if (T <= 0) throw std::invalid_argument(fmt::format("argmax_rows: T ({}) must be > 0", T));
  if (!idx) throw std::invalid_argument("argmax_rows: null pointer argument");
  for (int64_t t = 0; t < T; ++t) idx[t] = argmax(x + t * n, n);
}

}  // namespace sg::ref
