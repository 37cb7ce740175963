// op_bytes.cpp: see op_bytes.h.
#include "kernels/op_bytes.h"

namespace sg::op_bytes {
namespace {
constexpr double kF32 = 4.0;
double conv_channels(int Hk, int Hv, int Dk, int Dv) { return 2.0 * Hk * Dk + double(Hv) * Dv; }
}  // namespace

double conv_update(int rows, int C, int K, size_t es, size_t state_es) {
  return 2.0 * rows * C * es + 2.0 * rows * C * (K - 1) * state_es + kF32 * C * K;
}

double conv_fwd(int tokens, int seqs, int C, int K, size_t es, size_t state_es, bool reads_state) {
  const double state = double(seqs) * C * (K - 1) * state_es;
  return 2.0 * tokens * C * es + (reads_state ? 2.0 : 1.0) * state + kF32 * C * K;
}

double postconv(int rows, int Hk, int Hv, int Dk, int Dv, size_t es) {
  const double C = conv_channels(Hk, Hv, Dk, Dv);
  return 2.0 * rows * C * es + 2.0 * rows * Hv * es + 2.0 * kF32 * rows * Hv + 2.0 * kF32 * Hv;
}

double gdn_prefill_fused(int tokens, int seqs, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es,
                         bool reads_state) {
  const int C = static_cast<int>(conv_channels(Hk, Hv, Dk, Dv));
  // Both ops' bytes less the conv output the fused kernel never stores (written by conv, read by postconv).
  return conv_fwd(tokens, seqs, C, K, es, state_es, reads_state) + postconv(tokens, Hk, Hv, Dk, Dv, es) -
         2.0 * tokens * C * es;
}

double delta_rule(int rows, int state_seqs, int Hk, int Hv, int Dk, int Dv, size_t es, size_t ssm_es) {
  const double io = double(rows) * (2.0 * Hk * Dk + 2.0 * Hv * Dv) * es + 2.0 * kF32 * rows * Hv;
  return io + 2.0 * double(ssm_es) * state_seqs * Hv * double(Dk) * Dv;
}

double gdn_decode_fused(int rows, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es, size_t ssm_es) {
  const int C = static_cast<int>(conv_channels(Hk, Hv, Dk, Dv));
  // conv.update + postconv + delta rule, less the intermediates the fused kernel keeps on chip:
  // the conv output (written and read) and q, k, v, g, beta (written and read).
  const double qkv = double(rows) * C * es, gates = 2.0 * kF32 * rows * Hv;
  return conv_update(rows, C, K, es, state_es) + postconv(rows, Hk, Hv, Dk, Dv, es) +
         delta_rule(rows, rows, Hk, Hv, Dk, Dv, es, ssm_es) - 2.0 * (qkv + qkv + gates);
}

double gdn_decode_prep(int rows, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es) {
  const int C = static_cast<int>(conv_channels(Hk, Hv, Dk, Dv));
  return conv_update(rows, C, K, es, state_es) + postconv(rows, Hk, Hv, Dk, Dv, es) - 2.0 * rows * C * es;
}

double gated_rmsnorm(int rows, int heads, int n, size_t es, size_t w_es) {
  return 3.0 * rows * heads * double(n) * es + double(n) * w_es;
}

double fused_gated_norm(int rows, int heads, int n, size_t es, size_t w_es) {
  return double(rows) * heads * double(n) * es + double(n) * w_es;
}

double delta_rule_wy_flops(long long len, int Hv, int Dk, int Dv) {
  double f = 0;
  for (long long c0 = 0; c0 < len; c0 += 64) {
    const double L = static_cast<double>(len - c0 < 64 ? len - c0 : 64);
    f += 2.0 * Dk * L * L + 6.0 * L * Dk * Dv + 2.0 * Dv * L * (L + 1.0);
  }
  return f * Hv;
}

double causal_pairs(long long prompt, long long history) {
  const double n = static_cast<double>(prompt);
  return n * static_cast<double>(history) + n * (n + 1.0) / 2.0;
}

}  // namespace sg::op_bytes
