// contracts.cpp: launch contracts per op (grid, block, smem, fallbacks) and the conv prefill chunk
// descriptors. Pure integer arithmetic; every shape is validated before anything is computed.
#include "kernels/contracts.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <ostream>
#include <stdexcept>

namespace sg {
namespace {

[[noreturn]] void bad_shape(std::string_view op, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

void check_k(std::string_view op, int K) {
  if (K < kConvMinK || K > kConvMaxK)
    bad_shape(op, fmt::format("K must be {}..{} (got K={})", kConvMinK, kConvMaxK, K));
}

void check_grid_y(std::string_view op, int64_t y, std::string_view what) {
  if (y > kMaxGridYZ) bad_shape(op, fmt::format("grid y = {} ({}) exceeds CUDA's {}", y, what, kMaxGridYZ));
}

}  // namespace

std::string to_string(const Dim3& d) { return fmt::format("({}, {}, {})", d.x, d.y, d.z); }
std::ostream& operator<<(std::ostream& os, const Dim3& d) { return os << to_string(d); }

// --- conv.update ----------------------------------------------------------------------------------

int conv_update_fast_channels(int rows, int C) {
  for (int v : kConvUpdateFastChannelChoices) {  // largest first
    if (static_cast<int64_t>(rows) * ceil_div(C, v) >= kConvUpdateFastWaveThreads) return v;
  }
  return kConvUpdateFastChannelChoices.back();
}

LaunchContract<ConvUpdateArm> conv_update_contract(ConvUpdateArm requested, const ConvUpdateShape& s) {
  constexpr std::string_view op = "conv.update";
  if (s.rows < 1) bad_shape(op, fmt::format("rows must be >= 1 (got {})", s.rows));
  if (s.C < 1) bad_shape(op, fmt::format("C must be >= 1 (got {})", s.C));
  check_k(op, s.K);
  const auto& vs = kConvUpdateFastChannelChoices;
  if (s.channels != 0 && std::find(vs.begin(), vs.end(), s.channels) == vs.end()) {
    bad_shape(op, fmt::format("channels per thread must be 0 (pick), 2, 4 or 8 (got {})", s.channels));
  }
  const auto& bs = kConvUpdateFastBlockChoices;
  if (s.block != 0 && std::find(bs.begin(), bs.end(), s.block) == bs.end()) {
    bad_shape(op, fmt::format("block must be 0 (default), 128, 256 or 512 threads (got {})", s.block));
  }
  LaunchContract<ConvUpdateArm> c;
  c.arm = requested;
  switch (requested) {
    case ConvUpdateArm::grid: {
      const int64_t n = static_cast<int64_t>(s.rows) * s.C;
      c.block = {kConvUpdateGridBlock, 1, 1};
      c.grid = {std::min<unsigned>(ceil_div(n, kConvUpdateGridBlock), kConvUpdateGridMaxBlocks), 1, 1};
      c.kernel = "conv_update_grid";
      return c;
    }
    case ConvUpdateArm::fast: {
      check_grid_y(op, s.rows, "rows");
      const int v = s.channels != 0 ? s.channels : conv_update_fast_channels(s.rows, s.C);
      const unsigned b = s.block != 0 ? static_cast<unsigned>(s.block) : kConvUpdateFastBlock;
      c.block = {b, 1, 1};
      c.grid = {ceil_div(s.C, int64_t{b} * v), static_cast<unsigned>(s.rows), 1};
      c.kernel = "conv_update_fast";
      c.per_thread = v;
      return c;
    }
  }
  throw std::invalid_argument(fmt::format("conv.update: arm index {} out of range", static_cast<int>(requested)));
}

LaunchContract<ConvUpdateArm> conv_update_contract(const ArmSelection& sel, const ConvUpdateShape& s) {
  return conv_update_contract(sel.conv_update, s);
}

// --- postconv -------------------------------------------------------------------------------------

LaunchContract<PostconvArm> postconv_contract(PostconvArm requested, const PostconvShape& s) {
  constexpr std::string_view op = "postconv";
  if (s.T < 1) bad_shape(op, fmt::format("T must be >= 1 (got {})", s.T));
  if (s.Hk < 1 || s.Hv < 1) bad_shape(op, fmt::format("Hk and Hv must be >= 1 (got Hk={}, Hv={})", s.Hk, s.Hv));
  if (s.Hv % s.Hk != 0) bad_shape(op, fmt::format("Hv must be a multiple of Hk (got Hk={}, Hv={})", s.Hk, s.Hv));
  if (s.Dk < 1 || s.Dk > kPostconvMaxD || s.Dv < 1 || s.Dv > kPostconvMaxD) {
    bad_shape(op, fmt::format("Dk and Dv must be 1..{} (got Dk={}, Dv={})", kPostconvMaxD, s.Dk, s.Dv));
  }
  check_grid_y(op, static_cast<int64_t>(s.Hk) + s.Hv, "Hk + Hv");

  LaunchContract<PostconvArm> c;
  c.arm = requested;
  if (requested == PostconvArm::token_tile && !(s.Dk == 128 && s.Dv == 128)) {
    c.arm = PostconvArm::fast;
    c.fallback_reason = fmt::format("token_tile needs Dk = Dv = 128 (got Dk={}, Dv={}): using fast", s.Dk, s.Dv);
  }
  const auto T = static_cast<unsigned>(s.T);
  const auto hk = static_cast<unsigned>(s.Hk), hv = static_cast<unsigned>(s.Hv);
  switch (c.arm) {
    case PostconvArm::megablock:
      c.grid = {T, hk + 1, 1};
      c.block = {256, 1, 1};
      c.kernel = "postconv_megablock";
      break;
    case PostconvArm::fast:
      c.grid = {T, hk + 1, 1};
      c.block = {128, 1, 1};
      c.kernel = "postconv_fast";
      break;
    case PostconvArm::split:
      c.grid = {T, hk + hv, 1};
      c.block = {128, 1, 1};
      c.kernel = "postconv_split";
      break;
    case PostconvArm::token_tile:
      c.grid = {ceil_div(s.T, kPostconvTokenTile), hk + hv, 1};
      c.block = {128, 1, 1};
      c.kernel = "postconv_token_tile";
      break;
    default:
      throw std::invalid_argument(fmt::format("postconv: arm index {} out of range", static_cast<int>(requested)));
  }
  // The kernels linearise the block index (x + y * gridDim.x) in 32-bit arithmetic.
  if (static_cast<uint64_t>(c.grid.x) * c.grid.y >= (uint64_t{1} << 31)) {
    bad_shape(op, fmt::format("{} x {} blocks exceed 2^31 (T={} too large for one launch)", c.grid.x, c.grid.y, s.T));
  }
  return c;
}

LaunchContract<PostconvArm> postconv_contract(const ArmSelection& sel, const PostconvShape& s) {
  return postconv_contract(sel.postconv, s);
}

// --- delta_rule.decode ---------------------------------------------------------------------------

int delta_rule_max_threads(int q) { return q == 1 ? 256 : q == 8 ? 1024 : 512; }

int delta_rule_decode_split(int Dk, int Dv, int requested) {
  const bool dk_ok = Dk == 8 || Dk == 16 || Dk == 32 || Dk == 64 || Dk == 128;
  if (!dk_ok || Dv < 1) return 0;
  auto fits = [&](int q) {
    const bool built = q == 1 || q == 4 || (Dk == 128 && (q == 2 || q == 8));
    return built && Dk % q == 0 && (Dv * q + 31) / 32 * 32 <= delta_rule_max_threads(q);
  };
  if (requested > 0) return fits(requested) ? requested : 0;
  // Measured on the H200 (BENCHMARKS.md): 2 threads per column beats 1 (more warps in flight) and 4
  // (the chains run in 1/Q of the lanes, so issue cost grows with Q).
  for (int q : {2, 1, 4}) {
    if (fits(q)) return q;
  }
  return 0;
}

bool delta_rule_decode_may_pair(int q, int ssm_bytes, bool norm_fused) {
  return ssm_bytes == 2 && !norm_fused && q >= 2;
}

int delta_rule_decode_col_blocks(int Dv, int q, int requested, bool may_pair) {
  if (requested > 0) return (requested == 1 || requested == 2 || requested == 4) && Dv % requested == 0 ? requested : 0;
  if (requested < 0) return 0;
  if (may_pair && Dv % 2 == 0) return 1;
  return q == 2 && Dv % 2 == 0 ? 2 : 1;
}

int delta_rule_decode_block(int Dv, int col_blocks, int q, bool pairs) {
  return (Dv / col_blocks / (pairs ? 2 : 1) * q + 31) / 32 * 32;
}

bool delta_rule_decode_staged_fits(int Dk, int Dv, int q, int ssm_bytes, bool norm_fused) {
  const bool bf16 = ssm_bytes == 2;
  return !norm_fused && (bf16 ? q == 2 && Dv % 2 == 0 : q == 1 || q == 2) &&
         delta_rule_decode_block(Dv, 1, q, bf16) <= kDeltaRuleStagedMaxThreads &&
         static_cast<int64_t>(Dk) * Dv * ssm_bytes <= kDeltaRuleStagedMaxSlab;
}

// --- gdn.decode -----------------------------------------------------------------------------------

bool gdn_decode_prep_fits(int Hk, int Hv, int Dk, int Dv, int K) {
  if (Hk < 1 || Hv < 1 || Hv % Hk != 0 || Dk < 1 || Dk > 256 || Dv < 1 || K < kConvMinK || K > kConvMaxK) return false;
  const int64_t channels = 2 * int64_t{Dk} + int64_t{Hv / Hk} * Dv;
  return channels <= int64_t{kGdnDecodePrepThreads} * kGdnDecodePrepPerThread;
}

LaunchContract<GdnDecodeArm> gdn_decode_contract(GdnDecodeArm requested, const GdnDecodeShape& s) {
  if (s.rows < 1 || s.Hk < 1 || s.Hv < 1 || s.Hv % s.Hk != 0 || s.Dk < 1 || s.Dv < 1 || s.K < kConvMinK ||
      s.K > kConvMaxK) {
    throw std::invalid_argument(
        fmt::format("gdn.decode: bad shape rows={} Hk={} Hv={} Dk={} Dv={} K={}", s.rows, s.Hk, s.Hv, s.Dk, s.Dv, s.K));
  }
  if (static_cast<unsigned>(s.rows) > kMaxGridYZ) {
    throw std::invalid_argument(fmt::format("gdn.decode: rows {} exceed the grid limit {}", s.rows, kMaxGridYZ));
  }
  LaunchContract<GdnDecodeArm> c;
  const int ratio = s.Hv / s.Hk;
  const int split = delta_rule_decode_split(s.Dk, s.Dv);
  const int auto_cb = std::max(1, delta_rule_decode_col_blocks(s.Dv, split));
  const bool may_pair = delta_rule_decode_may_pair(split, s.ssm_bytes, s.norm_fused);
  // The fused norm: one block a head (gdn_mixer.cpp).
  const int unfused_cb = s.norm_fused ? 1 : std::max(1, delta_rule_decode_col_blocks(s.Dv, split, 0, may_pair));
  // The fused arm keeps the recurrence's blocks; its cluster (the blocks of one k-head) must fit.
  const int fused_cb = ratio * auto_cb <= kGdnDecodeMaxCluster ? auto_cb : 1;
  const int fused_block = delta_rule_decode_block(s.Dv, fused_cb, split, false);
  const bool fused_ok = (s.Dk == 64 || s.Dk == 128) && (split == 1 || split == 2 || split == 4) &&
                        ratio <= kGdnDecodeMaxCluster && fused_block <= delta_rule_max_threads(split);
  c.arm = requested;
  if (requested == GdnDecodeArm::fused && !fused_ok) {
    c.arm = GdnDecodeArm::unfused;
    c.fallback_reason = fmt::format(
        "fused needs Dk in {{64, 128}}, 1, 2 or 4 threads a state column, Hv/Hk <= {} and a block within "
        "the recurrence's launch bound (got Dk={}, Dv={}, Hv/Hk={}, {} threads a column): using unfused",
        kGdnDecodeMaxCluster, s.Dk, s.Dv, ratio, split);
  }
  if (requested == GdnDecodeArm::staged &&
      !delta_rule_decode_staged_fits(s.Dk, s.Dv, split, s.ssm_bytes, s.norm_fused)) {
    c.arm = GdnDecodeArm::unfused;
    c.fallback_reason = fmt::format(
        "staged needs no gated norm in the delta rule, 1 or 2 threads a state column (2 with a bf16 state and an "
        "even Dv), at most {} threads a block and a state slab of at most {} bytes (got Dk={}, Dv={}, {} threads a "
        "column, state {} bytes an element{}): using unfused",
        kDeltaRuleStagedMaxThreads, kDeltaRuleStagedMaxSlab, s.Dk, s.Dv, split, s.ssm_bytes,
        s.norm_fused ? ", the norm fused" : "");
  }
  if (requested == GdnDecodeArm::prep && !gdn_decode_prep_fits(s.Hk, s.Hv, s.Dk, s.Dv, s.K)) {
    c.arm = GdnDecodeArm::unfused;
    c.fallback_reason = fmt::format(
        "prep needs Dk <= 256 and at most {} conv channels a k-head (2 Dk + Hv/Hk Dv; got Dk={}, Dv={}, Hv/Hk={}): "
        "using unfused",
        kGdnDecodePrepThreads * kGdnDecodePrepPerThread, s.Dk, s.Dv, ratio);
  }
  if (c.arm == GdnDecodeArm::staged) {
    // Persistent blocks: the grid is the device's (delta_rule_decode_staged_grid), not the shape's.
    c.grid = Dim3{0, 1, 1};
    c.block = Dim3{static_cast<unsigned>(delta_rule_decode_block(s.Dv, 1, split, s.ssm_bytes == 2)), 1, 1};
    c.smem_bytes = static_cast<size_t>(s.Dk) * s.Dv * s.ssm_bytes;
    c.kernel = "delta_rule_decode_staged";
    return c;
  }
  const int cb = c.arm == GdnDecodeArm::fused ? fused_cb : unfused_cb;
  c.grid = Dim3{static_cast<unsigned>(s.Hv * cb), static_cast<unsigned>(s.rows), 1};
  const bool pairs = (c.arm == GdnDecodeArm::unfused || c.arm == GdnDecodeArm::prep) && may_pair &&
                     (s.Dv / cb) % 2 == 0;  // delta_rule.h
  c.block = Dim3{static_cast<unsigned>(delta_rule_decode_block(s.Dv, cb, std::max(1, split), pairs)), 1, 1};
  if (c.arm == GdnDecodeArm::fused) {
    c.cluster = Dim3{static_cast<unsigned>(ratio * cb), 1, 1};
    // qraw, kraw, qs, ks [Dk] + the two trees [2 * Dk] + the block's v columns [Dv / cb]
    c.smem_bytes = sizeof(float) * (6 * static_cast<size_t>(s.Dk) + static_cast<size_t>(s.Dv / cb));
    c.kernel = "gdn_decode_fused";
  } else {
    c.kernel = c.arm == GdnDecodeArm::prep ? "gdn_decode_prep+delta_rule_decode" : "delta_rule_decode";
  }
  return c;
}

// --- gdn.prefill ----------------------------------------------------------------------------------

bool gdn_prefill_fused_supports(int Dk, int Dv, int K) {
  return Dk == kGdnPrefillGroupChannels && Dv >= 8 && Dv <= kPostconvMaxD && Dv % 8 == 0 && K >= kConvMinK &&
         K <= kConvMaxK;
}

int gdn_prefill_conv_blocks_per_tile(int Hk, int Hv, int Dv) {
  const int64_t groups = 2 * int64_t{Hk} + (int64_t{Hv} * Dv + kGdnPrefillGroupChannels - 1) / kGdnPrefillGroupChannels;
  return static_cast<int>((groups + kGdnPrefillGroupsPerBlock - 1) / kGdnPrefillGroupsPerBlock);
}

LaunchContract<GdnPrefillArm> gdn_prefill_contract(GdnPrefillArm requested, const GdnPrefillShape& s) {
  constexpr std::string_view op = "gdn.prefill";
  if (s.max_tokens < 1) bad_shape(op, fmt::format("max_tokens must be >= 1 (got {})", s.max_tokens));
  if (s.max_seqs < 1) bad_shape(op, fmt::format("max_seqs must be >= 1 (got {})", s.max_seqs));
  if (s.Hk < 1 || s.Hv < 1) bad_shape(op, fmt::format("Hk and Hv must be >= 1 (got Hk={}, Hv={})", s.Hk, s.Hv));
  if (s.Hv % s.Hk != 0) bad_shape(op, fmt::format("Hv must be a multiple of Hk (got Hk={}, Hv={})", s.Hk, s.Hv));
  if (s.Dk < 1 || s.Dv < 1) bad_shape(op, fmt::format("Dk and Dv must be >= 1 (got Dk={}, Dv={})", s.Dk, s.Dv));
  check_k(op, s.K);
  const int64_t C = 2 * int64_t{s.Hk} * s.Dk + int64_t{s.Hv} * s.Dv;
  if (C > std::numeric_limits<int32_t>::max()) bad_shape(op, fmt::format("C = 2*Hk*Dk + Hv*Dv = {} exceeds int32", C));
  if (requested != GdnPrefillArm::unfused && requested != GdnPrefillArm::fused) {
    throw std::invalid_argument(fmt::format("gdn.prefill: arm index {} out of range", static_cast<int>(requested)));
  }

  LaunchContract<GdnPrefillArm> c;
  c.arm = requested;
  if (requested == GdnPrefillArm::fused && !gdn_prefill_fused_supports(s.Dk, s.Dv, s.K)) {
    c.arm = GdnPrefillArm::unfused;
    c.fallback_reason =
        fmt::format("fused needs Dk = {} and Dv a multiple of 8 in 8..{} (got Dk={}, Dv={}): using unfused",
                    kGdnPrefillGroupChannels, kPostconvMaxD, s.Dk, s.Dv);
  }
  if (c.arm == GdnPrefillArm::unfused) {
    c.grid = {0, 0, 0};
    c.block = {0, 0, 0};
    return c;
  }
  const int64_t tiles = (int64_t{s.max_tokens} + kGdnPrefillTileTokens - 1) / kGdnPrefillTileTokens;
  const int64_t blocks = tiles * (gdn_prefill_conv_blocks_per_tile(s.Hk, s.Hv, s.Dv) + 1);
  // The kernel reads its block index as a 32-bit int.
  if (blocks >= (int64_t{1} << 31)) {
    bad_shape(op, fmt::format("{} blocks exceed 2^31 (max_tokens={} too large for one launch)", blocks, s.max_tokens));
  }
  c.grid = {static_cast<unsigned>(blocks), 1, 1};
  c.block = {kGdnPrefillBlock, 1, 1};
  c.kernel = "gdn_prefill_fused";
  return c;
}

LaunchContract<GdnPrefillArm> gdn_prefill_contract(const ArmSelection& sel, const GdnPrefillShape& s) {
  return gdn_prefill_contract(sel.gdn_prefill, s);
}

// --- conv.fwd -------------------------------------------------------------------------------------

std::vector<ConvChunk> build_conv_chunks(const std::vector<int32_t>& cu_seqlens, int chunk_tokens) {
  if (chunk_tokens < 1)
    throw std::invalid_argument(fmt::format("conv chunks: chunk_tokens must be >= 1 (got {})", chunk_tokens));
  if (cu_seqlens.empty()) throw std::invalid_argument("conv chunks: cu_seqlens is empty (needs at least {0})");
  if (cu_seqlens[0] != 0)
    throw std::invalid_argument(fmt::format("conv chunks: cu_seqlens[0] must be 0 (got {})", cu_seqlens[0]));
  std::vector<ConvChunk> out;
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const int32_t b = cu_seqlens[s], e = cu_seqlens[s + 1];
    if (e < b) {
      throw std::invalid_argument(fmt::format("conv chunks: cu_seqlens decreases at {} ({} then {})", s + 1, b, e));
    }
    for (int64_t t = b; t < e; t += chunk_tokens) {
      const auto len = static_cast<int32_t>(std::min<int64_t>(chunk_tokens, e - t));
      out.push_back(ConvChunk{static_cast<int32_t>(s), static_cast<int32_t>(t), len});
    }
  }
  return out;
}

int conv_max_chunks(int max_tokens, int max_seqs, int chunk_tokens) {
  if (max_tokens < 0 || max_seqs < 0 || chunk_tokens < 1) {
    throw std::invalid_argument(
        fmt::format("conv_max_chunks: need max_tokens >= 0, max_seqs >= 0, chunk_tokens >= 1 "
                    "(got {}, {}, {})",
                    max_tokens, max_seqs, chunk_tokens));
  }
  const int64_t m = std::min(max_seqs, max_tokens);  // most non-empty sequences
  if (m == 0) return 0;                              // no sequence (or no token): nothing to chunk
  return static_cast<int>((max_tokens + static_cast<int64_t>(chunk_tokens - 1) * m) / chunk_tokens);
}

int conv_fwd_channel_tile(ConvFwdArm arm) {
  switch (arm) {
    case ConvFwdArm::tiled: return kConvTiledChannels;
    case ConvFwdArm::reg: return 128;
    case ConvFwdArm::k4: return 128;
    case ConvFwdArm::k4x2: return 256;
  }
  throw std::invalid_argument(fmt::format("conv.fwd: arm index {} out of range", static_cast<int>(arm)));
}

LaunchContract<ConvFwdArm> conv_fwd_contract(ConvFwdArm requested, ConvChunksArm chunks, const ConvFwdShape& s) {
  constexpr std::string_view op = "conv.fwd";
  if (s.max_tokens < 1) bad_shape(op, fmt::format("max_tokens must be >= 1 (got {})", s.max_tokens));
  if (s.max_seqs < 1) bad_shape(op, fmt::format("max_seqs must be >= 1 (got {})", s.max_seqs));
  if (s.C < 1) bad_shape(op, fmt::format("C must be >= 1 (got {})", s.C));
  check_k(op, s.K);
  if (chunks != ConvChunksArm::exact && chunks != ConvChunksArm::whole) {
    throw std::invalid_argument(fmt::format("conv.chunks: arm index {} out of range", static_cast<int>(chunks)));
  }

  LaunchContract<ConvFwdArm> c;
  c.arm = requested;
  if ((requested == ConvFwdArm::k4 || requested == ConvFwdArm::k4x2) && s.K != 4) {
    c.arm = ConvFwdArm::reg;
    c.fallback_reason = fmt::format("{} needs K = 4 (got K={}): using register", arm_name(requested), s.K);
  }
  const int tile = conv_fwd_channel_tile(c.arm);  // also rejects an out-of-range arm

  int64_t y = 0;
  if (chunks == ConvChunksArm::exact) {
    y = conv_max_chunks(s.max_tokens, s.max_seqs, kConvChunkTokens);
    check_grid_y(op, y, "worst-case exact chunks");
  } else {
    y = s.max_seqs;
    check_grid_y(op, y, "max_seqs");
  }
  c.grid = {ceil_div(s.C, tile), static_cast<unsigned>(y), 1};

  static constexpr std::array<std::array<std::string_view, 2>, 4> kNames{{
      {"conv_fwd_tiled_exact", "conv_fwd_tiled_whole"},
      {"conv_fwd_register_exact", "conv_fwd_register_whole"},
      {"conv_fwd_k4_exact", "conv_fwd_k4_whole"},
      {"conv_fwd_k4x2_exact", "conv_fwd_k4x2_whole"},
  }};
  c.kernel = kNames[static_cast<size_t>(c.arm)][static_cast<size_t>(chunks)];

  if (c.arm == ConvFwdArm::tiled) {
    c.block = {kConvTiledChannels, kConvTiledTokenLanes, 1};
    c.smem_bytes = static_cast<size_t>(kConvTiledTokens + s.K - 1) * kConvTiledChannels * sizeof(float);
  } else {
    c.block = {128, 1, 1};  // register and k4: one channel per thread; k4x2: two per thread
  }
  return c;
}

LaunchContract<ConvFwdArm> conv_fwd_contract(const ArmSelection& sel, const ConvFwdShape& s) {
  return conv_fwd_contract(sel.conv_fwd, sel.conv_chunks, s);
}

}  // namespace sg
