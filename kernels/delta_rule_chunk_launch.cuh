// delta_rule_chunk_launch.cuh: the launcher body the chunked delta-rule prefill kernels share
// (delta_rule_prefill_chunked.cu, delta_rule_prefill_mma.cu): both are built for the same
// (Dk, Dv tile) pairs, take the same checks, and launch grid (ceil(Dv / BV) * Hv, max_seqs).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/delta_rule_prefill.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg::chunk_launch {

// Calls f(integral_constant DK, integral_constant BV) for the built pairs (those with a nonzero
// delta_rule_prefill_chunked_smem, delta_rule_prefill_shapes.h); false when not built.
template <typename F>
bool with_tile(int Dk, int bv, F&& f) {
  auto call = [&](auto dk, auto tile) {
    f(dk, tile);
    return true;
  };
  using std::integral_constant;
  switch (Dk * 1000 + bv) {
    case 32032: return call(integral_constant<int, 32>{}, integral_constant<int, 32>{});
    case 32064: return call(integral_constant<int, 32>{}, integral_constant<int, 64>{});
    case 32128: return call(integral_constant<int, 32>{}, integral_constant<int, 128>{});
    case 64032: return call(integral_constant<int, 64>{}, integral_constant<int, 32>{});
    case 64064: return call(integral_constant<int, 64>{}, integral_constant<int, 64>{});
    case 64128: return call(integral_constant<int, 64>{}, integral_constant<int, 128>{});
    case 128032: return call(integral_constant<int, 128>{}, integral_constant<int, 32>{});
    case 128064: return call(integral_constant<int, 128>{}, integral_constant<int, 64>{});
    case 128128: return call(integral_constant<int, 128>{}, integral_constant<int, 128>{});
    default: return false;
  }
}

// One launch of `kernel` (threads a block, `bytes` of dynamic shared memory) for Dv tiles of BV, on
// max_seqs + extra_rows rows of blocks.
template <int BV>
cudaError_t launch(void (*kernel)(DeltaRulePrefillParams, bool), int threads, size_t bytes,
                   const DeltaRulePrefillParams& p, bool vec, cudaStream_t stream, int extra_rows = 0) {
  if (const cudaError_t err = dev::allow_dynamic_smem(kernel, bytes); err != cudaSuccess) return err;
  const int tiles = (p.Dv + BV - 1) / BV;
  const dim3 grid(static_cast<unsigned>(tiles * p.Hv), static_cast<unsigned>(p.max_seqs + extra_rows));
  launch_kernel(kernel, grid, dim3(static_cast<unsigned>(threads)), bytes, stream, p, vec);
  return cudaGetLastError();
}

// The launcher's body: the checks (`what` names the form in a refusal), the tile (dv_tile 0 =
// automatic), the vector path, then launch_tile(dk, bv, vec) for the built pair.
template <typename LaunchTile>
cudaError_t checked_launch(const char* what, const DeltaRulePrefillParams& p, int dv_tile, LaunchTile&& launch_tile) {
  LaunchCheck chk(what);
  // The mma form is built for the same shapes and tiles (delta_rule_prefill_shapes.h).
  chk.require(delta_rule_prefill_chunked_supports(p.Dk, p.Dv), "the form is not built for this Dk, Dv");
  check_delta_rule_prefill_params(chk, p);
  chk.require(dv_tile == 0 || dv_tile == 32 || dv_tile == 64 || dv_tile == 128, "dv_tile must be 0, 32, 64 or 128");
  if (!chk.ok()) return cudaErrorInvalidValue;
  const int bv = dv_tile == 0 ? delta_rule_prefill_chunked_tile(p.Dv) : dv_tile;
  chk.require(static_cast<int64_t>((p.Dv + bv - 1) / bv) * p.Hv <= 0x7fffffff, "Dv / tile x Hv blocks exceed the grid");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.max_seqs == 0) return cudaSuccess;
  // Vector words: groups of 4 elements at element offsets that are multiples of 4 (Dv % 4 == 0) from
  // 16-byte aligned bases, so 16 bytes for f32 and 8 bytes for bf16 (q, k, v, out, and the state
  // in state_dtype) are always aligned.
  const bool vec = p.Dv % 4 == 0 && dev::aligned16(p.q) && dev::aligned16(p.k) && dev::aligned16(p.v) &&
                   dev::aligned16(p.out) && dev::aligned16(p.state);
  cudaError_t err = cudaErrorInvalidValue;
  const bool built = with_tile(p.Dk, bv, [&](auto dk, auto tile) { err = launch_tile(dk, tile, vec); });
  chk.require(built, "no built tile for this Dk and Dv tile");
  return err;
}

}  // namespace sg::chunk_launch
