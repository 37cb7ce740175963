// skinny_gemm_shapes.h: the shape logic of the skinny GEMM (skinny_gemm.h), CUDA-free so that the
// CPU tests cover it: which shapes it takes, the W rows a block and the split of K it is launched
// with, and the workspace a split needs.
#pragma once
#include <cstddef>

namespace sg {

constexpr int kSkinnyGemmMaxRows = 32;       // M: the n8 tiles of x a consumer warp holds (1..4)
constexpr int kSkinnyGemmTileK = 64;         // K a tile: one 128-byte swizzle row of bf16
constexpr int kSkinnyGemmNarrowRows = 64;    // W rows a block by default: 16 a consumer warp
constexpr int kSkinnyGemmOneWaveRows = 272;  // the widest block: 17 consumer warps, one an SM

// Shapes the kernel takes: 1 <= M <= 32, any N >= 1 (the last row block is partial), K a positive
// multiple of 64.
bool skinny_gemm_supports(int M, int N, int K);
// W rows a block for M rows and N outputs on `num_sms` SMs: 64 up to 16 rows; above, wider row
// blocks for wide weights, so that the x tile (re-read for every row block and K tile) costs
// less, where they fill between half and all of one wave: 256 (one block an SM) when
// ceil(N / 256) is in [sms / 2, sms], else 128 (two an SM) when ceil(N / 128) is in [sms / 2,
// 2 sms], else 272 (one an SM) when ceil(N / 272) is in [sms / 2, sms], else 64. On the H200 at
// 32 rows the GEMM probe measured 256 fastest for N = 18432 (72 blocks), 128 for 10240 and 12352
// (80 and 97 blocks; 256 was slower there, with 40 and 49). 272 rows take the 27B's gate_up
// (N = 34816: 128 blocks, where 256 and 128 rows need a second wave) in one wave: 122.6 us on an
// H100 at 32 rows against 129.1 for 64 rows and 128.6 for cuBLASLt + the swiglu kernel. The
// probe's 144-, 96- and 80-row blocks (one wave of one block an SM for those N: 26.0, 18.6 and
// 15.9 us against 27.9, 18.8 and 16.9 alone) made the 4B decode-b32 step 1.5% slower in the model
// (docs/BENCHMARKS.md), so they are not used.
int skinny_gemm_block_rows(int M, int N, int num_sms);
// Split count for ceil(N / block rows) row blocks over K / 64 tiles on `num_sms` SMs: 1 when there
// are at least as many row blocks as SMs or the row blocks are wider than 64; else the smallest
// within 3% of the least modelled time, blocks per SM x (tiles per split + 4) / min(blocks per SM,
// 2) (an SM streams at full speed from two resident blocks on); at most 32 and at most K / 256.
int skinny_gemm_pick_splits(int M, int N, int K, int num_sms);
size_t skinny_gemm_workspace_bytes(int M, int N, int splits);

}  // namespace sg
