// delta_rule.h: the gated delta rule, decode (recurrent) form, over slot-indexed state stored
// [num_slots, Hv, Dk, Dv] (S[i][j]: i over Dk, j over Dv) as f32 or bf16 (state_dtype; bf16 is read
// widened exactly and written rounded to nearest even, the arithmetic is f32 either way, with the
// same grid and block). Per (row, v-head), in f32:
//   S *= exp(g); u_j = (v_j - sum_i S[i][j] k_i) * beta; S[i][j] += k_i u_j; o_j = sum_i S[i][j] q_i/sqrt(Dk)
// with every sum an explicit fmaf chain over i = 0..Dk-1 (the order the CPU reference uses).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct DeltaRuleDecodeParams {
  const void* q = nullptr;  // [rows, Hk, Dk]
  const void* k = nullptr;  // [rows, Hk, Dk]
  const void* v = nullptr;  // [rows, Hv, Dv]
  DType qkv_dtype = DType::bf16;
  const float* g = nullptr;        // [rows, Hv]
  const float* beta = nullptr;     // [rows, Hv]
  const int32_t* slots = nullptr;  // [rows]; < 0: output 0, state untouched
  void* state = nullptr;           // [num_slots, Hv, Dk, Dv] state_dtype
  DType state_dtype = DType::f32;  // f32, or bf16 (the ssm-state setting: read widened, written rounded to nearest)
  void* out = nullptr;             // [rows, Hv, Dv]
  DType out_dtype = DType::bf16;
  int rows = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0;
  int split = 0;  // threads per state column (1, 2, 4, 8; 0 = automatic). Same bytes for every value.
  // Blocks per (row, v-head), each owning Dv / col_blocks adjacent columns (1, 2, 4; Dv % col_blocks
  // == 0; 0 = automatic: delta_rule_decode_col_blocks in contracts.h, 2 for split 2). Smaller
  // blocks, more of them resident per SM and out of phase.
  // Same bytes for every value (a column's arithmetic does not depend on its block).
  int col_blocks = 0;
  // With a bf16 state and no fused norm: a thread group owns two adjacent columns and keeps their
  // rows as the bf16x2 words it loads (true), or one column held widened to f32, as with an f32 state
  // (false). The first needs a split of 2 or more, an even Dv / col_blocks and a 4-byte aligned
  // state; otherwise the second runs.
  // Same bytes either way; the block of the first is half as wide.
  bool pair_columns = true;
  // Persistent blocks that stage the next (row, v-head)'s state in shared memory while computing
  // the current one (delta_rule.cu). Taken only with no fused norm, split 1 or 2 for f32 and 2 for
  // bf16 (in column pairs), and a 16-byte aligned state; col_blocks is ignored. Same bytes. Off by
  // default; the model sets it for the opt-in arm gdn.decode=staged (contracts.h). On the H200 it
  // is slower than the plain kernel (the 4B's whole GDN decode 57.5 against 46.9 us with an f32
  // state, 33.5 against 31.9 with bf16; docs/BENCHMARKS.md). Not profiled; by count, with 2 to 4
  // items a block (1024 over 264 blocks with f32, 528 with bf16), the first item's copy, which
  // nothing overlaps, is a quarter to a half of the stream.
  bool staged = false;
  // Optional fused output norm (the GDN layer's gated RMSNorm, rmsnorm.h): with norm_w set, the
  // kernel writes y = (w * (o' * inv)) * silu(z) instead of o, o' = o rounded to bf16, with the
  // bytes gated_rmsnorm's 16-byte kernel gives on the bf16 output (gated_rmsnorm_vector_path):
  // the sums of squares of 8 adjacent columns in index order, then the same butterfly over the
  // Dv / 8 partials. With col_blocks > 1 the blocks of a (row, v-head) form a cluster and read
  // each other's partials through distributed shared memory (measured slower in the model than
  // one block a head: docs/BENCHMARKS.md). Needs out and z bf16, Dv 64, 128 or 256.
  // Padding rows (slot < 0) write zeros, as gated_rmsnorm does for rows past its live count.
  const void* norm_z = nullptr;  // [rows, Hv, Dv] bf16 at token stride norm_z_stride (heads Dv apart)
  int64_t norm_z_stride = 0;     // 0 = Hv * Dv
  const void* norm_w = nullptr;  // [Dv] f32 or bf16, used as is
  DType norm_w_dtype = DType::f32;
  float norm_eps = 1e-6f;
};

// True when some built split launches this shape (Dk in {8, 16, 32, 64, 128}; Dv up to 256 with one
// thread per column, see delta_rule_decode_split in contracts.h).
bool delta_rule_decode_supports(int Dk, int Dv);
// Grid (Hv * col_blocks, rows), block round_up(Dv / col_blocks * split, 32): `split` threads per
// state column j (delta_rule_decode_split in contracts.h says which split runs); with the fused
// norm and col_blocks > 1, in clusters of col_blocks blocks along x. Returns cudaErrorInvalidValue for a col_blocks
// that is not 0, 1, 2 or 4 or does not divide Dv, and for a fused norm outside its conditions.
cudaError_t delta_rule_decode(const DeltaRuleDecodeParams& p, cudaStream_t stream);
// The grid (blocks along x) the staged kernel takes for p on the current device: min(rows * Hv,
// the blocks the device keeps resident); 0 where p does not take the staged kernel (or on a CUDA
// error). Not a stream operation.
int delta_rule_decode_staged_grid(const DeltaRuleDecodeParams& p);

}  // namespace sg
