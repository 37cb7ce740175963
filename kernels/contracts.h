// contracts.h: one pure, CUDA-free function per op that turns (arm, shape) into a launch contract:
// the arm actually used after fallbacks, grid, block, dynamic shared memory and a stable kernel
// name. Launchers launch exactly what the contract says (a closed switch over its arm); graph manifests
// record it; CPU tests check it. Also the conv prefill chunk descriptors and their worst-case
// count, which sizes the `exact` grid.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"

namespace sg {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  bool operator==(const Dim3&) const = default;
};
std::string to_string(const Dim3& d);  // "(x, y, z)"
std::ostream& operator<<(std::ostream& os, const Dim3& d);

template <class Arm>
struct LaunchContract {
  Arm arm{};  // the arm that runs (after fallbacks)
  Dim3 grid, block;
  Dim3 cluster;                 // thread block cluster dims ({1, 1, 1}: launched without clusters)
  size_t smem_bytes = 0;        // dynamic shared memory
  std::string_view kernel;      // stable short name, e.g. "conv_update_grid" (static storage)
  std::string fallback_reason;  // empty when the requested arm runs
  // Work items per thread where an arm builds several (a compile-time choice the launcher must
  // honour; it also sets the grid): conv.update fast: channels per thread (2, 4, 8). 0 elsewhere.
  int per_thread = 0;
};

// CUDA's limit on gridDim.y and gridDim.z; contracts that would exceed it throw.
inline constexpr unsigned kMaxGridYZ = 65535;

// --- conv.update (decode) -------------------------------------------------------------------------
inline constexpr int kConvMinK = 2, kConvMaxK = 8;
inline constexpr unsigned kConvUpdateGridBlock = 256;
// The grid arm's grid-stride loop is capped at 8 blocks x 132 SMs (H100/H200); a constant, so the
// contract does not depend on the device.
inline constexpr unsigned kConvUpdateGridMaxBlocks = 1056;
inline constexpr unsigned kConvUpdateFastBlock = 128;  // the fast arm's default threads per block
// The fast arm's block sizes a kernel is built for (the launch bound is the largest).
inline constexpr std::array<int, 3> kConvUpdateFastBlockChoices = {128, 256, 512};
// The fast arm's consecutive channels per thread, V: one of these (a kernel is built for each).
inline constexpr std::array<int, 3> kConvUpdateFastChannelChoices = {8, 4, 2};
// The decode update is latency-bound (~4 MB at the 4B shape), so the pick wants enough threads in
// flight to fill the GPU once: 132 SMs x 2048 resident threads (H100/H200); a constant, so the
// contract does not depend on the device. Measured on the H200 (BENCHMARKS.md, `4d2f25d`), 32 rows,
// 4B / 27B: V = 2 3.05 / 3.72 us, V = 4 3.18 / 3.85, V = 8 4.45 / 5.15 (the pick is 2 for both);
// 256 or 512 threads per block instead of 128 changes V = 2 by < 1%. `stepgraph kernels --op
// conv.update --conv-update-channels 2,4,8 --conv-update-blocks 128,256,512` repeats the sweep.
inline constexpr int64_t kConvUpdateFastWaveThreads = 132 * 2048;

struct ConvUpdateShape {
  int rows = 0;      // padded batch (part of the graph key)
  int C = 0;         // channels
  int K = 0;         // conv width, 2..8
  int channels = 0;  // fast arm: channels per thread, 2, 4 or 8; 0 = conv_update_fast_channels(rows, C)
                     // (a sweep knob: every V gives the same bytes; the grid arm ignores it)
  int block = 0;     // fast arm: threads per block, 128, 256 or 512; 0 = kConvUpdateFastBlock
                     // (a sweep knob as `channels`)
};
// The fast arm's V for a shape: the largest of 8, 4, 2 whose working threads rows * ceil(C / V)
// fill at least one wave (kConvUpdateFastWaveThreads), else 2 (the 4B and 27B decode shapes at
// 32 rows get 2). Pure; rows >= 1 and C >= 1 assumed (the contract validates them first).
int conv_update_fast_channels(int rows, int C);
// grid:  block 256, grid x = min(ceil(rows*C/256), 1056), grid-stride loop over (row, channel).
// fast:  block B = s.block or 128, grid (ceil(C/(B*V)), rows), V = per_thread = s.channels or the
//        pick above: each thread handles V consecutive channels.
// Throws std::invalid_argument on rows < 1, C < 1, K outside 2..8, channels not 0, 2, 4 or 8, block
// not 0, 128, 256 or 512, or rows > 65535 (fast).
LaunchContract<ConvUpdateArm> conv_update_contract(ConvUpdateArm requested, const ConvUpdateShape& s);
LaunchContract<ConvUpdateArm> conv_update_contract(const ArmSelection& sel, const ConvUpdateShape& s);

