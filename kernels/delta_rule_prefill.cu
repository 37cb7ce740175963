// delta_rule_prefill.cu: the gated delta rule's prefill as the reference-exact sequential scan
// (see delta_rule_prefill.h). Per (v-head, sequence) program: the state column of each thread group
// stays in registers across the sequence's tokens; per token the arithmetic is that of
// dev::delta_rule_step (delta_rule_device.cuh), the function the decode step uses.
#include "kernels/contracts.h"
#include "kernels/delta_rule_device.cuh"
#include "kernels/delta_rule_prefill.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

// Grid (Hv, max_seqs); block round_up(Dv * Q, 32): Q consecutive threads share column j = t / Q.
// Every early exit is uniform over the block (it depends on the sequence only), so the barriers
// and the full-warp shuffles always see every thread.
// Registers: the decode kernel's thread bounds, with minBlocks = 1 so ptxas may use the whole
// per-thread budget (without it, it capped some instances low and spilled). ptxas -v (sm_90, CUDA
// 13.0): no spills except Dk = 128 with split 1 (128 state registers in a 255-register budget;
// ~190 bytes, the decode kernel spills there too); the automatic split never picks it for Dv <= 256.
// ST: the state's element type (float or __nv_bfloat16, p.state_dtype): read widened once, the
// final state rounded once.
template <int DK, int Q, typename ST>
__global__ void __launch_bounds__(Q == 1   ? 256
                                  : Q == 8 ? 1024
                                           : 512,
                                  1) delta_rule_prefill_kernel(const DeltaRulePrefillParams p) {
  pdl_start();  // kernels/launch.cuh
  constexpr int R = DK / Q;
  __shared__ float ks[2][DK], qs[2][DK];
  const int hv = blockIdx.x, n = blockIdx.y;
  if (n >= *p.n_seqs) return;  // before reading cu_seqlens: it may hold only live + 1 entries
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  if (e <= b) return;  // zero-length: no output, no state access
  const int slot = p.slots[n];
  const int Hv = p.Hv, Dv = p.Dv;
  if (slot < 0) {  // padding: zero output rows, state untouched
    for (int64_t t = b; t < e; ++t) {
      for (int jj = threadIdx.x; jj < Dv; jj += blockDim.x)
        dev::store(p.out, p.out_dtype, (t * Hv + hv) * Dv + jj, 0.0f);
    }
    return;
  }
  const bool hist = p.has_history[n] != 0;
  const int hk = hv / (Hv / p.Hk);
  const int Hk = p.Hk;
  const int j = threadIdx.x / Q;
  const bool active = j < Dv;
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  ST* S = static_cast<ST*>(p.state) + (static_cast<int64_t>(slot) * Hv + hv) * DK * Dv + (active ? j : 0);  // column j

  // The state column, read once (never without history).
  float s[R];
  dev::load_column<DK, Q>(s, S, Dv, active && hist);

  // Token b's q (scaled) and k into buffer 0; its v, g, beta into registers. Offsets of token t:
  // qk = (t * Hk + hk) * DK, vo = (t * Hv + hv) * Dv (+ j), gb = t * Hv + hv.
  const int64_t qk_step = static_cast<int64_t>(Hk) * DK, v_step = static_cast<int64_t>(Hv) * Dv;
  int64_t qk = (b * Hk + hk) * DK, vo = (b * Hv + hv) * Dv + (active ? j : 0), gb = b * Hv + hv;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    ks[0][i] = dev::load(p.k, p.qkv_dtype, qk + i);
    qs[0][i] = dev::load(p.q, p.qkv_dtype, qk + i) * scale;
  }
  float v_cur = active ? dev::load(p.v, p.qkv_dtype, vo) : 0.0f;
  float g_cur = p.g[gb], beta_cur = p.beta[gb];
  __syncthreads();

  const int tid = threadIdx.x;
  for (int64_t t = b; t < e; ++t) {
    const int buf = static_cast<int>((t - b) & 1);
    const bool more = t + 1 < e;
    const int64_t qk1 = qk + qk_step, vo1 = vo + v_step, gb1 = gb + Hv;
    // Issue the next token's loads before computing this one (their latency hides behind the
    // chains): element tid of its q and k (every element when the block has >= DK threads, the
    // usual case), its v, g and beta.
    float kn = 0.0f, qn = 0.0f, v_n = 0.0f, g_n = 0.0f, beta_n = 0.0f;
    if (more) {
      if (tid < DK) {
        kn = dev::load(p.k, p.qkv_dtype, qk1 + tid);
        qn = dev::load(p.q, p.qkv_dtype, qk1 + tid);
      }
      if (active) v_n = dev::load(p.v, p.qkv_dtype, vo1);
      g_n = p.g[gb1];
      beta_n = p.beta[gb1];
    }
    const float decay = expf(g_cur);
    const float o = dev::delta_rule_step<DK, Q>(s, ks[buf], qs[buf], decay, beta_cur, v_cur);
    if (active && tid % Q == 0) dev::store(p.out, p.out_dtype, vo, o);
    // The other buffer was last read for token t - 1, before the previous barrier: safe to refill.
    if (more) {
      if (tid < DK) {
        ks[buf ^ 1][tid] = kn;
        qs[buf ^ 1][tid] = qn * scale;
      }
      // Blocks with fewer than DK threads (small Dv * Q): the rest of q and k, loaded now.
      for (int i = tid + blockDim.x; i < DK; i += blockDim.x) {
        ks[buf ^ 1][i] = dev::load(p.k, p.qkv_dtype, qk1 + i);
        qs[buf ^ 1][i] = dev::load(p.q, p.qkv_dtype, qk1 + i) * scale;
      }
    }
    __syncthreads();  // buffer buf ^ 1 is complete; buffer buf is free for token t + 2
    qk = qk1;
    vo = vo1;
    gb = gb1;
    v_cur = v_n;
    g_cur = g_n;
    beta_cur = beta_n;
  }

  // The final state column, written once.
  dev::store_column<DK, Q>(s, S, Dv, active);
}

