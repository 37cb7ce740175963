// step_settings_host.cpp: the settings' names, parsers and resolutions (step_settings.h), from
// host facts and the kernels' CUDA-free shape headers; the device query is in step_settings.cpp.
#include <fmt/format.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/attention_shapes.h"
#include "kernels/delta_rule_prefill_shapes.h"
#include "models/step_settings.h"

namespace sg {
namespace {

// A setting asked for where it cannot run: the user's error, so a plain sentence that names the way
// out, without the source location require() adds to a broken precondition.
template <typename... Args>
void refuse_unless(bool ok, fmt::format_string<Args...> f, Args&&... args) {
  if (!ok) throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace

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
    refuse_unless(wgmma_built,
                  "the wgmma attention prefill does not support D={} with {} activations and a {} KV cache on "
                  "compute capability {}.{} (built for D 64, 128, 256, bf16, compute capability 9.0 only; use "
                  "--attn-prefill {})",
                  D, dtype_name(act), dtype_name(cache), major, d.cc_minor, instead);
    refuse_unless(wgmma_fits,
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
  refuse_unless(built,
                "the tensor-core attention prefill does not support D={} with {} activations and a {} KV cache on "
                "compute capability {}.x (built for D 32, 64, 128, 256, bf16, sm_80+; use --attn-prefill simt)",
                D, dtype_name(act), dtype_name(cache), major);
  refuse_unless(fits,
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
  refuse_unless(built,
                "the tensor-core attention decode does not support Hq={} Hkv={} D={} with {} activations and a {} KV "
                "cache on compute capability {}.x (built for D 64, 128, 256, at most 8 query heads per kv head, bf16, "
                "sm_80+; use --attn-decode simt)",
                Hq, Hkv, D, dtype_name(act), dtype_name(cache), major);
  refuse_unless(fits,
                "the tensor-core attention decode needs {} bytes of shared memory per block for D={}; this device "
                "allows {} (use --attn-decode simt)",
                attention_decode_mma_smem(D), D, optin);
  return want;
}

GemmKind resolve_gemm(GemmKind want, DType act, const DeviceLimits& d) {
  const bool built = act == DType::bf16 && d.cc_major >= 9;
  const bool wgmma_built = act == DType::bf16 && sm90a_device(d.cc_major, d.cc_minor);
  if (want == GemmKind::automatic)
    return wgmma_built ? GemmKind::wgmma_large : built ? GemmKind::mixed : GemmKind::cublas;
  if (want == GemmKind::cublas || want == GemmKind::lt || want == GemmKind::lt_all) return want;
  if (want == GemmKind::wgmma || want == GemmKind::wgmma_large) {
    refuse_unless(wgmma_built,
                  "the wgmma GEMM takes bf16 activations on compute capability 9.0 (this step: {} on {}.{}; use "
                  "--gemm mixed or cublas)",
                  dtype_name(act), d.cc_major, d.cc_minor);
    return want;
  }
  refuse_unless(built,
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
  refuse_unless(want == PdlMode::off || d.cc_major >= 9,
                "programmatic dependent launch needs sm_90+ (this device: compute capability {}.x; use --pdl off)",
                d.cc_major);
  return want;
}

DeltaPrefill resolve_delta_prefill(DeltaPrefill want, const GdnDims& g, bool prefill, DType act, const DeviceLimits& d,
                                   bool fused_norm) {
  if (want == DeltaPrefill::scan || (want != DeltaPrefill::automatic && !prefill)) return want;
  const int optin = d.smem_optin;
  const bool wgmma_built = delta_rule_prefill_wgmma_supports(g.Dk, g.Dv, act);
  const bool wgmma_device = delta_rule_prefill_wgmma_device(d.cc_major, d.cc_minor);
  const bool wgmma_fits = delta_rule_prefill_wgmma_smem() <= static_cast<size_t>(optin);
  const bool wgmma_t_fits = delta_rule_prefill_wgmma_t_smem() <= static_cast<size_t>(optin);
  // bf16 steps on an H100 / H200: the two-kernel warpgroup form (measured 19% faster than the
  // one-kernel form a layer, which was faster than mma, in the 4B's prefill; the same bytes), else
  // the one-kernel form where only its shared memory fits.
  if (want == DeltaPrefill::automatic && act == DType::bf16 && !fused_norm && wgmma_built && wgmma_device &&
      (wgmma_t_fits || wgmma_fits)) {
    return wgmma_t_fits ? DeltaPrefill::wgmma_t : DeltaPrefill::wgmma;
  }
  if (want == DeltaPrefill::wgmma || want == DeltaPrefill::wgmma_t) {
    const char* form = want == DeltaPrefill::wgmma ? "the warpgroup delta-rule prefill"
                                                   : "the two-kernel warpgroup delta-rule prefill (wgmma-t)";
    refuse_unless(
        wgmma_built,
        "{} is built for bf16 activations with Dk = Dv = 128, not {} with Dk={} Dv={} (use --delta-prefill mma "
        "or chunked)",
        form, dtype_name(act), g.Dk, g.Dv);
    refuse_unless(wgmma_device, "{} needs compute capability 9.0 (sm_90a), not {}.{} (use --delta-prefill mma)", form,
                  d.cc_major, d.cc_minor);
    const size_t smem =
        want == DeltaPrefill::wgmma ? delta_rule_prefill_wgmma_smem() : delta_rule_prefill_wgmma_t_smem();
    refuse_unless(smem <= static_cast<size_t>(optin),
                  "{} needs {} bytes of shared memory per block; this device allows {} (use --delta-prefill mma)", form,
                  smem, optin);
    return want;
  }
  const bool mma_built = delta_rule_prefill_mma_supports(g.Dk, g.Dv) && d.cc_major >= 8;  // mma.sync bf16: sm_80+
  const bool mma_fits = mma_built && delta_rule_prefill_mma_smem(g.Dk, delta_rule_prefill_mma_tile(g.Dv), act) <=
                                         static_cast<size_t>(optin);
  // bf16 steps: the tensor-core form (its 1e-4 tolerance is far below bf16 rounding); f32 steps
  // keep the chunked kernel's 1e-5 (parity runs).
  if (want == DeltaPrefill::automatic && act == DType::bf16 && mma_fits) return DeltaPrefill::mma;
  if (want == DeltaPrefill::mma) {
    refuse_unless(mma_built,
                  "the tensor-core delta-rule prefill does not support Dk={} Dv={} on compute capability {}.x (built "
                  "for Dk 32, 64, 128 on sm_80+; use --delta-prefill chunked or scan)",
                  g.Dk, g.Dv, d.cc_major);
    const size_t mma_smem = delta_rule_prefill_mma_smem(g.Dk, delta_rule_prefill_mma_tile(g.Dv), act);
    refuse_unless(mma_smem <= static_cast<size_t>(optin),
                  "the tensor-core delta-rule prefill needs {} bytes of shared memory per block for Dk={} Dv={}; this "
                  "device allows {} (use --delta-prefill scan)",
                  mma_smem, g.Dk, g.Dv, optin);
    return want;
  }
  const bool built = delta_rule_prefill_chunked_supports(g.Dk, g.Dv);
  const size_t smem = built ? delta_rule_prefill_chunked_smem(g.Dk, delta_rule_prefill_chunked_tile(g.Dv)) : 0;
  const bool fits = smem <= static_cast<size_t>(optin);
  if (want == DeltaPrefill::automatic) return built && fits ? DeltaPrefill::chunked : DeltaPrefill::scan;
  refuse_unless(built, "the chunked delta-rule prefill does not support Dk={} Dv={} (built for Dk 32, 64, 128)", g.Dk,
                g.Dv);
  refuse_unless(fits,
                "the chunked delta-rule prefill needs {} bytes of shared memory per block for Dk={} Dv={}; this "
                "device allows {} (use --delta-prefill scan)",
                smem, g.Dk, g.Dv, optin);
  return want;
}

}  // namespace sg
