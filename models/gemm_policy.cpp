// gemm_policy.cpp: the GEMM, SwiGLU, gated-norm and mix-round settings' names and rules (step_settings.h;
// pure, in the host library so that the CPU tests cover it).
#include <fmt/format.h>

#include "engine/error.h"
#include "engine/text.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm_shapes.h"
#include "models/step_settings.h"

namespace sg {

const char* gemm_name(GemmKind g) {
  switch (g) {
    case GemmKind::automatic: return "auto";
    case GemmKind::cublas: return "cublas";
    case GemmKind::skinny: return "skinny";
    case GemmKind::mixed: return "mixed";
    case GemmKind::lt: return "lt";
    case GemmKind::lt_all: return "lt-all";
    case GemmKind::wgmma: return "wgmma";
    case GemmKind::wgmma_large: return "wgmma-large";
  }
  return "?";
}

GemmKind parse_gemm(const std::string& name) {
  if (name == "auto") return GemmKind::automatic;
  if (name == "cublas") return GemmKind::cublas;
  if (name == "skinny") return GemmKind::skinny;
  if (name == "mixed") return GemmKind::mixed;
  if (name == "lt") return GemmKind::lt;
  if (name == "lt-all") return GemmKind::lt_all;
  if (name == "wgmma") return GemmKind::wgmma;
  if (name == "wgmma-large") return GemmKind::wgmma_large;
  throw Error(fmt::format("unknown gemm '{}' (valid: auto, cublas, skinny, mixed, lt, lt-all, wgmma, wgmma-large)",
                          printable(name)));
}

bool gemm_uses_lt(GemmKind g, int64_t rows) {
  return g == GemmKind::lt_all ||
         ((g == GemmKind::lt || g == GemmKind::mixed || g == GemmKind::wgmma || g == GemmKind::wgmma_large) &&
          rows <= kGemmLtMaxRows);
}

bool gemm_uses_wgmma(GemmKind g, int64_t rows) {
  return (g == GemmKind::wgmma && rows > kGemmLtMaxRows) ||
         (g == GemmKind::wgmma_large && rows >= kGemmWgmmaLargeMinRows);
}

bool gemm_fuses_swiglu(int64_t rows, int64_t n, int64_t k) {
  return rows > kGemmSwigluSmallRows || n * k <= kGemmSwigluSmallMaxWeights;
}

bool gemm_fuses_swiglu(SwigluMode mode, int64_t rows, int64_t n, int64_t k) {
  if (mode == SwigluMode::kernel) return false;
  return mode == SwigluMode::gemm || gemm_fuses_swiglu(rows, n, k);
}

const char* swiglu_name(SwigluMode m) {
  switch (m) {
    case SwigluMode::automatic: return "auto";
    case SwigluMode::gemm: return "gemm";
    case SwigluMode::kernel: return "kernel";
  }
  return "?";
}

SwigluMode parse_swiglu(const std::string& name) {
  if (name == "auto") return SwigluMode::automatic;
  if (name == "gemm") return SwigluMode::gemm;
  if (name == "kernel") return SwigluMode::kernel;
  throw Error(fmt::format("unknown swiglu '{}' (valid: auto, gemm, kernel)", printable(name)));
}

const char* gated_norm_name(GatedNormMode m) {
  switch (m) {
    case GatedNormMode::automatic: return "auto";
    case GatedNormMode::delta: return "delta";
    case GatedNormMode::kernel: return "kernel";
  }
  return "?";
}

GatedNormMode parse_gated_norm(const std::string& name) {
  if (name == "auto") return GatedNormMode::automatic;
  if (name == "delta") return GatedNormMode::delta;
  if (name == "kernel") return GatedNormMode::kernel;
  throw Error(fmt::format("unknown gated-norm '{}' (valid: auto, delta, kernel)", printable(name)));
}

const char* mix_round_name(MixRound m) {
  switch (m) {
    case MixRound::automatic: return "auto";
    case MixRound::gemm: return "gemm";
    case MixRound::norm: return "norm";
    case MixRound::partials: return "partials";
    case MixRound::residual: return "residual";
  }
  return "?";
}

MixRound parse_mix_round(const std::string& name) {
  if (name == "auto") return MixRound::automatic;
  if (name == "gemm") return MixRound::gemm;
  if (name == "norm") return MixRound::norm;
  if (name == "partials") return MixRound::partials;
  if (name == "residual") return MixRound::residual;
  throw Error(fmt::format("unknown mix-round '{}' (valid: auto, gemm, norm, partials, residual)", printable(name)));
}

bool mix_rounds_in_norm(MixRound m, int64_t rows) { return m == MixRound::norm && rows <= kGemmLtMaxRows; }

bool mix_partials_shape(MixRound m, int64_t n, DType act) {
  return (m == MixRound::partials || m == MixRound::residual) && act == DType::bf16 && rmsnorm_sums_planes(n);
}

bool mix_adds_in_gemm(MixRound m) { return m == MixRound::residual; }

const char* ssm_state_name(DType d) { return d == DType::bf16 ? "bf16" : d == DType::f32 ? "f32" : "?"; }

DType parse_ssm_state(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  throw Error(fmt::format("unknown ssm-state '{}' (valid: f32, bf16)", printable(name)));
}

bool delta_fuses_gated_norm(GatedNormMode mode, int64_t rows, int64_t head_values) {
  if (mode != GatedNormMode::automatic) return mode == GatedNormMode::delta;
  return rows <= kGatedNormFusedMaxRows && head_values <= kGatedNormFusedMaxValues;
}

bool prefill_fuses_gated_norm(GatedNormMode mode) { return mode == GatedNormMode::delta; }

bool gemm_uses_skinny(GemmKind g, int64_t rows, int64_t n, int64_t k, int block_rows, bool sums_partials) {
  const bool wide_ok =
      rows <= kGemmMixedWideBlockRows &&
      (block_rows == kSkinnyGemmOneWaveRows || (block_rows > kSkinnyGemmNarrowRows && k <= kGemmMixedWideBlockMaxK));
  const bool partials_ok = sums_partials && rows <= kGemmLtMaxRows;
  const bool like_mixed = g == GemmKind::mixed || g == GemmKind::wgmma || g == GemmKind::wgmma_large;
  return g == GemmKind::skinny ||
         (like_mixed && (rows <= kGemmMixedSkinnyRows || n >= kGemmMixedWideN || wide_ok || partials_ok));
}

}  // namespace sg
