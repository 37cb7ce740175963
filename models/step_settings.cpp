// step_settings.cpp: the device query and the delta rule's resolution (step_settings.h), which
// asks the delta-rule kernels for their shapes and shared memory; the rest is in
// step_settings_host.cpp.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "models/step_settings.h"

namespace sg {

DeviceLimits DeviceLimits::current() {
  DeviceLimits d;
  int dev = 0;
  check(cudaGetDevice(&dev));
  check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
  check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  check(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  check(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  return d;
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
    require(wgmma_built,
            "{} is built for bf16 activations with Dk = Dv = 128, not {} with Dk={} Dv={} (use --delta-prefill mma "
            "or chunked)",
            form, dtype_name(act), g.Dk, g.Dv);
    require(wgmma_device, "{} needs compute capability 9.0 (sm_90a), not {}.{} (use --delta-prefill mma)", form,
            d.cc_major, d.cc_minor);
    const size_t smem =
        want == DeltaPrefill::wgmma ? delta_rule_prefill_wgmma_smem() : delta_rule_prefill_wgmma_t_smem();
    require(smem <= static_cast<size_t>(optin),
            "{} needs {} bytes of shared memory per block; this device allows {} (use --delta-prefill mma)", form, smem,
            optin);
    return want;
  }
  const bool mma_built = delta_rule_prefill_mma_supports(g.Dk, g.Dv) && d.cc_major >= 8;  // mma.sync bf16: sm_80+
  const bool mma_fits = mma_built && delta_rule_prefill_mma_smem(g.Dk, delta_rule_prefill_mma_tile(g.Dv), act) <=
                                         static_cast<size_t>(optin);
  // bf16 steps: the tensor-core form (its 1e-4 tolerance is far below bf16 rounding); f32 steps
  // keep the chunked kernel's 1e-5 (parity runs).
  if (want == DeltaPrefill::automatic && act == DType::bf16 && mma_fits) return DeltaPrefill::mma;
  if (want == DeltaPrefill::mma) {
    require(mma_built,
            "the tensor-core delta-rule prefill does not support Dk={} Dv={} on compute capability {}.x (built "
            "for Dk 32, 64, 128 on sm_80+; use --delta-prefill chunked or scan)",
            g.Dk, g.Dv, d.cc_major);
    const size_t mma_smem = delta_rule_prefill_mma_smem(g.Dk, delta_rule_prefill_mma_tile(g.Dv), act);
    require(mma_smem <= static_cast<size_t>(optin),
            "the tensor-core delta-rule prefill needs {} bytes of shared memory per block for Dk={} Dv={}; this "
            "device allows {} (use --delta-prefill scan)",
            mma_smem, g.Dk, g.Dv, optin);
    return want;
  }
  const bool built = delta_rule_prefill_chunked_supports(g.Dk, g.Dv);
  const size_t smem = built ? delta_rule_prefill_chunked_smem(g.Dk, delta_rule_prefill_chunked_tile(g.Dv)) : 0;
  const bool fits = smem <= static_cast<size_t>(optin);
  if (want == DeltaPrefill::automatic) return built && fits ? DeltaPrefill::chunked : DeltaPrefill::scan;
  require(built, "the chunked delta-rule prefill does not support Dk={} Dv={} (built for Dk 32, 64, 128)", g.Dk, g.Dv);
  require(fits,
          "the chunked delta-rule prefill needs {} bytes of shared memory per block for Dk={} Dv={}; this "
          "device allows {} (use --delta-prefill scan)",
          smem, g.Dk, g.Dv, optin);
  return want;
}

}  // namespace sg
