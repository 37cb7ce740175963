// delta_rule_prefill_shapes.h: the shape logic of the gated delta rule's prefill forms, CUDA-free so
// that the CPU tests cover it: the shapes each form is built for, its Dv tile, the dynamic shared
// memory of its blocks and the two-kernel form's workspace.
//   scan     delta_rule_prefill.h: the decode kernel's shapes (delta_rule_decode_split, contracts.h).
//   chunked  delta_rule_prefill_chunked.h: the WY form on the CUDA cores, chunks of 64 tokens, Dk in
//            {32, 64, 128}, any Dv >= 1 in Dv tiles of 32, 64 or 128.
//   mma      delta_rule_prefill_mma.h: the WY form on the tensor cores, the chunked form's shapes
//            and tiles; q and k tiles bf16 for bf16 inputs, else f32 (a high and a low part).
//   wgmma    delta_rule_prefill_wgmma.h: warpgroup MMAs (sm_90a), Dk = Dv = 128, bf16 q, k, v.
//   wgmma-t  delta_rule_prefill_wgmma_t.h: the same shapes in two kernels (every chunk's T and P
//            into a workspace of chunk records, then the recurrence).
// The shared-memory sizes are constexpr: each kernel static_asserts its own layout against them.
// Only the scan's rule is defined in delta_rule_prefill_shapes.cpp (it asks contracts.h), so the
// probes that compile a chunked form's source link nothing more.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/delta_rule_records.h"
#include "kernels/numeric.h"