// --- postconv -------------------------------------------------------------------------------------
inline constexpr int kPostconvMaxD = 256;
inline constexpr int kPostconvTokenTile = 16;  // tokens per token_tile block (4 warps x 4 tokens)

struct PostconvShape {
  int T = 0;  // tokens (padded bucket)
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0;
};
// megablock:  grid (T, Hk+1),               block 256
// fast:       grid (T, Hk+1),               block 128
// split:      grid (T, Hk+Hv),              block 128
// token_tile: grid (ceil(T/16), Hk+Hv),     block 128; only when Dk = Dv = 128, else `fast`.
// Throws std::invalid_argument on T < 1, Hk < 1, Hv < 1, Hv % Hk != 0, Dk or Dv outside 1..256.
LaunchContract<PostconvArm> postconv_contract(PostconvArm requested, const PostconvShape& s);
LaunchContract<PostconvArm> postconv_contract(const ArmSelection& sel, const PostconvShape& s);

// --- conv.fwd (prefill) + conv.chunks -------------------------------------------------------------
inline constexpr int kConvChunkTokens = 8;     // tokens per `exact` descriptor
inline constexpr int kConvTiledChannels = 32;  // tiled: 32 channels x 16-token smem tile
inline constexpr int kConvTiledTokens = 16;
inline constexpr unsigned kConvTiledTokenLanes = 8;

struct ConvFwdShape {
  int max_tokens = 0;  // padded token bucket
  int max_seqs = 0;    // most sequences in the bucket
  int C = 0;
  int K = 0;  // 2..8
};

// One `exact` work item: up to chunk_tokens tokens of one sequence.
struct ConvChunk {
  int32_t seq;    // sequence index
  int32_t start;  // first token, absolute (row in the packed [T, C] input)
  int32_t len;    // 1..chunk_tokens
  bool operator==(const ConvChunk&) const = default;
};

// The descriptors for a packed varlen batch, sequence by sequence, chunk by chunk. cu_seqlens has
// one more entry than there are sequences, starts at 0 and never decreases; zero-length
// sequences produce no chunk. Throws std::invalid_argument otherwise or when chunk_tokens < 1.
std::vector<ConvChunk> build_conv_chunks(const std::vector<int32_t>& cu_seqlens, int chunk_tokens = kConvChunkTokens);

// The most descriptors any batch of at most max_tokens tokens in at most max_seqs sequences can
// produce: with m = min(max_seqs, max_tokens) non-empty sequences, floor((max_tokens +
// (chunk_tokens-1)*m) / chunk_tokens) (0 when m = 0); attained by m-1 one-token sequences plus
// one long one.
// (Each sequence of L tokens gives ceil(L/ct) = floor((L+ct-1)/ct) chunks; summing, at most
// floor((T + (ct-1)*m)/ct). That is <= ceil(T/ct) + max_seqs, the looser "each sequence adds at
// most one partial chunk" bound.) Throws std::invalid_argument on negative inputs.
int conv_max_chunks(int max_tokens, int max_seqs, int chunk_tokens = kConvChunkTokens);

// Channels per block (grid x tile) of a conv.fwd arm: tiled 32, register 128, k4 128, k4x2 256.
int conv_fwd_channel_tile(ConvFwdArm arm);

// tiled:    block (32, 8) = 32 channels x 8 token lanes, 16-token tile, smem (16+K-1) x 32 f32
// register: block 128, one channel per thread
// k4:       block 128, K = 4 at compile time; K != 4 falls back to register
// k4x2:     block 128, two channels per thread (256-channel tile); K != 4 falls back to register
// grid x = ceil(C / tile); grid y = conv_max_chunks(max_tokens, max_seqs) for `exact`,
// max_seqs for `whole`. Throws std::invalid_argument on max_tokens < 1, max_seqs < 1, C < 1,
// K outside 2..8, or grid y > 65535.
LaunchContract<ConvFwdArm> conv_fwd_contract(ConvFwdArm requested, ConvChunksArm chunks, const ConvFwdShape& s);
LaunchContract<ConvFwdArm> conv_fwd_contract(const ArmSelection& sel, const ConvFwdShape& s);

