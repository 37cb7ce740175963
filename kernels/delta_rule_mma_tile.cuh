// delta_rule_mma_tile.cuh: the shared-memory layout of one block of the tensor-core delta-rule
// prefill (delta_rule_prefill_mma.cu, which alone includes it).
#pragma once
#include <cstddef>

#include "kernels/delta_rule_prefill_shapes.h"
#include "kernels/numeric.h"

namespace sg::mma_tile {

constexpr int kChunk = kDeltaPrefillChunk;  // tokens a chunk

// Compile-time shape of one block: DK = Dk, BV = the Dv tile, TWO = q and k have a low part (f32
// inputs: f32 tiles, fragments built from float pairs) or not (bf16 inputs: bf16 tiles, fragments
// by ldmatrix). Shared memory offsets in floats.
template <int DK, int BV, bool TWO>
struct MTile {
  static constexpr int C = kChunk;
  static constexpr int NT = 4 * BV;   // threads
  static constexpr int NW = NT / 32;  // warps = BV / 8: warp w owns state columns 8w..8w+7 in P4
  static constexpr int CG = BV / 4;   // state load/store: column groups of 4
  static constexpr int RS = DK / 16;  // state load/store: rows per thread
  // q, k row pitch in elements: f32 (== 8 mod 32 words: conflict-free float2 fragment loads) or
  // bf16 (an odd number of 16-byte units: conflict-free ldmatrix)
  static constexpr int LDK = DK + 8;
  static constexpr int LDS = BV + 4;  // S, X / V', O row pitch (== 4 mod 32: conflict-free column-pair loads)
  static constexpr int LDT = C + 8;   // T, P row pitch
  static constexpr int KQ = TWO ? C * LDK : C * LDK / 2;  // floats of one q or k tile
  static constexpr int CS = C * LDS;                      // floats of one [C, LDS] tile (O, V)
  static constexpr int QO = KQ > CS ? KQ : CS;            // floats of the q tile's region (then O)
  // P1b: the 8 row tiles of [q; k] (16 rows each) x BV columns; a warp has WM1 row tiles, WN1 8-column
  // tiles: all 8 row tiles of its own 8 columns, so each S fragment is loaded and split once per block.
  static constexpr int WM1 = 8;
  static constexpr int WN1 = 1;
  static constexpr int oG = 0;              // G     [C] double
  static constexpr int oS = oG + 2 * C;     // S     [DK, LDS] state tile
  static constexpr int oK = oS + DK * LDS;  // K     [C, LDK]  k (f32 or bf16)
  static constexpr int oQ = oK + KQ;        // Q     [C, LDK]  q (P0-P1), then O [C, LDS] f32 (P2-P4)
  static constexpr int oV = oQ + QO;        // V     [C, LDS]  v tile, then X (P1), then V' (P3)
  static constexpr int oT = oV + C * LDS;   // T     [C, LDT]  A (P1), T = (I + A)^-1 (P2)
  static constexpr int oP = oT + C * LDT;   // P     [C, LDT]  exp(G_r - G_c) q'_r.k_c, 0 for c > r
  static constexpr int oE = oP + C * LDT;   // E     [C] exp(G_r)
  static constexpr int oL = oE + C;         // EL    [C] exp(G_last - G_r)
  static constexpr int oB = oL + C;         // beta  [C]
  static constexpr int oN = oB + C;         // int [2][BV]: first non-finite row of X / V' per column
  // !TWO: X, then V', also as high and low bf16 parts [C, LDB] (split once where they are written,
  // read by ldmatrix.trans as B fragments of T X and P V'); f32 inputs leave no room for them.
  static constexpr int LDB = BV + 8;                // an odd number of 16-byte units
  static constexpr int XB = TWO ? 0 : C * LDB / 2;  // floats of one bf16 part tile
  static constexpr int oXh = oN + 2 * BV;           // Xh    [C, LDB] bf16
  static constexpr int oXl = oXh + XB;              // Xl    [C, LDB] bf16
  static constexpr int floats = oXl + XB;
  static constexpr size_t bytes = floats * sizeof(float);
  static_assert(NW * 8 == BV && WM1 * WN1 == 8, "warp w owns state columns 8w..8w+7");
  static_assert((8 / WM1) * (BV / (8 * WN1)) == NW, "P1b covers the 8 row tiles x BV columns once");
  static_assert(NW % 4 == 0 || NW == 4, "P3 / P4 output: 4 row tiles x groups of 32 columns");
  static_assert(NT >= 128, "P2 uses warps 0 and 1 for the diagonal blocks");
  static_assert(RS == 2 || RS == 4 || RS == 8, "state rows per thread");
  static_assert(TWO || (LDK * 2 / 16) % 2 == 1, "bf16 rows: an odd number of 16-byte units");
  static_assert(TWO || ((LDB * 2 / 16) % 2 == 1 && oXh % 4 == 0 && oXl % 4 == 0), "bf16 part tiles");
  static_assert(oS % 4 == 0 && oK % 4 == 0 && oQ % 4 == 0 && oV % 4 == 0 && oT % 4 == 0 && oP % 4 == 0,
                "16-byte aligned views");
  static_assert(bytes <= 227 * 1024, "fits one block's shared memory on sm_90");
  static_assert(bytes == delta_rule_prefill_mma_smem(DK, BV, TWO ? DType::f32 : DType::bf16),
                "the bytes the model plans with (delta_rule_prefill_shapes.h)");
};

}  // namespace sg::mma_tile
