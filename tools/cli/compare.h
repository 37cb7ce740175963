// compare.h: how two results of one shape are compared, for the tests, the probes of tools/probes/
// and `stepgraph kernels` alike (the sources may not include tests/; tests/support/tolerance.h
// brings the metrics into the tests' namespace).
//
// The two normalised error metrics, named apart (they bound different things, so a tolerance
// written for one does not hold for the other):
//   max_normalised_error  max |a - b| / max |b|: a worst element against the largest reference
//                         value (logits of the model step against the CPU reference or HF);
//   l2_normalised_error   ||a - b||_2 / ||b||_2: an average over the whole tensor (the delta rule's
//                         chunked forms against the recurrence, as bounded in delta_rule_ref.h).
// Both return the unscaled error when b is all zero, and infinity when any difference is not
// finite, so a NaN or Inf in a result always fails a comparison (it never hides in a max or sum).
//
// Where two arrays differ, for a failing comparison's report: a kernel whose fragment layout, tile
// offset or chunk hand-over is wrong leaves a pattern (every chunk but the first, the second
// warpgroup's value columns, one row in eight of a tile), and the pattern names the product at
// fault; one failing run on a GPU should show it. The caller names views of the flat index
// (coordinate = (index / stride) % size, so a token axis and the row within a 64-token chunk are
// both views of one dimension), and error_map prints, per view, the largest difference in each bin
// of `bin` coordinates, over the largest |want| (the metric of max_normalised_error). There a
// difference that is not finite (got NaN where want is finite, or the reverse) counts as infinite
// and both NaN count as equal (max_normalised_difference likewise: two forms that are NaN at the
// same places agree). Header-only, host-only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace sg::diag {

inline double max_normalised_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    num = std::max(num, d);
    den = std::max(den, std::fabs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

// Over the common length of a and b.
inline double max_normalised_error(const std::vector<float>& a, const std::vector<float>& b) {
  return max_normalised_error(a.data(), b.data(), std::min(a.size(), b.size()));
}

inline double l2_normalised_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (!std::isfinite(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct ErrorView {
  std::string name;
  int64_t stride = 1;  // elements between neighbouring coordinates of this view
  int64_t size = 1;    // coordinates: (index / stride) % size
  int64_t bin = 1;     // coordinates a printed bin holds
};

// |got - want| as error_map counts it: infinite where exactly one is NaN or either is infinite and
// they differ.
inline double element_difference(float got, float want) {
  if (std::isnan(got) && std::isnan(want)) return 0;
  if (got == want) return 0;
  const double d = std::fabs(double(got) - double(want));
  return std::isfinite(d) ? d : std::numeric_limits<double>::infinity();
}

// The largest element_difference over the largest finite |want| (the unscaled difference when want
// is all zero): two results that are NaN at the same places and close elsewhere agree.
inline double max_normalised_difference(const float* got, const float* want, size_t n) {
  double d = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, element_difference(got[i], want[i]));
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(double(want[i])));
  }
  return scale > 0 ? d / scale : d;
}

// The per-bin maxima of one view: bins[b] = the largest difference at a coordinate in
// [b bin, (b + 1) bin), over `scale`.
inline std::vector<double> error_bins(const float* got, const float* want, size_t n, const ErrorView& v, double scale) {
  const int64_t size = std::max<int64_t>(v.size, 1), bin = std::max<int64_t>(v.bin, 1),
                stride = std::max<int64_t>(v.stride, 1);
  std::vector<double> bins(static_cast<size_t>((size + bin - 1) / bin), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double d = element_difference(got[i], want[i]);
    if (d == 0) continue;
    const int64_t c = (static_cast<int64_t>(i) / stride) % size;
    double& b = bins[static_cast<size_t>(c / bin)];
    b = std::max(b, scale > 0 ? d / scale : d);
  }
  return bins;
}

// A report of the differences of got against want (n elements each): how many elements differ by
// more than `tol` (over the largest |want|), the first such element with its coordinates in every
// view, then one line per view with each bin's largest normalised difference (at most `max_bins`
// bins a line; "-" where the bin is exact). Empty views give the count and the first element only.
inline std::string error_map(const float* got, const float* want, size_t n, const std::vector<ErrorView>& views,
                             double tol, size_t max_bins = 32) {
  double scale = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(double(want[i])));
  size_t over = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    const double d = element_difference(got[i], want[i]);
    if (!((scale > 0 ? d / scale : d) <= tol)) {
      ++over;
      if (first == n) first = i;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu of %zu elements differ by more than %.3g of the largest |want| (%.6g)", over, n,
                tol, scale);
  std::string s = buf;
  if (first < n) {
    s += "; first at [";
    for (size_t k = 0; k < views.size(); ++k) {
      const ErrorView& v = views[k];
      const int64_t c = (static_cast<int64_t>(first) / std::max<int64_t>(v.stride, 1)) % std::max<int64_t>(v.size, 1);
      s += (k ? ", " : "") + v.name + " " + std::to_string(c);
    }
    std::snprintf(buf, sizeof buf, "]: got %.9g, want %.9g", double(got[first]), double(want[first]));
    s += buf;
  }
  for (const ErrorView& v : views) {
    const std::vector<double> bins = error_bins(got, want, n, v, scale);
    s += "\n  " + v.name;
    if (v.bin > 1) s += " (bins of " + std::to_string(v.bin) + ")";
    s += ":";
    for (size_t b = 0; b < bins.size() && b < max_bins; ++b) {
      if (bins[b] == 0)
        s += " -";
      else {
        std::snprintf(buf, sizeof buf, " %.2g", bins[b]);
        s += buf;
      }
    }
    if (bins.size() > max_bins) s += " ... (" + std::to_string(bins.size() - max_bins) + " more)";
  }
  return s;
}

// The views of a delta-rule prefill's outputs of one sequence, [tokens, Hv, Dv] row-major: chunk
// (64 tokens), row within the chunk (bins of 8), v-head, value column (bins of 8).
inline std::vector<ErrorView> delta_out_views(int64_t tokens, int64_t Hv, int64_t Dv) {
  const int64_t row = Hv * Dv;
  return {{"chunk", 64 * row, (tokens + 63) / 64, 1},
          {"row in chunk", row, 64, 8},
          {"v-head", Dv, Hv, 1},
          {"value column", 1, Dv, 8}};
}

// The views of one slot's delta-rule state, [Hv, Dk, Dv] row-major: v-head, key row (bins of 8),
// value column (bins of 8).
inline std::vector<ErrorView> delta_state_views(int64_t Hv, int64_t Dk, int64_t Dv) {
  return {{"v-head", Dk * Dv, Hv, 1}, {"key row", Dv, Dk, 8}, {"value column", 1, Dv, 8}};
}

}  // namespace sg::diag
