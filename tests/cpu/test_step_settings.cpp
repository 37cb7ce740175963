// The settings whose resolution needs only host facts (models/step_settings.h): names, parsers and
// the choice of `auto` against explicit device limits (the H200's and others), with the errors an
// explicit choice that cannot run gives; the delta rule's from its kernels' CUDA-free shapes
// (kernels/delta_rule_prefill_shapes.h).
#include <algorithm>
#include <string>

#include "engine/error.h"
#include "kernels/delta_rule_prefill_shapes.h"
#include "models/step_settings.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

// The message of the sg::Error that `resolve` throws, "(no error)" when it throws none.
template <class F>
std::string message(F&& resolve) {
  try {
    resolve();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("pdl setting: parses, names and resolves by compute capability", "[pdl][settings]") {
  for (const char* name : {"auto", "off", "on"}) CHECK(std::string(pdl_name(parse_pdl(name))) == name);
  CHECK_THROWS_AS(parse_pdl("yes"), Error);
  CHECK_THROWS_AS(parse_pdl(""), Error);
  DeviceLimits hopper, ampere;
  hopper.cc_major = 9;
  ampere.cc_major = 8;
  CHECK(resolve_pdl(PdlMode::automatic, hopper) == PdlMode::on);
  CHECK(resolve_pdl(PdlMode::automatic, ampere) == PdlMode::off);
  CHECK(resolve_pdl(PdlMode::off, hopper) == PdlMode::off);
  CHECK(resolve_pdl(PdlMode::on, hopper) == PdlMode::on);
  CHECK(resolve_pdl(PdlMode::off, ampere) == PdlMode::off);
  std::string message;
  try {
    resolve_pdl(PdlMode::on, ampere);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("needs sm_90+") != std::string::npos);
  CHECK(message.find("--pdl off") != std::string::npos);
}

TEST_CASE("attn_prefill wgmma: auto and asked for, resolved only for bf16 D 64/128/256 on compute capability 9.0",
          "[attention][wgmma][settings]") {
  DeviceLimits h200, ampere, blackwell;
  h200.cc_major = 9, h200.cc_minor = 0, h200.smem_optin = 232448;
  ampere = h200, ampere.cc_major = 8;
  blackwell = h200, blackwell.cc_major = 10;
  for (int D : {64, 128, 256})
    CHECK(resolve_attn_prefill(AttnPrefill::wgmma, D, DType::bf16, DType::bf16, true, h200) == AttnPrefill::wgmma);
  // auto picks it where it runs and fits (the faster kernel on the H200, docs/BENCHMARKS.md), mma
  // elsewhere: D 32, f32, another device, shared memory for mma's block but not wgmma's; a
  // decode-only step resolves auto to mma and keeps an explicit choice without checking it.
  for (int D : {64, 128, 256})
    CHECK(resolve_attn_prefill(AttnPrefill::automatic, D, DType::bf16, DType::bf16, true, h200) == AttnPrefill::wgmma);
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 32, DType::bf16, DType::bf16, true, h200) == AttnPrefill::mma);
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::f32, DType::f32, true, h200) == AttnPrefill::simt);
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::bf16, DType::bf16, true, ampere) == AttnPrefill::mma);
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::bf16, DType::bf16, false, h200) == AttnPrefill::mma);
  DeviceLimits mid = h200;
  mid.smem_optin = 101376;  // mma's two-buffer block fits, wgmma's 197,632 bytes do not
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::bf16, DType::bf16, true, mid) == AttnPrefill::mma);
  CHECK(resolve_attn_prefill(AttnPrefill::wgmma, 32, DType::bf16, DType::bf16, false, ampere) == AttnPrefill::wgmma);
  for (const DeviceLimits& d : {ampere, blackwell}) {
    const std::string m =
        message([&] { resolve_attn_prefill(AttnPrefill::wgmma, 256, DType::bf16, DType::bf16, true, d); });
    INFO(m);
    CHECK(m.find("compute capability " + std::to_string(d.cc_major) + ".0") != std::string::npos);
    CHECK(m.find("use --attn-prefill mma") != std::string::npos);
  }
  const std::string d32 =
      message([&] { resolve_attn_prefill(AttnPrefill::wgmma, 32, DType::bf16, DType::bf16, true, h200); });
  CHECK(d32.find("D=32") != std::string::npos);
  CHECK(d32.find("use --attn-prefill mma") != std::string::npos);
  const std::string f32 =
      message([&] { resolve_attn_prefill(AttnPrefill::wgmma, 256, DType::f32, DType::f32, true, h200); });
  CHECK(f32.find("f32 activations") != std::string::npos);
  CHECK(f32.find("use --attn-prefill simt") != std::string::npos);
  DeviceLimits small = h200;
  small.smem_optin = 64 * 1024;
  const std::string smem =
      message([&] { resolve_attn_prefill(AttnPrefill::wgmma, 256, DType::bf16, DType::bf16, true, small); });
  CHECK(smem.find("197632 bytes of shared memory") != std::string::npos);
  // The mma kernel needs one K and one V buffer (68,096 bytes at D = 256) and takes two where they
  // fit: compute capability 8.9 (101,376 bytes a block) still gets it at D = 256.
  DeviceLimits ada = h200;
  ada.cc_major = 8, ada.cc_minor = 9, ada.smem_optin = 101376;
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::bf16, DType::bf16, true, ada) == AttnPrefill::mma);
  CHECK(resolve_attn_prefill(AttnPrefill::automatic, 256, DType::bf16, DType::bf16, true, small) == AttnPrefill::simt);
  const std::string mma_smem =
      message([&] { resolve_attn_prefill(AttnPrefill::mma, 256, DType::bf16, DType::bf16, true, small); });
  CHECK(mma_smem.find("needs 68096 bytes of shared memory") != std::string::npos);
}