namespace sg {

inline constexpr int kDeltaPrefillChunk = 64;    // tokens a chunk (the chunked, mma and wgmma forms)
inline constexpr int kDeltaPrefillWgmmaD = 128;  // Dk = Dv of the wgmma forms

// True when some built split of the scan launches this shape: delta_rule_decode_split(Dk, Dv) != 0
// (Dk in {8, 16, 32, 64, 128} and 1 <= Dv <= 256).
bool delta_rule_prefill_supports(int Dk, int Dv);

// True for Dk in {32, 64, 128} and any Dv >= 1 (tiles past Dv are masked).
constexpr bool delta_rule_prefill_chunked_supports(int Dk, int Dv) {
  return (Dk == 32 || Dk == 64 || Dk == 128) && Dv >= 1;
}

// The automatic Dv tile: 128 when Dv is a multiple of 128, else 64 when a multiple of 64, else 32.
constexpr int delta_rule_prefill_chunked_tile(int Dv) { return Dv % 128 == 0 ? 128 : Dv % 64 == 0 ? 64 : 32; }

// Dynamic shared memory of one chunked block (bytes), or 0 for a (Dk, dv_tile) it is not built for
// (both 32, 64 or 128). Floats of a chunk C = 64, BV = dv_tile: the cumulative decay (C doubles), the
// state tile [Dk, BV], k [C, Dk + 4], q' then V' [C, max(Dk, BV)], v [C, BV], T and P
// [C, C + 4] each, and exp(G), exp(G_last - G), beta [C] each.
constexpr size_t delta_rule_prefill_chunked_smem(int Dk, int dv_tile) {
  if (!delta_rule_prefill_chunked_supports(Dk, 1) || (dv_tile != 32 && dv_tile != 64 && dv_tile != 128)) return 0;
  const size_t C = kDeltaPrefillChunk, dk = static_cast<size_t>(Dk), bv = static_cast<size_t>(dv_tile);
  const size_t floats = 2 * C + dk * bv + C * (dk + 4) + C * (dk > bv ? dk : bv) + C * bv + 2 * C * (C + 4) + 3 * C;
  return floats * sizeof(float);
}

// The tensor-core form is built for the chunked form's shapes and Dv tiles.
constexpr bool delta_rule_prefill_mma_supports(int Dk, int Dv) { return delta_rule_prefill_chunked_supports(Dk, Dv); }
constexpr int delta_rule_prefill_mma_tile(int Dv) { return delta_rule_prefill_chunked_tile(Dv); }

// Dynamic shared memory of one tensor-core block (bytes) for q, k, v of dtype qkv (bf16: bf16 q and
// k tiles; any other: f32), or 0 for a (Dk, dv_tile) it is not built for (both 32, 64 or 128).
// Floats of a chunk C = 64, BV = dv_tile: the cumulative decay (C doubles), the state tile
// [Dk, BV + 4], the k tile and the q tile (later O [C, BV + 4] over it) of [C, Dk + 8] elements,
// v / X / V' [C, BV + 4], T and P [C, C + 8] each, exp(G), exp(G_last - G), beta [C] each, two
// ints a column (the first non-finite rows), and with bf16 inputs X / V' as two bf16 part tiles
// [C, BV + 8].
constexpr size_t delta_rule_prefill_mma_smem(int Dk, int dv_tile, DType qkv) {
  if (delta_rule_prefill_chunked_smem(Dk, dv_tile) == 0) return 0;
  const bool two = qkv != DType::bf16;
  const size_t C = kDeltaPrefillChunk, dk = static_cast<size_t>(Dk), bv = static_cast<size_t>(dv_tile);
  const size_t lds = bv + 4, qk = two ? C * (dk + 8) : C * (dk + 8) / 2, o = C * lds;
  const size_t parts = two ? 0 : 2 * (C * (bv + 8) / 2);
  const size_t floats = 2 * C + dk * lds + qk + (qk > o ? qk : o) + C * lds + 2 * C * (C + 8) + 3 * C + 2 * bv + parts;
  return floats * sizeof(float);
}

// Whether the fused output norm (DeltaRulePrefillParams::norm_w) is built for this shape: bf16 q, k,
// v and out, Dv 64 or 128 in one Dv tile (dv_tile 0 = automatic); the launcher also checks the
// norm's pointers and alignment.
constexpr bool delta_rule_prefill_mma_norm_built(int Dv, DType qkv_dtype, DType out_dtype, int dv_tile = 0) {
  const int bv = dv_tile == 0 ? delta_rule_prefill_mma_tile(Dv) : dv_tile;
  return qkv_dtype == DType::bf16 && out_dtype == DType::bf16 && (Dv == 64 || Dv == 128) && bv == Dv;
}

// True for Dk = Dv = 128 with bf16 q, k, v (the shapes the wgmma forms are built for).
constexpr bool delta_rule_prefill_wgmma_supports(int Dk, int Dv, DType qkv) {
  return Dk == kDeltaPrefillWgmmaD && Dv == kDeltaPrefillWgmmaD && qkv == DType::bf16;
}

// True on a device of compute capability 9.0 (the wgmma forms are built for sm_90a alone).
constexpr bool delta_rule_prefill_wgmma_device(int cc_major, int cc_minor) { return sm90a_device(cc_major, cc_minor); }

// Dynamic shared memory of one wgmma block (bytes), 202,240: q and v and two k tiles ([64 x 128]
// bf16), each state warpgroup's S [128 x 64] and X / V' [64 x 64] as bf16 high and low parts, two
// A / T tiles (f32 [64, 68]), two chunks' gates (delta_records::kGateBytes) and two ints a value
// column (the first non-finite rows of X and V').
constexpr size_t delta_rule_prefill_wgmma_smem() {
  const size_t C = kDeltaPrefillChunk, D = kDeltaPrefillWgmmaD, tile = C * D * 2;
  return 4 * tile + 4 * (D * 64 * 2) + 4 * (C * 64 * 2) + 2 * (C * (C + 4) * 4) +
         2 * size_t{delta_records::kGateBytes} + 2 * D * 4;
}

// Bytes of one chunk record of the two-kernel form (T's and P's two bf16 parts, lower triangles,
// and the chunk's gates): 19,712.
constexpr size_t delta_rule_prefill_wgmma_t_record() { return delta_records::kRecordBytes; }
// Workspace bytes of the two-kernel form for steps of at most max_tokens tokens in at most max_seqs
// sequences, Hv v-heads: (ceil(max_tokens / 64) + max_seqs) records a v-head; 0 for a negative
// argument.
constexpr size_t delta_rule_prefill_wgmma_t_workspace(int max_tokens, int max_seqs, int Hv) {
  return delta_records::workspace_bytes(max_tokens, max_seqs, Hv);
}
// Dynamic shared memory of one recurrence block (bytes), 182,784: two stages of a chunk's q, k, v
// tiles ([64 x 128] bf16), T's and P's bf16 parts as whole [64 x 64] tiles and its gates, and each
// of the two warpgroups' bf16 output tile [64 x 64].
constexpr size_t delta_rule_prefill_wgmma_t_smem() {
  const size_t C = kDeltaPrefillChunk, D = kDeltaPrefillWgmmaD;
  const size_t stage = 3 * (C * D * 2) + 4 * size_t{delta_records::kPartTile} + delta_records::kGateBytes;
  return 2 * stage + 2 * (C * 64 * 2);
}
// The v-heads of one T block: two where each k head has an even number of v-heads, else one.
constexpr int delta_rule_prefill_wgmma_t_chunk_heads(int Hk, int Hv) { return Hk > 0 && (Hv / Hk) % 2 == 0 ? 2 : 1; }
// Dynamic shared memory of one T block for Hk k heads and Hv v-heads (bytes): the k tile
// ([64 x 128] bf16) and, for each of its v-heads, an A / T tile (f32 [64, 68]) and the gates;
// 35,072 for one v-head, 53,760 for two.
constexpr size_t delta_rule_prefill_wgmma_t_chunk_smem(int Hk, int Hv) {
  const size_t C = kDeltaPrefillChunk, heads = static_cast<size_t>(delta_rule_prefill_wgmma_t_chunk_heads(Hk, Hv));
  return C * kDeltaPrefillWgmmaD * 2 + heads * (C * (C + 4) * 4 + delta_records::kGateBytes);
}

}  // namespace sg