// --- delta_rule.decode ----------------------------------------------------------------------------
// Threads per state column for the recurrent step: `requested` (1, 2, 4, 8) or, for 0, the first of
// 2, 1, 4 that fits (2 measured fastest on the H200). Built: 1 and 4 for Dk in {8, 16, 32, 64, 128}, also 2 and 8 for
// Dk = 128. A split q fits when round_up(Dv * q, 32) <= delta_rule_max_threads(q) (the kernel's launch bound, which
// keeps Dk/q state rows per thread in registers: 256 threads for q = 1, 512 for 2 and 4, 1024 for
// 8). Returns 0 when nothing fits. Every split gives the same bytes.
int delta_rule_max_threads(int q);
int delta_rule_decode_split(int Dk, int Dv, int requested = 0);
// Whether the column-pair kernel may run (DeltaRuleDecodeParams::pair_columns): a bf16 state
// (ssm_bytes 2), no fused norm and a split q of 2 or more. It runs when the columns of a block are
// also even and the state 4-byte aligned.
bool delta_rule_decode_may_pair(int q, int ssm_bytes, bool norm_fused);
// Blocks per (row, v-head) for split q: `requested` (1, 2, 4; must divide Dv) or, for 0: 1 where the
// column pairs may run and Dv is even (one block a head measured 1.3-2.1% faster than two for the
// pair kernel on the H200, 4B and 27B b=32), else 2 when q is 2 and Dv is even (two half-width
// blocks measured 3.5-4.4% faster than one for the one-column kernel at Dk = Dv = 128), else 1.
// Returns 0 for a requested count that is not 1, 2 or 4 or does not divide Dv. Every count gives
// the same bytes.
int delta_rule_decode_col_blocks(int Dv, int q, int requested = 0, bool may_pair = false);
// The delta-rule decode block: Dv / col_blocks columns (or half as many column pairs) of q threads,
// rounded up to whole warps. The one-column, pair and staged kernels and their contracts use it.
int delta_rule_decode_block(int Dv, int col_blocks, int q, bool pairs);
// Whether the staged kernel's shape fits (gdn.decode=staged, DeltaRuleDecodeParams::staged): no
// fused norm, split 1 or 2 with an f32 state or 2 with a bf16 one (column pairs, Dv even), a block
// of at most kDeltaRuleStagedMaxThreads and a state slab of at most kDeltaRuleStagedMaxSlab bytes.
// The launcher also needs a 16-byte aligned state, which a shape cannot say.
bool delta_rule_decode_staged_fits(int Dk, int Dv, int q, int ssm_bytes, bool norm_fused);
inline constexpr int kDeltaRuleStagedMaxThreads = 256;
inline constexpr int64_t kDeltaRuleStagedMaxSlab = 160 * 1024;