TEST_CASE("delta_prefill setting: names, parses, tells the chunked forms", "[settings]") {
  for (const char* name : {"auto", "scan", "chunked", "mma", "wgmma", "wgmma-t"}) {
    CAPTURE(name);
    CHECK(std::string(delta_prefill_name(parse_delta_prefill(name))) == name);
    CHECK(chunked_delta_prefill(name) == (std::string(name) != "auto" && std::string(name) != "scan"));
  }
  CHECK(parse_delta_prefill("wgmma-t") == DeltaPrefill::wgmma_t);
  CHECK_FALSE(chunked_delta_prefill("wgmma_t"));
  std::string message;
  try {
    parse_delta_prefill("wgmma_t");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("valid: auto, scan, chunked, mma, wgmma, wgmma-t") != std::string::npos);
}

namespace {
// An H200's limits (the resolutions' device facts; the delta rule's cases below start from it).
DeviceLimits h200_limits() {
  DeviceLimits d;
  d.sms = 132;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.smem_optin = 227 * 1024;
  return d;
}
}  // namespace

TEST_CASE("delta-prefill mma: name, parse, resolve", "[delta_rule_mma][settings]") {
  CHECK(std::string(delta_prefill_name(DeltaPrefill::mma)) == "mma");
  CHECK(parse_delta_prefill("mma") == DeltaPrefill::mma);
  CHECK_THROWS_AS(parse_delta_prefill("MMA"), Error);
  const DeviceLimits d = h200_limits();
  // Supported shapes resolve to mma (prefill or not); automatic picks it for bf16 steps only (where
  // the warpgroup form does not run: another device, another shape, or the gated norm fused).
  CHECK(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, d) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 32, 32, 4}, true, DType::bf16, d) == DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 16, 32, 4}, false, DType::bf16, d) == DeltaPrefill::mma);
  DeviceLimits ampere = d;
  ampere.cc_major = 8;
  ampere.cc_minor = 0;
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, ampere) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, d) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, d, true) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 128, 128, 4}, true, DType::f32, d) ==
        DeltaPrefill::chunked);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 16, 32, 4}, true, DType::bf16, d) ==
        DeltaPrefill::scan);  // neither chunked kernel is built for Dk 16
  // Not built for Dk 16, an old device, or too little shared memory: a clear error.
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 16, 32, 4}, true, DType::bf16, d), Error);
  DeviceLimits old = d;
  old.cc_major = 7;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, old), Error);
  DeviceLimits small = d;
  small.smem_optin = 100 * 1024;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::mma, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, small),
                  Error);
  // Where mma does not fit, automatic falls back to chunked (which needs no more shared memory here).
  DeviceLimits pre_ampere = d;
  pre_ampere.cc_major = 7;
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 128, 128, 4}, true, DType::bf16, pre_ampere) ==
        DeltaPrefill::chunked);
}