template <int DK, int Q, typename ST>
void launch(const DeltaRulePrefillParams& p, cudaStream_t stream) {
  const dim3 grid(p.Hv, p.max_seqs), block((p.Dv * Q + 31) / 32 * 32);
  launch_kernel(delta_rule_prefill_kernel<DK, Q, ST>, grid, block, 0, stream, p);
}

}  // namespace

void check_delta_rule_prefill_params(LaunchCheck& chk, const DeltaRulePrefillParams& p) {
  chk.in_range(p.Hk, 1, INT32_MAX, "Hk").in_range(p.Hv, 1, INT32_MAX, "Hv");
  chk.require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.in_range(p.max_seqs, 0, kMaxGridYZ, "max_seqs");
  chk.not_null(p.q, "q").not_null(p.k, "k").not_null(p.v, "v").not_null(p.g, "g").not_null(p.beta, "beta");
  chk.not_null(p.cu_seqlens, "cu_seqlens").not_null(p.slots, "slots").not_null(p.has_history, "has_history");
  chk.not_null(p.n_seqs, "n_seqs").not_null(p.state, "state").not_null(p.out, "out");
  chk.require((p.qkv_dtype == DType::f32 || p.qkv_dtype == DType::bf16) &&
                  (p.out_dtype == DType::f32 || p.out_dtype == DType::bf16),
              "qkv_dtype and out_dtype must be bf16 or f32");
  chk.require(p.state_dtype == DType::f32 || p.state_dtype == DType::bf16, "state_dtype must be f32 or bf16");
}

void refuse_delta_rule_prefill_norm(LaunchCheck& chk, const DeltaRulePrefillParams& p) {
  chk.require(p.norm_w == nullptr, "a fused output norm (norm_w) is built only in the mma form");
}

cudaError_t delta_rule_prefill(const DeltaRulePrefillParams& p, cudaStream_t stream) {
  LaunchCheck chk("delta_rule.prefill");
  chk.require(delta_rule_prefill_supports(p.Dk, p.Dv), "no built tile for this Dk, Dv");
  check_delta_rule_prefill_params(chk, p);
  refuse_delta_rule_prefill_norm(chk, p);
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.max_seqs == 0) return cudaSuccess;
  const int q = delta_rule_decode_split(p.Dk, p.Dv, p.split);
  chk.require(q != 0, "split: not a built split for this Dk, Dv (1, 2, 4 or 8; 0 = automatic)");
  if (!chk.ok()) return cudaErrorInvalidValue;
  bool typed = false;
  const bool built = dev::with_delta_rule_tile(p.Dk, q, [&](auto dk, auto qq) {
    typed = dev::with_state_type(
        p.state_dtype, [&](auto st) { launch<decltype(dk)::value, decltype(qq)::value, decltype(st)>(p, stream); });
  });
  chk.require(typed || !built, "state_dtype must be f32 or bf16");
  chk.require(built, "no built tile for this Dk and split");
  if (!built || !typed) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace sg
