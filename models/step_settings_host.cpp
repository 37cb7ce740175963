// step_settings_host.cpp: the settings' names, parsers and the resolutions that need only host
// facts (step_settings.h); the delta rule's resolution, which asks its kernels' sizes, and the
// device query are in step_settings.cpp.
#include <fmt/format.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/attention_shapes.h"
#include "models/step_settings.h"

namespace sg {

const char* delta_prefill_name(DeltaPrefill d) {
  return d == DeltaPrefill::chunked   ? "chunked"
         : d == DeltaPrefill::mma     ? "mma"
         : d == DeltaPrefill::wgmma   ? "wgmma"
         : d == DeltaPrefill::wgmma_t ? "wgmma-t"
         : d == DeltaPrefill::scan    ? "scan"
                                      : "auto";
}

DeltaPrefill parse_delta_prefill(const std::string& name) {
  if (name == "auto") return DeltaPrefill::automatic;
  if (name == "scan") return DeltaPrefill::scan;
  if (name == "chunked") return DeltaPrefill::chunked;
  if (name == "mma") return DeltaPrefill::mma;
  if (name == "wgmma") return DeltaPrefill::wgmma;
  if (name == "wgmma-t") return DeltaPrefill::wgmma_t;
  throw Error(fmt::format("unknown delta-rule prefill '{}' (valid: auto, scan, chunked, mma, wgmma, wgmma-t)", name));
}

bool chunked_delta_prefill(const std::string& name) {
  return name == "chunked" || name == "mma" || name == "wgmma" || name == "wgmma-t";
}

const char* attn_prefill_name(AttnPrefill a) {
  switch (a) {
    case AttnPrefill::simt: return "simt";
    case AttnPrefill::mma: return "mma";
    case AttnPrefill::wgmma: return "wgmma";
    case AttnPrefill::automatic: break;
  }
  return "auto";
}

AttnPrefill parse_attn_prefill(const std::string& name) {
  if (name == "auto") return AttnPrefill::automatic;
  if (name == "simt") return AttnPrefill::simt;
  if (name == "mma") return AttnPrefill::mma;
  if (name == "wgmma") return AttnPrefill::wgmma;
  throw Error(fmt::format("unknown attention prefill '{}' (valid: auto, simt, mma, wgmma)", name));
}

AttnPrefill resolve_attn_prefill(AttnPrefill want, int D, DType act, DType cache, bool prefill, const DeviceLimits& d) {
  if (want == AttnPrefill::simt || (want != AttnPrefill::automatic && !prefill)) return want;
  const int optin = d.smem_optin, major = d.cc_major;
  const bool wgmma_built =
      attention_prefill_wgmma_supports(D, act, cache) && attention_prefill_wgmma_device(major, d.cc_minor);
  const bool wgmma_fits = attention_prefill_wgmma_smem(D) <= static_cast<size_t>(optin);
  if (want == AttnPrefill::wgmma) {
    // The hint names what runs instead: mma where it takes the shape and dtypes, else simt.
    const char* instead = attention_prefill_mma_supports(D, act, cache) ? "mma" : "simt";
    require(wgmma_built,
            "the wgmma attention prefill does not support D={} with {} activations and a {} KV cache on "
            "compute capability {}.{} (built for D 64, 128, 256, bf16, compute capability 9.0 only; use "
            "--attn-prefill {})",
            D, dtype_name(act), dtype_name(cache), major, d.cc_minor, instead);
    require(wgmma_fits,
            "the wgmma attention prefill needs {} bytes of shared memory per block for D={}; this device "
            "allows {} (use --attn-prefill mma)",
            attention_prefill_wgmma_smem(D), D, optin);
    return want;
  }
  const bool built = attention_prefill_mma_supports(D, act, cache) && major >= 8;    // mma.sync bf16: sm_80+
  const bool fits = attention_prefill_mma_smem(D, 1) <= static_cast<size_t>(optin);  // one K/V buffer at least
  if (want == AttnPrefill::automatic) {
    if (prefill && wgmma_built && wgmma_fits) return AttnPrefill::wgmma;
    return built && fits ? AttnPrefill::mma : AttnPrefill::simt;
  }
  require(built,
          "the tensor-core attention prefill does not support D={} with {} activations and a {} KV cache on "
          "compute capability {}.x (built for D 32, 64, 128, 256, bf16, sm_80+; use --attn-prefill simt)",
          D, dtype_name(act), dtype_name(cache), major);
  require(fits,
          "the tensor-core attention prefill needs {} bytes of shared memory per block for D={}; this device "
          "allows {} (use --attn-prefill simt)",
          attention_prefill_mma_smem(D, 1), D, optin);
  return want;
}

const char* attn_decode_name(AttnDecode a) {
  return a == AttnDecode::mma ? "mma" : a == AttnDecode::simt ? "simt" : "auto";
}

AttnDecode parse_attn_decode(const std::string& name) {
  if (name == "auto") return AttnDecode::automatic;
  if (name == "simt") return AttnDecode::simt;
  if (name == "mma") return AttnDecode::mma;
  throw Error(fmt::format("unknown attention decode '{}' (valid: auto, simt, mma)", name));
}

AttnDecode resolve_attn_decode(AttnDecode want, int Hq, int Hkv, int D, DType act, DType cache, const DeviceLimits& d) {
  if (want == AttnDecode::simt) return want;
  const int optin = d.smem_optin, major = d.cc_major;
  const bool built = attention_decode_mma_supports(Hq, Hkv, D, act, cache) && major >= 8;  // mma.sync bf16: sm_80+
  const bool fits = attention_decode_mma_smem(D) <= static_cast<size_t>(optin);
  if (want == AttnDecode::automatic) return built && fits ? AttnDecode::mma : AttnDecode::simt;
  require(built,
          "the tensor-core attention decode does not support Hq={} Hkv={} D={} with {} activations and a {} KV "
          "cache on compute capability {}.x (built for D 64, 128, 256, at most 8 query heads per kv head, bf16, "
          "sm_80+; use --attn-decode simt)",
          Hq, Hkv, D, dtype_name(act), dtype_name(cache), major);
  require(fits,
          "the tensor-core attention decode needs {} bytes of shared memory per block for D={}; this device "
          "allows {} (use --attn-decode simt)",
          attention_decode_mma_smem(D), D, optin);
  return want;
}

GemmKind resolve_gemm(GemmKind want, DType act, const DeviceLimits& d) {
  const bool built = act == DType::bf16 && d.cc_major >= 9;
  const bool wgmma_built = act == DType::bf16 && sm90a_device(d.cc_major, d.cc_minor);
  if (want == GemmKind::automatic) return built ? GemmKind::mixed : GemmKind::cublas;
  if (want == GemmKind::cublas || want == GemmKind::lt || want == GemmKind::lt_all) return want;
  if (want == GemmKind::wgmma || want == GemmKind::wgmma_large) {
    require(wgmma_built,
            "the wgmma GEMM takes bf16 activations on compute capability 9.0 (this step: {} on {}.{}; use "
            "--gemm mixed or cublas)",
            dtype_name(act), d.cc_major, d.cc_minor);
    return want;
  }
  require(built,
          "the skinny GEMM takes bf16 activations on sm_90+ (this step: {} on compute capability {}.x; use "
          "--gemm cublas)",
          dtype_name(act), d.cc_major);
  return want;
}

const char* pdl_name(PdlMode m) {
  switch (m) {
    case PdlMode::automatic: return "auto";
    case PdlMode::off: return "off";
    case PdlMode::on: return "on";
  }
  return "?";
}

PdlMode parse_pdl(const std::string& name) {
  if (name == "auto") return PdlMode::automatic;
  if (name == "off") return PdlMode::off;
  if (name == "on") return PdlMode::on;
  throw Error(fmt::format("unknown pdl '{}' (valid: auto, off, on)", name));
}

PdlMode resolve_pdl(PdlMode want, const DeviceLimits& d) {
  if (want == PdlMode::automatic) return d.cc_major >= 9 ? PdlMode::on : PdlMode::off;
  require(want == PdlMode::off || d.cc_major >= 9,
          "programmatic dependent launch needs sm_90+ (this device: compute capability {}.x; use --pdl off)",
          d.cc_major);
  return want;
}

}  // namespace sg
