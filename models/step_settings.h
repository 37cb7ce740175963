// step_settings.h: the model step's settings, the choices that are not arms because they change
// the arithmetic within a written tolerance instead of reproducing the reference bytes (arms are
// byte-identical, docs/ARMS.md): how prefill runs the delta rule and attention, and how decode runs
// attention. Each has a name, a parser for the command line, and a resolution of `auto` against
// the model's shapes, dtypes and the device (DeviceLimits, read once per model step).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/numeric.h"
#include "models/qwen35_config.h"

namespace sg {

// What the settings' resolution reads of the current device.
struct DeviceLimits {
  int sms = 0, smem_optin = 0, cc_major = 0, cc_minor = 0;
  static DeviceLimits current();
};

// How a prefill step runs the gated delta rule. A setting, not an arm: arms are byte-identical
// (ARMS.md), these agree only within the f32 tolerances of delta_rule_ref.h (normalised 1e-5 for
// chunked, 1e-4 for mma, against the double chunked reference).
enum class DeltaPrefill : uint8_t {
  automatic,  // bf16: wgmma, else mma, where built and fits; else chunked where built and fits; else scan
  scan,       // delta_rule_prefill: the reference-exact sequential scan (bytes of decode token by token)
  chunked,    // delta_rule_prefill_chunked: the chunked WY form (chunks of 64 tokens), much faster
  mma,        // delta_rule_prefill_mma: the chunked WY form with its products on the tensor cores
              // (bf16 operands split in two parts; automatic's choice for bf16 activations
              // where wgmma does not run)
  wgmma,      // delta_rule_prefill_wgmma: the same products on the warpgroup tensor cores (sm_90a,
              // bf16 q/k/v, Dk = Dv = 128), the state in registers; automatic's choice where it runs
  wgmma_t,    // delta_rule_prefill_wgmma_t ("wgmma-t"): the same products in two kernels, every chunk's
              // T and P first, then the recurrence with the state transposed (where wgmma runs; a workspace
              // of chunk records); named only
};
const char* delta_prefill_name(DeltaPrefill d);  // "auto", "scan", "chunked", "mma", "wgmma", "wgmma-t"
// "auto", "scan", "chunked", "mma", "wgmma" or "wgmma-t"; throws Error on anything else.
DeltaPrefill parse_delta_prefill(const std::string& name);
// True for the names of the chunked WY forms ("chunked", "mma", "wgmma", "wgmma-t"); false for
// "auto", "scan" and anything else.
bool chunked_delta_prefill(const std::string& name);

// How a prefill step runs attention.prefill. A setting, not an arm (the two agree within the bf16
// attention tolerance, not byte for byte).
enum class AttnPrefill : uint8_t {
  automatic,  // wgmma where it runs (bf16, D 64/128/256, compute capability 9.0) and its smem fits; else mma
              // where attention_prefill_mma_supports (bf16, D 32/64/128/256), sm_80+ and the smem fits; else simt
  simt,       // attention_prefill: the f32 CUDA-core kernel
  mma,        // attention_prefill_mma: bf16 tensor cores (mma.sync), P split into two bf16 halves
  wgmma,      // attention_prefill_wgmma: sm_90a warpgroup tensor cores, the same P split (D 64/128/256,
              // compute capability 9.0 only)
};
const char* attn_prefill_name(AttnPrefill a);  // "auto", "simt", "mma", "wgmma"
// "auto", "simt", "mma" or "wgmma"; throws Error on anything else.
AttnPrefill parse_attn_prefill(const std::string& name);

// How a decode step runs attention.decode. A setting, not an arm (the two agree within the bf16
// attention tolerance, not byte for byte).
enum class AttnDecode : uint8_t {
  automatic,  // mma where attention_decode_mma_supports (bf16, D 64/128/256, <= 8 q heads per kv head), sm_80+ and the
              // smem fits, else simt
  simt,       // attention_decode: the f32 CUDA-core kernel (split-K)
  mma,        // attention_decode_mma: bf16 tensor cores (mma.sync), P split into two bf16 halves
};
const char* attn_decode_name(AttnDecode a);  // "auto", "simt", "mma"
// "auto", "simt" or "mma"; throws Error on anything else.
AttnDecode parse_attn_decode(const std::string& name);

// How a step runs its projections (x W^T). A setting, not an arm (the two agree within the GEMM
// test tolerance, not byte for byte).
enum class GemmKind : uint8_t {
  automatic,    // wgmma_large where the own GEMM is built (bf16 on compute capability 9.0), mixed
                // where only the skinny kernel can run (bf16 on later devices), else cublas
  cublas,       // cublasGemmEx for every projection
  skinny,       // kernels/skinny_gemm.h where it applies (bf16, M <= 32, K % 64 == 0), cuBLAS elsewhere
  mixed,        // skinny for steps of at most kGemmMixedSkinnyRows rows, for weights of at least
                // kGemmMixedWideN rows (the LM head) and, up to kGemmMixedWideBlockRows rows, for
                // weights of at most kGemmMixedWideBlockMaxK columns that the skinny kernel takes in
                // 128- or 256-row blocks (skinny_gemm_block_rows) and weights of any width that it
                // takes in one wave of 272-row blocks, and for the projections before an
                // RMSNorm that sums their split-K partials (mix-round partials) up to kGemmLtMaxRows
                // rows; lt for the other projections of steps of at most kGemmLtMaxRows rows,
                // cublasGemmEx above: where each measured faster (docs/BENCHMARKS.md)
  lt,           // cuBLASLt with the algorithm chosen per shape by timing (engine/gemm_lt.h) for steps
                // of at most kGemmLtMaxRows rows (decode), cublasGemmEx above
  lt_all,       // "lt-all": cuBLASLt with the algorithm chosen per shape by timing for every projection
                // of every step, prefill included
  wgmma,        // mixed for steps of at most kGemmLtMaxRows rows; above (prefill), the own wgmma GEMM
                // (kernels/gemm_wgmma.h; bf16, compute capability 9.0) for every projection that
                // cublasGemmEx would run, except those adding their product to the residual stream
                // (mix-round residual: they stay on cuBLAS), with gate_up's SwiGLU in its epilogue
                // unless --swiglu kernel
  wgmma_large,  // "wgmma-large": wgmma for steps of at least kGemmWgmmaLargeMinRows rows (large
                // prefill steps, where it measured faster than cuBLAS), mixed for steps of at most
                // kGemmLtMaxRows rows, cublasGemmEx between (where the own GEMM, with no split of
                // K, measured up to 3.5x slower)
};
constexpr std::array<std::string_view, 8> kGemmNames = {"auto", "cublas", "skinny", "mixed",
                                                        "lt",   "lt-all", "wgmma",  "wgmma-large"};
constexpr int64_t kGemmLtMaxRows = 32;
// wgmma-large's own-GEMM steps: the 4B's prefill steps of 8192, 16384 and 32768 rows (and the 27B's
// of 32768) measured faster on it than on cuBLAS (its SwiGLU epilogue saves the swiglu kernel); at
// 2048 and 4096 rows level, at 1024 rows and below slower (docs/BENCHMARKS.md).
constexpr int64_t kGemmWgmmaLargeMinRows = 8192;
constexpr int kGemmMixedSkinnyRows = 24;  // measured with PDL on, the default (docs/BENCHMARKS.md)
constexpr int64_t kGemmMixedWideN = 65536;
constexpr int kGemmMixedWideBlockRows = 32;
// Measured (docs/BENCHMARKS.md): at 32 rows the wide-block skinny kernel beat cuBLASLt on the 4B
// preset's K = 2560 weights and lost on the 27B preset's K = 5120 ones (in two waves of 64-row
// blocks; the 272-row blocks that take the 27B's gate_up in one wave are not bound by it).
constexpr int64_t kGemmMixedWideBlockMaxK = 4096;
// Where a step computes the MLP activation silu(gate) * up. Not an arm and not arithmetic: both
// give the same bytes (the skinny GEMM's epilogue calls the swiglu kernel's element function); a
// setting so that `stepgraph ab` can time the two in one process.
enum class SwigluMode : uint8_t {
  automatic,  // gemm where gemm_fuses_swiglu says so (the rule below), else kernel
  gemm,       // in the gate_up GEMM's epilogue wherever the skinny kernel or the wgmma GEMM runs gate_up
  kernel,     // the swiglu kernel after gate_up
};
constexpr std::array<std::string_view, 3> kSwigluNames = {"auto", "gemm", "kernel"};
const char* swiglu_name(SwigluMode m);  // one of kSwigluNames
// One of kSwigluNames; throws Error on anything else.
SwigluMode parse_swiglu(const std::string& name);
// The gate_up GEMM's SwiGLU epilogue (skinny_gemm.h) where the skinny kernel runs it, except on
// steps of at most kGemmSwigluSmallRows rows over a gate_up of more than kGemmSwigluSmallMaxWeights
// values: measured alternately on one machine against the separate swiglu kernel (docs/BENCHMARKS.md), it made
// every 4B decode step 1.7-2.4% faster, the 27B's 16- and 24-row steps 1.2-1.3% faster and its
// steps of 1-8 rows ([34816, 5120] gate_up) 0.4-0.8% slower.
constexpr int64_t kGemmSwigluSmallRows = 8;
constexpr int64_t kGemmSwigluSmallMaxWeights = int64_t{64} << 20;
// Where a step computes the GDN layer's gated RMSNorm. Same bytes either way (the delta
// rule's fused norm reproduces the norm kernel's order, delta_rule.h); a setting so that `stepgraph
// ab` can time the two in one process.
enum class GatedNormMode : uint8_t {
  automatic,  // delta where delta_fuses_gated_norm says so (small steps of the 4B's heads), else kernel
  delta,      // in the delta rule's epilogue wherever it can (decode: unfused GDN path, bf16, Dv 64/128/256;
              // prefill: the mma form, bf16, Dv 64/128)
  kernel,     // the gated_rmsnorm kernel after the delta rule
};
constexpr std::array<std::string_view, 3> kGatedNormNames = {"auto", "delta", "kernel"};
const char* gated_norm_name(GatedNormMode m);  // one of kGatedNormNames
// One of kGatedNormNames; throws Error on anything else.
GatedNormMode parse_gated_norm(const std::string& name);
// Whether a decode step of `rows` rows whose norm could be fused fuses it under `mode`, for a GDN
// layer of head_values = Hv x Dv output values a row: delta always, kernel never, automatic on
// steps of at most kGatedNormFusedMaxRows rows with at most kGatedNormFusedMaxValues. Measured on
// the H200 against the norm kernel (docs/BENCHMARKS.md): the delta rule's kernel gets 4-9 us
// longer a call, which outweighs the norm kernel it saves on large steps (4B b=32 +3.0%, 27B b=32
// +2.6%) but not on the 4B's small ones (b=1..8: -0.1% to -1.5% over two measurements); the 27B's
// (Hv x Dv = 6144) small steps were no faster (-0.4% to +0.5%).
bool delta_fuses_gated_norm(GatedNormMode mode, int64_t rows, int64_t head_values);
// Whether a prefill step whose norm could be fused (the mma delta rule, bf16, Dv 64 or 128 in one
// Dv tile: delta_rule_prefill_mma.h) fuses it under `mode`: delta only; automatic keeps the norm
// kernel until the fused form is measured against it.
bool prefill_fuses_gated_norm(GatedNormMode mode);
constexpr int64_t kGatedNormFusedMaxRows = 8;
constexpr int64_t kGatedNormFusedMaxValues = 4096;
const char* gemm_name(GemmKind g);  // one of kGemmNames
// One of kGemmNames; throws Error on anything else.
GemmKind parse_gemm(const std::string& name);
// `automatic` -> mixed on a bf16 step on sm_90+, else cublas; skinny or mixed on an f32 step or before sm_90 is an
// error (the kernel takes bf16 and needs the TMA), wgmma or wgmma-large anywhere but bf16 on compute capability 9.0.
GemmKind resolve_gemm(GemmKind want, DType act, const DeviceLimits& d);
// Whether a projection of `rows` rows and an [n, k] weight runs the skinny kernel under the
// resolved setting `g` (the shape must also be one skinny_gemm_supports). block_rows: the W rows a
// block the skinny kernel would take this [n, k] weight in (skinny_gemm_block_rows). sums_partials: the projection
// feeds an RMSNorm that would sum its split-K partials (mix_partials_shape), which under mixed puts
// it on the skinny kernel up to kGemmLtMaxRows rows (measured faster than cuBLASLt there).
bool gemm_uses_skinny(GemmKind g, int64_t rows, int64_t n, int64_t k, int block_rows, bool sums_partials = false);
// Whether a projection of `rows` rows that does not run the skinny kernel runs through cuBLASLt's
// tuned algorithm under `g` (lt, mixed, wgmma or wgmma-large at most kGemmLtMaxRows rows; lt-all any
// rows).
bool gemm_uses_lt(GemmKind g, int64_t rows);
// Whether a projection of `rows` rows that runs neither the skinny kernel nor cuBLASLt runs the own
// wgmma GEMM under `g` (wgmma, more than kGemmLtMaxRows rows; wgmma-large, at least
// kGemmWgmmaLargeMinRows rows) where it takes the shape.
bool gemm_uses_wgmma(GemmKind g, int64_t rows);
// Whether a gate_up projection of `rows` rows and an [n, k] weight that runs the skinny kernel
// (or the wgmma GEMM) takes the SwiGLU epilogue (the rule above).
bool gemm_fuses_swiglu(int64_t rows, int64_t n, int64_t k);
// Under `mode`: automatic follows gemm_fuses_swiglu, gemm always, kernel never.
bool gemm_fuses_swiglu(SwigluMode mode, int64_t rows, int64_t n, int64_t k);

// Where the projections that feed the residual stream (attn.o_proj, gdn.out_proj, mlp.down) round
// their output to the activation dtype: in the GEMM, which stores it (bf16) for the RMSNorm after
// it to add to the residual stream, or in that RMSNorm, which reads the GEMM's f32 output and
// rounds it before the add (RmsNormParams::round_x). The arithmetic is the same either way, but an
// f32 output lets cuBLASLt sum a split-K GEMM's partials in place (one kernel, where a bf16 output
// takes a second, reduce kernel) and cuBLAS / cuBLASLt may pick another algorithm for it: a setting,
// not an arm (with the skinny kernel the bytes are the same). For steps of at most kGemmLtMaxRows
// rows (the f32 buffer is sized for them); larger steps round in the GEMM. `partials` goes one step
// further where the projection runs the skinny kernel with its K split: the GEMM leaves its f32
// split-K partials and the RMSNorm sums them (in split order, from 0.0f) before the rounding, so the
// GEMM's last-block sum leaves the chain; the same bytes as gemm everywhere (elsewhere it is gemm).
// `residual` is partials on the skinny kernel and, where cublasGemmEx runs the projection (prefill
// steps of more than 32 rows, and decode steps under --gemm cublas), adds its product to the residual
// stream in place (beta = 1), so the norm after reads the stream alone: half the norm's bytes. cuBLAS
// sums the product and the stream in f32, but whether it rounds the product first depends on its
// kernel (tools/probes/cublas_beta_probe.cu: it does on most shapes, gemm's bytes; on some it rounds
// the sum once): within the GEMM tolerance of gemm there, not always its bytes (on cuBLASLt it is gemm). Not with
// tensor parallelism over more than one rank (ModelStep refuses norm, partials and residual: each rank rounds before
// the sum there).
enum class MixRound : uint8_t {
  automatic,  // residual (gemm with tensor parallelism over several ranks): partials measured faster at
              // every decode batch of the 4B and 27B presets, residual in their prefill steps; norm
              // measured no faster (docs/BENCHMARKS.md)
  gemm,       // the GEMM writes bf16
  norm,       // the GEMM writes f32 on steps of at most kGemmLtMaxRows rows; the norm rounds it
  partials,   // a skinny GEMM with splits > 1 leaves its partials, the norm sums and rounds; else gemm
  residual,   // partials; and cublasGemmEx adds the product to the residual stream (beta = 1)
};
constexpr std::array<std::string_view, 5> kMixRoundNames = {"auto", "gemm", "norm", "partials", "residual"};
const char* mix_round_name(MixRound m);  // one of kMixRoundNames
// One of kMixRoundNames; throws Error on anything else.
MixRound parse_mix_round(const std::string& name);
// Whether a step of `rows` rows rounds the residual projections' output in the norm under `m`.
bool mix_rounds_in_norm(MixRound m, int64_t rows);
// Whether the RMSNorm after a projection that feeds the residual stream, of `n`-wide `act` rows,
// would sum that projection's skinny split-K partials under `m`: partials, bf16, and a row its
// 16-byte kernel takes (rmsnorm_sums_planes).
// (It does where the skinny kernel runs the projection with its K split.)
bool mix_partials_shape(MixRound m, int64_t n, DType act);
// Whether a projection that feeds the residual stream and runs on cublasGemmEx adds its product to
// the stream in place under `m` (residual).
bool mix_adds_in_gemm(MixRound m);

// How the GDN layers keep their recurrent (SSM) state [slots, Hv, Dk, Dv] between steps. A setting,
// not an arm: bf16 changes the numbers. The arithmetic is f32 either way; with bf16 every kernel
// reads the state widened and writes it rounded to nearest (decode after each token, a prefill step
// once at the end of each sequence's tokens in it), which halves the bytes the decode steps' delta rule moves (the
// largest state traffic: 134 MB a 4B layer at 32 rows in f32). The CPU reference model rounds at
// the same points; the drift against f32 over long generations is in docs/BENCHMARKS.md.
constexpr std::array<std::string_view, 2> kSsmStateNames = {"f32", "bf16"};
const char* ssm_state_name(DType d);  // "f32" or "bf16"
// "f32" or "bf16" (the state's dtype); throws Error on anything else.
DType parse_ssm_state(const std::string& name);

// How a step launches its kernels: with programmatic dependent launch (PDL, kernels/launch.cuh),
// so that a kernel's blocks start, and the skinny GEMM's weight stream begins, while the previous
// kernel finishes. Neither an arm nor a tolerance: every kernel waits for the previous one before
// touching its data, so the outputs are the same bytes with PDL on or off (tested).
enum class PdlMode : uint8_t {
  automatic,  // on for sm_90+ (where it measured faster, docs/BENCHMARKS.md), else off
  off,        // every kernel starts after the previous one completed
  on,         // PDL (sm_90+)
};
const char* pdl_name(PdlMode m);  // "auto", "off", "on"
// "auto", "off" or "on"; throws Error on anything else.
PdlMode parse_pdl(const std::string& name);
// `automatic` -> on for sm_90+, else off; on before sm_90 is an error.
PdlMode resolve_pdl(PdlMode want, const DeviceLimits& d);

// `automatic` -> for a step with prefill wgmma where it runs (D 64/128/256, bf16, compute
// capability 9.0) and its shared memory fits this device, else mma when the tensor-core prefill
// supports (D, activation = q dtype, KV cache dtype) on this device and its shared memory fits,
// else simt; an explicit mma or wgmma that cannot run is an error when the step has prefill
// (`prefill`) and attention layers.
AttnPrefill resolve_attn_prefill(AttnPrefill want, int D, DType act, DType cache, bool prefill, const DeviceLimits& d);
// The same for the tensor-core decode (it always applies: every step kind decodes).
AttnDecode resolve_attn_decode(AttnDecode want, int Hq, int Hkv, int D, DType act, DType cache, const DeviceLimits& d);
// `automatic` -> for bf16 activations (`act`) wgmma-t where it runs (Dk = Dv = 128, compute
// capability 9.0, its shared memory fits; else wgmma where only that one's fits) unless the gated norm is to be fused
// into the prefill's delta rule (`fused_norm`: built in the mma form only), else mma when its kernel is built for (Dk,
// Dv) on this device (sm_80+) and one block's shared memory fits (the opt-in limit); otherwise
// chunked when that kernel is built and fits, else scan. An explicit chunked, mma, wgmma or wgmma-t
// that cannot run is an error when the step has prefill (`prefill`), and harmless without (wgmma-t
// runs where wgmma does, with its own shared memory).
DeltaPrefill resolve_delta_prefill(DeltaPrefill want, const GdnDims& g, bool prefill, DType act, const DeviceLimits& d,
                                   bool fused_norm = false);

}  // namespace sg
