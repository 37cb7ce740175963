// CPU tests of the per-op byte counts (kernels/op_bytes.h) that the model step's node labels and
// `stepgraph kernels` share: the 4B standard shapes against the bytes the floors in
// docs/BENCHMARKS.md were computed from, by hand here, and the fused ops as their parts less the
// intermediates they keep on chip.
#include "kernels/op_bytes.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("op bytes: the 4B decode-b32 shapes", "[op_bytes]") {
  // conv.update: x and out [32, 8192] bf16, state [32, 8192, 3] bf16 read and written, w [8192, 4] f32.
  CHECK(op_bytes::conv_update(32, 8192, 4, 2, 2) == 2.0 * 32 * 8192 * 2 + 2.0 * 32 * 8192 * 3 * 2 + 4.0 * 8192 * 4);
  CHECK(op_bytes::conv_update(32, 8192, 4, 2, 2) == 4325376.0);  // the 4.33 MB of the conv.update rows
  // postconv: conv in + q, k, v out (C values a row), a and b in, g and beta out f32, A_log and dt_bias f32.
  CHECK(op_bytes::postconv(32, 16, 32, 128, 128, 2) == 1061120.0);  // 1.06 MB
  // delta rule: q, k [32, 16, 128], v and out [32, 32, 128] bf16, g and beta f32, 32 states of 2 MB read and written.
  CHECK(op_bytes::delta_rule(32, 32, 16, 32, 128, 128, 2, 4) ==
        32.0 * (2 * 16 * 128 + 2 * 32 * 128) * 2 + 8.0 * 32 * 32 + 8.0 * 32 * 32 * 128 * 128);
  // With a bf16 state (the ssm-state setting) the states' bytes halve, nothing else changes.
  CHECK(op_bytes::delta_rule(32, 32, 16, 32, 128, 128, 2, 4) - op_bytes::delta_rule(32, 32, 16, 32, 128, 128, 2, 2) ==
        4.0 * 32 * 32 * 128 * 128);
  // gdn.decode fused: 138.3 MB (the gdn.decode rows).
  CHECK(op_bytes::gdn_decode_fused(32, 16, 32, 128, 128, 4, 2, 2, 4) == 138285312.0);
  // Counted by hand on the 4B's GDN layer (C = 2 x 16 x 128 + 32 x 128 = 8192 channels, bf16):
  // gdn.prefill fused over 32 x 1024 tokens, no state read: x read and q, k, v written (2 x 32768 x
  // 8192 x 2), a and b read (2 x 32768 x 32 x 2), g and beta written in f32 (2 x 4 x 32768 x 32),
  // the conv state written (32 x 8192 x 3 x 2), the conv weights in f32 (4 x 8192 x 4), A_log and
  // dt_bias (2 x 4 x 32).
  CHECK(op_bytes::gdn_prefill_fused(32768, 32, 16, 32, 128, 128, 4, 2, 2, false) ==
        1073741824.0 + 4194304 + 8388608 + 1572864 + 131072 + 256);
  // The prep arm's conv + post-conv at 32 rows: x read and q, k, v written (2 x 32 x 8192 x 2), the
  // conv state read and written (2 x 32 x 8192 x 3 x 2), the weights, a and b, g and beta, A_log and dt_bias.
  CHECK(op_bytes::gdn_decode_prep(32, 16, 32, 128, 128, 4, 2, 2) == 1048576.0 + 3145728 + 131072 + 4096 + 8192 + 256);
  CHECK(op_bytes::gdn_decode_fused(32, 16, 32, 128, 128, 4, 2, 2, 4) -
            op_bytes::gdn_decode_fused(32, 16, 32, 128, 128, 4, 2, 2, 2) ==
        4.0 * 32 * 32 * 128 * 128);
  CHECK(op_bytes::gated_rmsnorm(32, 32, 128, 2, 2) == 3.0 * 32 * 32 * 128 * 2 + 128 * 2);
  // In the delta rule's epilogue: z and the weight only (the delta rule writes its output once).
  CHECK(op_bytes::fused_gated_norm(32, 32, 128, 2, 4) == 32.0 * 32 * 128 * 2 + 128 * 4);
}

TEST_CASE("op bytes: the 4B prefill-32x1024 shapes", "[op_bytes]") {
  const int T = 32 * 1024;
  // conv.fwd without history: x in, out written, each sequence's final state written: 1.075 GB.
  CHECK(op_bytes::conv_fwd(T, 32, 8192, 4, 2, 2, false) == 2.0 * T * 8192 * 2 + 32.0 * 8192 * 3 * 2 + 4.0 * 8192 * 4);
  // With history the initial states are read as well.
  CHECK(op_bytes::conv_fwd(T, 32, 8192, 4, 2, 2, true) - op_bytes::conv_fwd(T, 32, 8192, 4, 2, 2, false) ==
        32.0 * 8192 * 3 * 2);
  CHECK(op_bytes::postconv(T, 16, 32, 128, 128, 2) == 2.0 * T * 8192 * 2 + 2.0 * T * 32 * 2 + 8.0 * T * 32 + 8.0 * 32);
}