// --- gdn.decode ----------------------------------------------------------------------------------
struct GdnDecodeShape {
  int rows = 0;  // padded batch (graph key)
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
  int ssm_bytes = 4;        // the SSM state's element size: 4 (f32) or 2 (bf16, the ssm-state setting)
  bool norm_fused = false;  // unfused path: the gated norm in the delta rule's epilogue (one block a head)
};
// unfused: three launches (conv.update, postconv, delta_rule.decode); the contract describes the
//          delta-rule launch: grid (Hv * col_blocks, rows), block round_up(Dv / col_blocks * split, 32),
//          col_blocks 1 with the fused norm; where the column pairs run (delta_rule_decode_may_pair and
//          an even Dv / col_blocks), col_blocks as delta_rule_decode_col_blocks says for them and the
//          pair kernel's block, round_up(Dv / col_blocks / 2 * split, 32) (a state that is not 4-byte
//          aligned runs the one-column kernel instead, which the contract cannot see).
// fused:   one launch with the delta-rule launch's grid and block (split and col_blocks as there), in
//          clusters of the Hv/Hk * col_blocks blocks that share a k-head (consecutive along x; when
//          that exceeds kGdnDecodeMaxCluster, col_blocks drops to 1). Each block owns every n-th q/k
//          conv channel of the k-head (n = cluster size) and the v channels of its columns: it alone
//          reads and writes their conv state, and sends its q/k conv outputs to every block of the
//          cluster through distributed shared memory. Then each block runs the post-conv of the
//          head (the reference trees, redundantly, so every block gets the same bytes) and the
//          recurrent step of its columns. Needs Dk in {64, 128}, split in {1, 2, 4}, Hv/Hk <= 8 and a
//          block <= delta_rule_max_threads(split); otherwise `unfused`.
//          smem: floats for q, k (raw and scaled), the two trees and the block's v columns.
// staged:  unfused with the staged delta rule (persistent blocks that copy the next (row, v-head)'s
//          state slab into shared memory while computing the current one; delta_rule.h), where
//          delta_rule_decode_staged_fits; otherwise `unfused`. The contract's grid is {0, 1, 1}: the device decides it
//          (delta_rule_decode_staged_grid: min(rows * Hv, the resident blocks)); block (Dv or Dv / 2)
//          * split rounded up to whole warps; smem the slab, Dk * Dv state elements.
// prep:    two launches: conv.update and postconv in one kernel (gdn_decode_prep.h: grid (Hk, rows),
//          kGdnDecodePrepThreads threads, each block the q and k channels of a k-head and the v
//          channels of its Hv/Hk v-heads), then the delta rule exactly as `unfused` (the contract
//          describes that launch, as for unfused). Needs gdn_decode_prep_fits; otherwise `unfused`.
inline constexpr int kGdnDecodeMaxCluster = 8;  // the portable cluster size limit
inline constexpr int kGdnDecodePrepThreads = 128;
inline constexpr int kGdnDecodePrepPerThread = 8;  // channels a thread at most (held in registers)
// Whether the prep arm's kernel is built for the shape: Dk <= 256 (post-conv's one-warp tree), at
// most kGdnDecodePrepThreads * kGdnDecodePrepPerThread channels a block (2 Dk + Hv / Hk * Dv), K in
// [kConvMinK, kConvMaxK], Hv a multiple of Hk.
bool gdn_decode_prep_fits(int Hk, int Hv, int Dk, int Dv, int K);
LaunchContract<GdnDecodeArm> gdn_decode_contract(GdnDecodeArm requested, const GdnDecodeShape& s);

// --- gdn.prefill ---------------------------------------------------------------------------------
// The fused arm (kernels/gdn_prefill_fused.h): the varlen causal conv and the post-conv prep in one
// launch. The token axis [0, max_tokens) is cut into tiles of kGdnPrefillTileTokens; the channels
// into groups of kGdnPrefillGroupChannels (each q head, each k head, then the v region in 128-channel
// pieces, the last possibly narrower); a block takes kGdnPrefillGroupsPerBlock groups of one tile
// (a half-warp per group). Per tile: ceil(groups / 8) conv blocks, then one gate block (g, beta).
inline constexpr int kGdnPrefillTileTokens = 64;
inline constexpr int kGdnPrefillGroupChannels = 128;
inline constexpr int kGdnPrefillGroupsPerBlock = 8;
inline constexpr unsigned kGdnPrefillBlock = 128;  // 8 half-warps

struct GdnPrefillShape {
  int max_tokens = 0;  // padded token bucket (graph key)
  int max_seqs = 0;    // most sequences in the bucket
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
};
// True when the fused kernel is built for the head sizes and width: Dk = 128, Dv a multiple of 8
// in 8..256, K in 2..8 (any Hk >= 1 and Hv a multiple of Hk).
bool gdn_prefill_fused_supports(int Dk, int Dv, int K);
// Conv blocks per token tile: ceil((2*Hk + ceil(Hv*Dv / 128)) / 8).
int gdn_prefill_conv_blocks_per_tile(int Hk, int Hv, int Dv);
// unfused: the reference, two launches (conv.fwd, then postconv) with their own contracts; this
//          contract carries only the arm (grid, block {0, 0, 0}, no kernel name).
// fused:   one launch, grid (ceil(max_tokens / 64) * (conv_blocks_per_tile + 1), 1, 1), block 128,
//          no dynamic shared memory; falls back to unfused when !gdn_prefill_fused_supports.
// Throws std::invalid_argument on max_tokens < 1, max_seqs < 1, Hk < 1, Hv < 1, Hv % Hk != 0,
// Dk or Dv < 1, K outside 2..8, C = 2*Hk*Dk + Hv*Dv beyond int32, or a grid of 2^31 blocks or more.
LaunchContract<GdnPrefillArm> gdn_prefill_contract(GdnPrefillArm requested, const GdnPrefillShape& s);
LaunchContract<GdnPrefillArm> gdn_prefill_contract(const ArmSelection& sel, const GdnPrefillShape& s);

}  // namespace sg
