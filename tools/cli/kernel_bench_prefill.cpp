// kernel_bench_prefill.cpp: the gdn.prefill case of `stepgraph kernels`: the causal conv and the
// post-conv prep of a prefill shape, as the unfused pair of launches (conv.fwd into a conv buffer,
// then postconv) and as the fused arm (kernels/gdn_prefill_fused.h), timed side by side and hashed
// (q, k, v, g, beta and the conv state must be the reference pair's bytes).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "kernels/arms.h"
#include "kernels/conv_fwd.h"
#include "kernels/fill.h"
#include "kernels/gdn_prefill_fused.h"
#include "kernels/op_bytes.h"
#include "kernels/postconv.h"
#include "models/gdn_mixer.h"
#include "tools/cli/kernel_bench_cases.h"

namespace sg::bench {

// `rows` sequences of `seq_len` tokens without history (slot n for sequence n), bf16 activations,
// bf16 state. Arms, reference first: unfused tiled+exact then megablock (the byte reference of
// both ops); unfused with the fastest conv.fwd measured on the H200 (k4+whole, BENCHMARKS.md) and
// postconv token_tile (each falls back as its contract says off the 4B/27B shapes); fused.
// Bytes per launch, each input read once and each output written once: x, a, b, the weights,
// A_log and dt_bias read; q, k, v, g, beta and the new state written (no history: the old state
// is not read). The unfused pair also writes and reads back the conv output, which the count
// leaves out: both arms are measured against the same floor.
OpCase gdn_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st) {
  const GdnDims& d = s.dims;
  const int N = s.rows, T = s.tokens(), C = d.C(), K = d.K, Hv = d.Hv;
  const DType act = DType::bf16;
  const size_t xb = static_cast<size_t>(T) * C * 2;            // x [T, C], conv [T, C]
  const size_t sb = static_cast<size_t>(N) * C * (K - 1) * 2;  // state [N, C, K-1]
  const size_t ab = static_cast<size_t>(T) * Hv * 2;           // a, b [T, Hv]
  const size_t qb = static_cast<size_t>(T) * d.Hk * d.Dk * 2;  // q, k [T, Hk, Dk]
  const size_t vb = static_cast<size_t>(T) * Hv * d.Dv * 2;    // v [T, Hv, Dv]
  const size_t gb = static_cast<size_t>(T) * Hv * 4;           // g, beta [T, Hv] f32

  // Metadata: cu_seqlens [N+1], slots, has_history [N], counts {N, chunks}, chunk descriptors.
  std::vector<int32_t> cu(static_cast<size_t>(N) + 1), slots(static_cast<size_t>(N));
  for (int n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n * s.seq_len;
  for (int n = 0; n < N; ++n) slots[static_cast<size_t>(n)] = n;
  const std::vector<uint8_t> hist(static_cast<size_t>(N), 0);
  const auto chunks = build_conv_chunks(cu);
  const int32_t counts[2] = {N, static_cast<int32_t>(chunks.size())};
  auto* dcu = static_cast<int32_t*>(buf.make(cu.size() * 4));
  auto* dslots = static_cast<int32_t*>(buf.make(slots.size() * 4));
  auto* dhist = static_cast<uint8_t*>(buf.make(hist.size()));
  auto* dcounts = static_cast<int32_t*>(buf.make(8));
  auto* dchunks = static_cast<ConvChunk*>(buf.make(sizeof(ConvChunk) * static_cast<size_t>(conv_max_chunks(T, N))));
  check(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dslots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dhist, hist.data(), hist.size(), cudaMemcpyHostToDevice));
  check(cudaMemcpy(dcounts, counts, 8, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dchunks, chunks.data(), sizeof(ConvChunk) * chunks.size(), cudaMemcpyHostToDevice));

  GdnIo io;  // the buffers, wired into each kernel's params as the model step wires them (gdn_mixer.h)
  io.x = buf.make(xb);
  io.x_stride = C;
  io.conv_state = buf.make(sb);
  io.conv_state_dtype = DType::bf16;
  io.conv_w = static_cast<float*>(buf.make(sizeof(float) * C * K));
  io.a = buf.make(ab);
  io.b = buf.make(ab);
  io.ab_stride = Hv;
  io.A_log = static_cast<float*>(buf.make(sizeof(float) * Hv));
  io.dt_bias = static_cast<float*>(buf.make(sizeof(float) * Hv));
  io.q = buf.make(qb);
  io.k = buf.make(qb);
  io.v = buf.make(vb);
  io.g = static_cast<float*>(buf.make(gb));
  io.beta = static_cast<float*>(buf.make(gb));
  auto set_varlen = [&](auto& p) {  // no history: slot n for sequence n
    p.cu_seqlens = dcu;
    p.slots = dslots;
    p.has_history = dhist;
    p.n_seqs = dcounts;
  };

  GdnPrefillFusedParams f;
  f.x = io.x;
  f.x_stride = io.x_stride;
  f.act = act;
  f.state = io.conv_state;
  f.state_dtype = io.conv_state_dtype;
  f.w = io.conv_w;
  set_gdn_gate_inputs(f, io);
  f.ab_dtype = act;
  set_gdn_qkv_gates(f, io, act);
  set_varlen(f);
  set_gdn_heads(f, d);
  f.K = K;
  f.max_tokens = T;
  f.max_seqs = N;
  check(fill_uniform(const_cast<void*>(f.x), act, int64_t{T} * C, 700, -2.f, 2.f, st));
  check(fill_uniform(const_cast<float*>(f.w), DType::f32, int64_t{C} * K, 701, -0.4f, 0.4f, st));
  check(fill_uniform(const_cast<void*>(f.a), act, int64_t{T} * Hv, 702, -3.f, 3.f, st));
  check(fill_uniform(const_cast<void*>(f.b), act, int64_t{T} * Hv, 703, -3.f, 3.f, st));
  check(fill_uniform(const_cast<float*>(f.A_log), DType::f32, Hv, 704, 0.f, 2.7f, st));
  check(fill_uniform(const_cast<float*>(f.dt_bias), DType::f32, Hv, 705, -1.f, 1.f, st));

  io.conv_out = buf.make(xb);  // the unfused pair's intermediate [T, C]
  ConvFwdParams cp;            // x -> conv_out
  set_gdn_conv_io(cp, io, act);
  set_varlen(cp);
  cp.chunks = dchunks;
  cp.n_chunks = dcounts + 1;
  cp.C = C;
  cp.K = K;
  cp.max_tokens = T;
  cp.max_seqs = N;
  const PostconvParams pp = gdn_postconv_params(d, act, T, io);  // conv_out -> q, k, v, g, beta

  OpCase oc;
  oc.op = "gdn.prefill";
  oc.sets = 1;
  oc.bytes =
      op_bytes::gdn_prefill_fused(T, N, d.Hk, Hv, d.Dk, d.Dv, K, dtype_size(act), dtype_size(DType::bf16), false);
  struct Pair {
    ConvFwdArm conv;
    ConvChunksArm chunks;
    PostconvArm post;
  };
  for (const Pair& pr : {Pair{ConvFwdArm::tiled, ConvChunksArm::exact, PostconvArm::megablock},
                         Pair{ConvFwdArm::k4, ConvChunksArm::whole, PostconvArm::token_tile}}) {
    const auto cc = conv_fwd_contract(pr.conv, pr.chunks, ConvFwdShape{T, N, C, K});
    const auto pc = postconv_contract(pr.post, PostconvShape{T, d.Hk, Hv, d.Dk, d.Dv});
    const std::string name = fmt::format("unfused:{}+{},{}", arm_name(cc.arm), arm_name(pr.chunks), arm_name(pc.arm));
    oc.arms.push_back({name, fmt::format("{}+{}", cc.kernel, pc.kernel), cc.grid, cc.block,
                       [cp, pp, cc, pc, ch = pr.chunks](int, cudaStream_t s) {
                         check(conv_fwd(cp, cc, ch, s));
                         check(postconv(pp, pc, s));
                       }});
  }
  const auto fc = gdn_prefill_contract(GdnPrefillArm::fused, GdnPrefillShape{T, N, d.Hk, Hv, d.Dk, d.Dv, K});
  if (fc.arm == GdnPrefillArm::fused) {
    oc.arms.push_back({"fused", std::string(fc.kernel), fc.grid, fc.block,
                       [f, fc](int, cudaStream_t s) { check(gdn_prefill_fused(f, fc, s)); }});
  }
  oc.reset = [f, sb, qb, vb, gb](cudaStream_t s) {
    check(cudaMemsetAsync(f.state, 0x5A, sb, s));
    for (auto [p, n] :
         {std::pair{f.q, qb}, {f.k, qb}, {f.v, vb}, {static_cast<void*>(f.g), gb}, {static_cast<void*>(f.beta), gb}}) {
      check(cudaMemsetAsync(p, 0xA5, n, s));
    }
  };
  oc.outputs = [f, sb, qb, vb, gb] {
    auto o = download(f.q, qb);
    append(o, download(f.k, qb));
    append(o, download(f.v, vb));
    append(o, download(f.g, gb));
    append(o, download(f.beta, gb));
    append(o, download(f.state, sb));
    return o;
  };
  return oc;
}

}  // namespace sg::bench