TEST_CASE("delta-prefill wgmma: name, parse, resolve", "[delta_rule_wgmma][settings]") {
  CHECK(std::string(delta_prefill_name(DeltaPrefill::wgmma)) == "wgmma");
  CHECK(parse_delta_prefill("wgmma") == DeltaPrefill::wgmma);
  CHECK(chunked_delta_prefill("wgmma"));
  CHECK_THROWS_AS(parse_delta_prefill("WGMMA"), Error);
  const DeviceLimits h200 = h200_limits();
  const GdnDims g4b{16, 32, 128, 128, 4};
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma);
  // automatic picks the two-kernel form for bf16 steps where it runs (this one where only its shared
  // memory fits); mma where the gated norm is to be fused into the delta rule (built in the mma form
  // only), for other head dims and on other devices; f32 steps keep the chunked kernel.
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma_t);
  DeviceLimits between = h200;  // room for one of the two forms only
  between.smem_optin = static_cast<int>(std::min(delta_rule_prefill_wgmma_smem(), delta_rule_prefill_wgmma_t_smem()));
  const DeltaPrefill fitting = delta_rule_prefill_wgmma_smem() <= delta_rule_prefill_wgmma_t_smem()
                                   ? DeltaPrefill::wgmma
                                   : DeltaPrefill::wgmma_t;
  if (delta_rule_prefill_wgmma_smem() != delta_rule_prefill_wgmma_t_smem()) {
    CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, between) == fitting);
  }
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200, true) == DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, h200) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::f32, h200) == DeltaPrefill::chunked);
  DeviceLimits ampere = h200;
  ampere.cc_major = 8;
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, ampere) == DeltaPrefill::mma);
  // Not built for the shape or dtype, another device, too little shared memory: a clear error for
  // a prefill step, harmless without one.
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, h200), Error);
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::f32, h200), Error);
  DeviceLimits other = h200;
  other.cc_major = 10;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, other), Error);
  DeviceLimits small = h200;
  small.smem_optin = 100 * 1024;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, small), Error);
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma, GdnDims{2, 4, 64, 64, 4}, false, DType::bf16, h200) ==
        DeltaPrefill::wgmma);
}

TEST_CASE("delta-prefill wgmma-t: resolved where wgmma runs, auto's choice there", "[delta_rule_wgmma_t][settings]") {
  const DeviceLimits h200 = h200_limits();
  const GdnDims g4b{16, 32, 128, 128, 4};
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma_t, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma_t);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma_t);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200, true) == DeltaPrefill::mma);
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string dims = message([&] {
    resolve_delta_prefill(DeltaPrefill::wgmma_t, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, h200);
  });
  CHECK(dims.find("wgmma-t") != std::string::npos);
  CHECK(dims.find("Dk=64") != std::string::npos);
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma_t, g4b, true, DType::f32, h200), Error);
  DeviceLimits other = h200;
  other.cc_major = 10;
  CHECK(message([&] {
          resolve_delta_prefill(DeltaPrefill::wgmma_t, g4b, true, DType::bf16, other);
        }).find("compute capability 9.0") != std::string::npos);
  DeviceLimits small = h200;
  small.smem_optin = 100 * 1024;
  CHECK(message([&] {
          resolve_delta_prefill(DeltaPrefill::wgmma_t, g4b, true, DType::bf16, small);
        }).find(std::to_string(delta_rule_prefill_wgmma_t_smem()) + " bytes of shared memory") != std::string::npos);
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma_t, GdnDims{2, 4, 64, 64, 4}, false, DType::bf16, h200) ==
        DeltaPrefill::wgmma_t);
  // Where nothing fits, auto falls back to scan (the mma and wgmma cases above hold mma and chunked);
  // scan and a step without prefill keep theirs.
  DeviceLimits tiny_smem = h200;
  tiny_smem.smem_optin = 1024;
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, tiny_smem) == DeltaPrefill::scan);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::f32, tiny_smem) == DeltaPrefill::scan);
  CHECK(resolve_delta_prefill(DeltaPrefill::scan, g4b, true, DType::bf16, h200) == DeltaPrefill::scan);
  CHECK(resolve_delta_prefill(DeltaPrefill::mma, g4b, false, DType::bf16, tiny_smem) == DeltaPrefill::mma);
  CHECK(message([&] {
          resolve_delta_prefill(DeltaPrefill::mma, g4b, true, DType::bf16, tiny_smem);
        }).find("--delta-prefill scan") != std::string::npos);
  CHECK(message([&] {
          resolve_delta_prefill(DeltaPrefill::chunked, GdnDims{2, 4, 48, 64, 4}, true, DType::f32, h200);
        }).find("Dk=48") != std::string::npos);
}