TEST_CASE("op bytes: the delta rule's WY-form FLOPs", "[op_bytes]") {
  // A full 64-token chunk and head at Dk = Dv = 128: 2 Dk L^2 + 6 L Dk Dv + 2 Dv L (L + 1).
  const double chunk = 2.0 * 128 * 64 * 64 + 6.0 * 64 * 128 * 128 + 2.0 * 128 * 64 * 65;
  CHECK(chunk == 8404992.0);
  CHECK(op_bytes::delta_rule_wy_flops(64, 1, 128, 128) == chunk);
  // The 4B layer's prefill of 32 x 1024 tokens: 16 chunks a sequence, 32 v-heads; 24 GDN layers
  // make about 3.3 TFLOP, 4.2 ms at 790 TFLOP/s.
  CHECK(32 * op_bytes::delta_rule_wy_flops(1024, 32, 128, 128) == 32.0 * 16 * 32 * chunk);
  CHECK(24 * 32 * op_bytes::delta_rule_wy_flops(1024, 32, 128, 128) / 790e12 == Approx(4.19e-3).epsilon(0.01));
  // A shorter last chunk counts its own L: 70 tokens are a chunk of 64 and one of 6.
  const double six = 2.0 * 128 * 36 + 6.0 * 6 * 128 * 128 + 2.0 * 128 * 6 * 7;
  CHECK(op_bytes::delta_rule_wy_flops(70, 2, 128, 128) == 2 * (chunk + six));
  CHECK(op_bytes::delta_rule_wy_flops(0, 32, 128, 128) == 0.0);
}

TEST_CASE("op bytes: a fused op moves its parts' bytes less the intermediates it keeps", "[op_bytes]") {
  for (int rows : {1, 32, 4096}) {
    for (size_t es : {size_t{2}, size_t{4}}) {
      CAPTURE(rows, es);
      const int Hk = 16, Hv = 48, Dk = 128, Dv = 128, K = 4, C = 2 * Hk * Dk + Hv * Dv;
      const double conv_out = double(rows) * C * es;  // written by the conv, read by postconv
      CHECK(op_bytes::gdn_prefill_fused(rows, 7, Hk, Hv, Dk, Dv, K, es, 2, true) ==
            op_bytes::conv_fwd(rows, 7, C, K, es, 2, true) + op_bytes::postconv(rows, Hk, Hv, Dk, Dv, es) -
                2.0 * conv_out);
      const double qkv = double(rows) * C * es, gates = 2.0 * 4.0 * rows * Hv;  // postconv -> delta rule
      for (size_t ssm : {size_t{2}, size_t{4}}) {
        CHECK(op_bytes::gdn_decode_fused(rows, Hk, Hv, Dk, Dv, K, es, 2, ssm) ==
              op_bytes::conv_update(rows, C, K, es, 2) + op_bytes::postconv(rows, Hk, Hv, Dk, Dv, es) +
                  op_bytes::delta_rule(rows, rows, Hk, Hv, Dk, Dv, es, ssm) - 2.0 * conv_out - 2.0 * qkv - 2.0 * gates);
      }
    }
  }
}

TEST_CASE("op bytes: causal attention's query-key pairs with history", "[op_bytes]") {
  // Counted pair by pair: prompt token i sees history + i + 1 keys.
  for (long long prompt : {0LL, 1LL, 5LL, 64LL}) {
    for (long long history : {0LL, 1LL, 100LL}) {
      double n = 0;
      for (long long i = 0; i < prompt; ++i) n += static_cast<double>(history + i + 1);
      CAPTURE(prompt, history);
      CHECK(op_bytes::causal_pairs(prompt, history) == n);
    }
  }
  // The 4B prefill of 1024 tokens: 524,800 pairs a sequence; after 1024 of history 1,573,376.
  CHECK(op_bytes::causal_pairs(1024, 0) == 524800.0);
  CHECK(op_bytes::causal_pairs(1024, 1024) == 1573376.0);
}

TEST_CASE("op bytes: the fused forms counted by hand on a small shape", "[op_bytes]") {
  // One row, Hk 1, Hv 2, Dk = Dv = 4, K 4: C = 2 x 4 + 2 x 4 = 16 channels; bf16 activations and conv
  // state, f32 SSM state.
  // prep: x in 16 x 2 = 32; conv state read and written 16 x 3 x 2 x 2 = 192; conv weights f32
  // 16 x 4 x 4 = 256; q, k, v out 32; a, b in 2 x 2 x 2 = 8; g, beta out f32 2 x 2 x 4 = 16;
  // A_log and dt_bias f32 16.
  CHECK(op_bytes::gdn_decode_prep(1, 1, 2, 4, 4, 4, 2, 2) == 32 + 192 + 256 + 32 + 8 + 16 + 16);
  // fused: x 32, conv state 192, conv weights 256, a and b 8, A_log and dt_bias 16, the SSM state
  // 2 x 4 x 4 x 4 read and written = 256, the output 2 x 4 x 2 = 16.
  CHECK(op_bytes::gdn_decode_fused(1, 1, 2, 4, 4, 4, 2, 2, 4) == 32 + 192 + 256 + 8 + 16 + 256 + 16);
  // gated_rmsnorm of 1 row, 2 heads of 4: x, z in and y out 3 x 8 x 2 = 48, the f32 weight 16;
  // in the delta rule's epilogue only z and the weight are its own.
  CHECK(op_bytes::gated_rmsnorm(1, 2, 4, 2, 4) == 48 + 16);
  CHECK(op_bytes::fused_gated_norm(1, 2, 4, 2, 4) == 16 + 16);
}

TEST_CASE("op bytes: the prep arm's conv + post-conv kernel", "[op_bytes]") {
  // conv.update and postconv less the conv output between them (written once, read once).
  const int R = 32, Hk = 16, Hv = 32, D = 128, K = 4, C = 2 * Hk * D + Hv * D;
  CHECK(op_bytes::gdn_decode_prep(R, Hk, Hv, D, D, K, 2, 2) ==
        op_bytes::conv_update(R, C, K, 2, 2) + op_bytes::postconv(R, Hk, Hv, D, D, 2) - 2.0 * R * C * 2);
  CHECK(op_bytes::gdn_decode_prep(R, Hk, Hv, D, D, K, 2, 2) <
        op_bytes::conv_update(R, C, K, 2, 2) + op_bytes::postconv(R, Hk, Hv, D, D, 2));
}
