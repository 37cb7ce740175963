// op_bytes.h: the bytes each GDN op must move, the numbers beside every time (the floor is bytes
// over 4.3 TB/s): each input read once, each output written once, a state the op updates read and
// written, per launch. One function per op, used by the model step's node labels (manifests,
// `stepgraph bench`, `inspect`) and by `stepgraph kernels`, so both tools compute the fraction of
// the floor from the same bytes. Pure arithmetic; `es` is the activation dtype's size in bytes,
// weights of the conv and the gates (A_log, dt_bias) are f32, g and beta f32; `ssm_es` is the SSM
// (recurrent) state's element size (4 for f32, the default setting, 2 for bf16).
#pragma once
#include <cstddef>

namespace sg::op_bytes {

// conv.update: x in and out [rows, C], the conv state [rows, C, K-1] read and written (`state_es`
// its dtype's size), the weights [C, K] f32.
double conv_update(int rows, int C, int K, size_t es, size_t state_es);
// conv.fwd over `tokens` packed tokens of `seqs` sequences: x in and out [tokens, C], each
// sequence's final state written and, when `reads_state` (a batch that may carry history), its
// initial state read; the weights f32.
double conv_fwd(int tokens, int seqs, int C, int K, size_t es, size_t state_es, bool reads_state);
// postconv over `rows` rows: the conv output [rows, C] in, q, k, v (C values) out, a and b
// [rows, Hv] in, g and beta [rows, Hv] f32 out, A_log and dt_bias [Hv] f32.
double postconv(int rows, int Hk, int Hv, int Dk, int Dv, size_t es);
// gdn.prefill=fused: conv.fwd and postconv without the conv output between them.
double gdn_prefill_fused(int tokens, int seqs, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es,
                         bool reads_state);
// The gated delta rule over `rows` token rows and `state_seqs` states: q, k [rows, Hk, Dk], v and
// the output [rows, Hv, Dv], g and beta [rows, Hv] f32, each state [Hv, Dk, Dv] read and written.
double delta_rule(int rows, int state_seqs, int Hk, int Hv, int Dk, int Dv, size_t es, size_t ssm_es);
// gdn.decode=fused: conv.update, postconv and the delta rule for one token a row, without their
// intermediates: x and a, b in, conv and SSM states read and written, weights and gates, output.
double gdn_decode_fused(int rows, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es, size_t ssm_es);
// The prep arm's conv + post-conv kernel (gdn_decode_prep.h): conv.update and postconv less the
// conv output they pass between them (written and read back).
double gdn_decode_prep(int rows, int Hk, int Hv, int Dk, int Dv, int K, size_t es, size_t state_es);
// gated_rmsnorm: x, z in and y out [rows, heads, n], the weight [n] (`w_es` its dtype's size).
double gated_rmsnorm(int rows, int heads, int n, size_t es, size_t w_es);
// The gated RMSNorm in the delta rule's epilogue (delta_rule.h), beyond the delta rule's own
// bytes: z read and the weight; the output is the delta rule's, written once.
double fused_gated_norm(int rows, int heads, int n, size_t es, size_t w_es);

// delta_rule.prefill's matrix products in the chunked WY form (docs/MODEL.md step 4), 2 FLOPs a
// multiply-add, for one sequence of `len` tokens and Hv v-heads, summed over its 64-token chunks
// (L tokens each, the last one shorter), causal products counted on their triangle:
//   P = q K^T and A = k K^T: 2 Dk L^2;  O = q S and X = k S: 4 L Dk Dv;  V' = T X and o += P V':
//   2 Dv L (L + 1);  S += K^T (L V'): 2 L Dk Dv.
// The inverse T = (I + A)^-1 (about L^3 / 3 on the CUDA cores) and the gates are not counted.
// Not bytes: the delta rule's FLOPs floor (at 790 TFLOP/s) is above its bytes floor in prefill.
double delta_rule_wy_flops(long long len, int Hv, int Dk, int Dv);

// The query-key pairs causal attention computes for one sequence's `prompt` new tokens after
// `history` tokens in its cache: token i of the prompt sees the history and itself and the i tokens
// before it, prompt history + prompt (prompt + 1) / 2 in all (a pair costs 4 Hq D FLOPs: q K^T
// and P V). Not bytes either.
double causal_pairs(long long prompt, long long history);

}  // namespace sg::op_bytes