TEST_CASE("attn_decode: names, the parser, and auto is mma where the tensor-core kernel runs and fits, else simt",
          "[attention][settings]") {
  for (const char* name : {"auto", "simt", "mma"})
    CHECK(std::string(attn_decode_name(parse_attn_decode(name))) == name);
  CHECK(message([] { parse_attn_decode("wgmma"); }) == "unknown attention decode 'wgmma' (valid: auto, simt, mma)");
  DeviceLimits h200, volta, small;
  h200.cc_major = 9, h200.cc_minor = 0, h200.smem_optin = 232448;
  volta = h200, volta.cc_major = 7;
  small = h200, small.smem_optin = 98304;  // below the 196,608 bytes a block needs at D = 256
  const DType bf = DType::bf16, f32 = DType::f32;
  using A = AttnDecode;
  // The 4B's heads (16 query heads, 4 kv heads, D 256) and the 27B's (24 / 4 / 256): the tensor cores.
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 256, bf, bf, h200) == A::mma);
  CHECK(resolve_attn_decode(A::automatic, 24, 4, 256, bf, bf, h200) == A::mma);
  CHECK(resolve_attn_decode(A::mma, 16, 4, 256, bf, bf, h200) == A::mma);
  // auto falls back where the kernel is not built or does not fit; simt is never checked.
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 256, f32, f32, h200) == A::simt);
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 256, bf, f32, h200) == A::simt);
  CHECK(resolve_attn_decode(A::automatic, 36, 4, 256, bf, bf, h200) == A::simt);  // 9 query heads a kv head
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 32, bf, bf, h200) == A::simt);   // D 32: not built
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 256, bf, bf, volta) == A::simt);
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 256, bf, bf, small) == A::simt);
  CHECK(resolve_attn_decode(A::automatic, 16, 4, 64, bf, bf, small) == A::mma);  // 49,152 bytes fit
  CHECK(resolve_attn_decode(A::simt, 36, 4, 32, f32, f32, volta) == A::simt);
  // Asked for where it cannot run: an error that says why and names the way out.
  const std::string group = message([&] { resolve_attn_decode(A::mma, 36, 4, 256, bf, bf, h200); });
  CHECK(group.find("does not support Hq=36 Hkv=4 D=256 with bf16 activations and a bf16 KV cache") !=
        std::string::npos);
  CHECK(group.find("use --attn-decode simt") != std::string::npos);
  CHECK(message([&] { resolve_attn_decode(A::mma, 16, 4, 256, bf, bf, volta); }).find("compute capability 7.x") !=
        std::string::npos);
  const std::string smem = message([&] { resolve_attn_decode(A::mma, 16, 4, 256, bf, bf, small); });
  CHECK(smem.find("needs 196608 bytes of shared memory per block for D=256; this device allows 98304") !=
        std::string::npos);
}
