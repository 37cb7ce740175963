// kernel_bench.cpp: op cases (buffers, launches per arm, reset, outputs) and the interleaved timer;
// the gdn.prefill case is in kernel_bench_prefill.cpp.
#include "tools/cli/kernel_bench.h"
#include "tools/cli/kernel_bench_cases.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <regex>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/text.h"
#include "graphs/graph.h"
#include "kernels/arms.h"
#include "kernels/conv_fwd.h"
#include "kernels/conv_update.h"
#include "kernels/delta_rule.h"
#include "kernels/fill.h"
#include "kernels/gdn_decode_fused.h"
#include "kernels/numeric.h"
#include "kernels/op_bytes.h"
#include "kernels/postconv.h"
#include "models/gdn_mixer.h"
#include "tools/cli/bench_probes.h"
#include "tools/cli/compare.h"

namespace sg::bench {

std::vector<uint8_t> download(const void* p, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  check(cudaDeviceSynchronize());
  check(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost));
  return out;
}

std::vector<float> download_bf16(const void* p, size_t bytes) {
  const std::vector<uint8_t> raw = download(p, bytes);
  std::vector<float> out(bytes / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    bf16_t b;
    std::memcpy(&b.bits, raw.data() + 2 * i, 2);
    out[i] = bf16_to_f32(b);
  }
  return out;
}

void append(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

namespace {

uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t x : b) h = (h ^ x) * 1099511628211ull;
  return h;
}

// conv.update: the grid arm (reference), the fast arm at the contract's pick of V or at each V of
// cfg.conv_update_channels, then per fast grid the two floor probes (bench_probes.h).
OpCase conv_update_case(const KernelShape& s, const BenchConfig& cfg, int sets, Buffers& buf, cudaStream_t st) {
  const GdnDims& d = s.dims;
  const int R = s.rows, C = d.C(), K = d.K;
  const DType act = DType::bf16;
  const size_t xb = static_cast<size_t>(R) * C * 2, sb = static_cast<size_t>(R) * C * (K - 1) * 2;
  std::vector<int32_t> slots(R);
  for (int r = 0; r < R; ++r) slots[r] = r;
  auto* dslots = static_cast<int32_t*>(buf.make(sizeof(int32_t) * R));
  check(cudaMemcpy(dslots, slots.data(), sizeof(int32_t) * R, cudaMemcpyHostToDevice));
  std::vector<ConvUpdateParams> ps(sets);
  for (int i = 0; i < sets; ++i) {
    auto& p = ps[i];
    p.x = buf.make(xb);
    p.x_stride = C;
    p.x_dtype = act;
    p.out = buf.make(xb);
    p.out_dtype = act;
    p.state = buf.make(sb);
    p.state_dtype = DType::bf16;
    p.slots = dslots;
    p.w = static_cast<float*>(buf.make(sizeof(float) * C * K));
    p.rows = R;
    p.C = C;
    p.K = K;
    check(fill_uniform(const_cast<void*>(p.x), act, int64_t{R} * C, 10 + i, -2.f, 2.f, st));
    check(fill_uniform(p.state, DType::bf16, int64_t{R} * C * (K - 1), 50 + i, -2.f, 2.f, st));
    check(fill_uniform(const_cast<float*>(p.w), DType::f32, int64_t{C} * K, 90 + i, -0.4f, 0.4f, st));
  }
  OpCase oc;
  oc.op = "conv.update";
  oc.sets = sets;
  oc.bytes = op_bytes::conv_update(R, C, K, dtype_size(act), dtype_size(DType::bf16));
  static_assert(ArmTraits<ConvUpdateArm>::count == 2, "conv.update arms: grid, fast (add a new arm here)");
  const auto g = conv_update_contract(ConvUpdateArm::grid, ConvUpdateShape{R, C, K});
  oc.arms.push_back({std::string(arm_name(g.arm)), std::string(g.kernel), g.grid, g.block,
                     [ps, g](int set, cudaStream_t s) { check(conv_update(ps[set], g, s)); }});
  const std::vector<int> vs = cfg.conv_update_channels.empty() ? std::vector<int>{0} : cfg.conv_update_channels;
  const int pick = conv_update_fast_channels(R, C);
  std::vector<LaunchContract<ConvUpdateArm>> fast;
  const std::vector<int> bs = cfg.conv_update_blocks.empty() ? std::vector<int>{0} : cfg.conv_update_blocks;
  // Row names: fast/vV, with /bB when block sizes are swept.
  auto tag = [&](const LaunchContract<ConvUpdateArm>& c) {
    return cfg.conv_update_blocks.empty() ? fmt::format("v{}", c.per_thread)
                                          : fmt::format("v{}/b{}", c.per_thread, c.block.x);
  };
  for (int v : vs) {
    for (int b : bs) {
      auto c = conv_update_contract(ConvUpdateArm::fast, ConvUpdateShape{R, C, K, v, b});
      std::string name = "fast/" + tag(c);
      if ((v != 0 || b != 0) && c.per_thread == pick && c.block.x == kConvUpdateFastBlock) name += " (pick)";
      oc.arms.push_back({name, std::string(c.kernel), c.grid, c.block,
                         [ps, c](int set, cudaStream_t s) { check(conv_update(ps[set], c, s)); }, false, c.per_thread});
      fast.push_back(c);
    }
  }
  // The floor of each fast grid: an empty kernel, and slots[r] -> one 16-byte state word -> store.
  const int64_t row_bytes = int64_t{C} * (K - 1) * 2;  // one slot's bf16 state row
  for (const auto& c : fast) {
    oc.arms.push_back({"floor:empty-grid/" + tag(c), "probe_empty", c.grid, c.block,
                       [c](int, cudaStream_t s) { check(probe_empty(c.grid, c.block, s)); }, true, c.per_thread});
    if (row_bytes % 16 != 0) continue;  // the probe reads whole 16-byte words (C % 8 == 0 for every preset)
    oc.arms.push_back({"floor:slot+state/" + tag(c), "probe_slot_state", c.grid, c.block,
                       [ps, c, row_bytes](int set, cudaStream_t s) {
                         check(probe_slot_state(ps[set].slots, ps[set].state, row_bytes, c.grid, c.block, s));
                       },
                       true, c.per_thread});
  }
  auto p0 = ps[0];
  oc.reset = [p0, R, C, K, xb](cudaStream_t s) {
    check(fill_uniform(p0.state, DType::bf16, int64_t{R} * C * (K - 1), 50, -2.f, 2.f, s));
    check(cudaMemsetAsync(p0.out, 0xA5, xb, s));
  };
  oc.outputs = [p0, xb, sb] {
    auto o = download(p0.out, xb);
    append(o, download(p0.state, sb));
    return o;
  };
  return oc;
}

OpCase postconv_case(const KernelShape& s, int sets, Buffers& buf, cudaStream_t st) {
  const GdnDims& d = s.dims;
  const int T = s.tokens(), C = d.C(), Hv = d.Hv;
  const DType act = DType::bf16;
  const size_t cb = static_cast<size_t>(T) * C * 2, ab = static_cast<size_t>(T) * Hv * 2,
               gb = static_cast<size_t>(T) * Hv * 4;
  auto* A_log = static_cast<float*>(buf.make(sizeof(float) * Hv));
  auto* dt_bias = static_cast<float*>(buf.make(sizeof(float) * Hv));
  check(fill_uniform(A_log, DType::f32, Hv, 7, 0.f, 2.7f, st));
  check(fill_uniform(dt_bias, DType::f32, Hv, 8, -1.f, 1.f, st));
  std::vector<PostconvParams> ps(sets);
  for (int i = 0; i < sets; ++i) {
    auto& p = ps[i];
    p.conv = buf.make(cb);
    p.conv_stride = C;
    p.conv_dtype = act;
    p.a = buf.make(ab);
    p.a_stride = Hv;
    p.b = buf.make(ab);
    p.b_stride = Hv;
    p.ab_dtype = act;
    p.A_log = A_log;
    p.dt_bias = dt_bias;
    p.q = buf.make(static_cast<size_t>(T) * d.Hk * d.Dk * 2);
    p.k = buf.make(static_cast<size_t>(T) * d.Hk * d.Dk * 2);
    p.v = buf.make(static_cast<size_t>(T) * Hv * d.Dv * 2);
    p.qkv_dtype = act;
    p.g = static_cast<float*>(buf.make(gb));
    p.beta = static_cast<float*>(buf.make(gb));
    p.T = T;
    p.Hk = d.Hk;
    p.Hv = Hv;
    p.Dk = d.Dk;
    p.Dv = d.Dv;
    check(fill_uniform(const_cast<void*>(p.conv), act, int64_t{T} * C, 200 + i, -2.f, 2.f, st));
    check(fill_uniform(const_cast<void*>(p.a), act, int64_t{T} * Hv, 300 + i, -3.f, 3.f, st));
    check(fill_uniform(const_cast<void*>(p.b), act, int64_t{T} * Hv, 400 + i, -3.f, 3.f, st));
  }
  OpCase oc;
  oc.op = "postconv";
  oc.sets = sets;
  oc.bytes = op_bytes::postconv(T, d.Hk, Hv, d.Dk, d.Dv, dtype_size(act));
  for (size_t a = 0; a < ArmTraits<PostconvArm>::count; ++a) {
    auto c = postconv_contract(static_cast<PostconvArm>(a), PostconvShape{T, d.Hk, Hv, d.Dk, d.Dv});
    std::string name(arm_name(static_cast<PostconvArm>(a)));
    if (!c.fallback_reason.empty()) name += "->" + std::string(arm_name(c.arm));
    oc.arms.push_back({name, std::string(c.kernel), c.grid, c.block,
                       [ps, c](int set, cudaStream_t s) { check(postconv(ps[set], c, s)); }});
  }
  auto p0 = ps[0];
  const size_t qb = static_cast<size_t>(T) * d.Hk * d.Dk * 2, vb = static_cast<size_t>(T) * Hv * d.Dv * 2;
  oc.reset = [p0, qb, vb, gb](cudaStream_t s) {
    for (auto [p, n] : {std::pair{p0.q, qb},
                        {p0.k, qb},
                        {p0.v, vb},
                        {static_cast<void*>(p0.g), gb},
                        {static_cast<void*>(p0.beta), gb}}) {
      check(cudaMemsetAsync(p, 0xA5, n, s));
    }
  };
  oc.outputs = [p0, qb, vb, gb] {
    auto o = download(p0.q, qb);
    append(o, download(p0.k, qb));
    append(o, download(p0.v, vb));
    append(o, download(p0.g, gb));
    append(o, download(p0.beta, gb));
    return o;
  };
  return oc;
}

// gdn.decode: the whole GDN decode of one layer (conv update, post-conv, recurrent step), as the
// unfused three-kernel sequence (conv.update=fast, postconv=fast) or the fused arm, with the SSM
// state in `ssm` (f32: op "gdn.decode"; bf16, the ssm-state setting: op "gdn.decode.bf16").
OpCase gdn_decode_case(const KernelShape& s, int sets, Buffers& buf, cudaStream_t st, DType ssm) {
  const GdnDims& d = s.dims;
  const int R = s.rows, C = d.C(), K = d.K, Hv = d.Hv;
  const DType act = DType::bf16;
  const int64_t ssn = int64_t{R} * Hv * d.Dk * d.Dv;  // SSM state values
  const size_t xb = static_cast<size_t>(R) * C * 2, ab = static_cast<size_t>(R) * Hv * 2,
               csb = static_cast<size_t>(R) * C * (K - 1) * 2, ssb = static_cast<size_t>(ssn) * dtype_size(ssm),
               ob = static_cast<size_t>(R) * Hv * d.Dv * 2;
  std::vector<int32_t> slots(R);
  for (int r = 0; r < R; ++r) slots[r] = r;
  auto* dslots = static_cast<int32_t*>(buf.make(sizeof(int32_t) * R));
  check(cudaMemcpy(dslots, slots.data(), sizeof(int32_t) * R, cudaMemcpyHostToDevice));
  auto* A_log = static_cast<float*>(buf.make(sizeof(float) * Hv));
  auto* dt_bias = static_cast<float*>(buf.make(sizeof(float) * Hv));
  check(fill_uniform(A_log, DType::f32, Hv, 7, 0.f, 2.7f, st));
  check(fill_uniform(dt_bias, DType::f32, Hv, 8, -1.f, 1.f, st));
  struct Set {
    GdnDecodePath unfused, fused, prep;  // the same buffers through each arm (gdn_mixer.h)
  };
  std::vector<Set> ps(sets);
  ArmSelection unfused_arms, fused_arms, prep_arms;
  unfused_arms.postconv = PostconvArm::fast;  // the arms the rows name (conv.update=fast is the default)
  fused_arms.gdn_decode = GdnDecodeArm::fused;
  prep_arms.gdn_decode = GdnDecodeArm::prep;
  for (int i = 0; i < sets; ++i) {
    GdnIo io;
    io.x = buf.make(xb);  // [R, C]
    io.x_stride = C;
    io.a = buf.make(ab);  // [R, Hv]
    io.b = buf.make(ab);
    io.ab_stride = Hv;
    io.slots = dslots;
    io.conv_w = static_cast<float*>(buf.make(sizeof(float) * C * K));
    io.A_log = A_log;
    io.dt_bias = dt_bias;
    io.conv_state = buf.make(csb);
    io.conv_state_dtype = DType::bf16;
    io.ssm_state = buf.make(ssb);
    io.ssm_state_dtype = ssm;
    io.conv_out = buf.make(xb);  // the unfused path's intermediates
    io.q = buf.make(static_cast<size_t>(R) * d.Hk * d.Dk * 2);
    io.k = buf.make(static_cast<size_t>(R) * d.Hk * d.Dk * 2);
    io.v = buf.make(static_cast<size_t>(R) * Hv * d.Dv * 2);
    io.g = static_cast<float*>(buf.make(static_cast<size_t>(R) * Hv * 4));
    io.beta = static_cast<float*>(buf.make(static_cast<size_t>(R) * Hv * 4));
    io.out = buf.make(ob);
    check(fill_uniform(const_cast<void*>(io.x), act, int64_t{R} * C, 10 + i, -2.f, 2.f, st));
    check(fill_uniform(const_cast<void*>(io.a), act, int64_t{R} * Hv, 20 + i, -3.f, 3.f, st));
    check(fill_uniform(const_cast<void*>(io.b), act, int64_t{R} * Hv, 30 + i, -3.f, 3.f, st));
    check(fill_uniform(io.conv_state, DType::bf16, int64_t{R} * C * (K - 1), 50 + i, -2.f, 2.f, st));
    check(fill_uniform(const_cast<float*>(io.conv_w), DType::f32, int64_t{C} * K, 90 + i, -0.4f, 0.4f, st));
    check(fill_uniform(io.ssm_state, ssm, ssn, 70 + i, -0.1f, 0.1f, st));
    ps[i].unfused = gdn_decode_path(d, act, unfused_arms, R, io);
    ps[i].fused = gdn_decode_path(d, act, fused_arms, R, io);
    ps[i].prep = gdn_decode_path(d, act, prep_arms, R, io);
  }
  OpCase oc;
  oc.op = ssm == DType::bf16 ? "gdn.decode.bf16" : "gdn.decode";
  oc.sets = sets;
  // The fused arm's bytes (inputs, states and output only) for every arm: the op's floor.
  oc.bytes =
      op_bytes::gdn_decode_fused(R, d.Hk, Hv, d.Dk, d.Dv, K, dtype_size(act), dtype_size(DType::bf16), dtype_size(ssm));
  // The unfused path with each built split of the delta-rule step (threads per state column), and
  // with a head's columns in 2 or 4 blocks (q1 and q2). With a bf16 state the delta rule's thread
  // groups own column pairs (DeltaRuleDecodeParams::pair_columns, when the columns of a block are
  // even); the rows ending in "/single" give them one column each, as with an f32 state.
  for (int pairs = ssm == DType::bf16 ? 1 : 0; pairs >= 0; --pairs) {
    for (int q : {1, 2, 4, 8}) {
      if (delta_rule_decode_split(d.Dk, d.Dv, q) != q) continue;
      for (int cb : {1, 2, 4}) {
        if (d.Dv % cb != 0 || (cb > 1 && q > 2)) continue;
        const bool paired = pairs == 1 && delta_rule_decode_may_pair(q, static_cast<int>(dtype_size(ssm)), false) &&
                            (d.Dv / cb) % 2 == 0;  // DeltaRuleDecodeParams::pair_columns
        if (pairs == 1 && !paired) continue;
        const Dim3 block{static_cast<unsigned>(delta_rule_decode_block(d.Dv, cb, q, paired)), 1, 1};
        const Dim3 grid{static_cast<unsigned>(Hv * cb), static_cast<unsigned>(R), 1};
        std::string name = cb == 1 ? fmt::format("unfused/q{}", q) : fmt::format("unfused/q{}/c{}", q, cb);
        if (ssm == DType::bf16 && !paired) name += "/single";
        oc.arms.push_back({name,
                           paired ? "conv_update_fast+postconv_fast+delta_rule_decode_pair"
                                  : "conv_update_fast+postconv_fast+delta_rule_decode",
                           grid, block, [ps, q, cb, paired](int set, cudaStream_t s) {
                             GdnDecodePath p = ps[set].unfused;
                             p.delta.split = q;
                             p.delta.col_blocks = cb;
                             p.delta.pair_columns = paired;
                             p.launch(s, nullptr, -1);
                           }});
      }
    }
  }
  // The staged delta rule (DeltaRuleDecodeParams::staged: persistent blocks, the next head's state
  // copied into shared memory while one computes) at each split it takes (delta_rule_decode_staged_fits).
  for (int q : {1, 2}) {
    if (delta_rule_decode_split(d.Dk, d.Dv, q) != q) continue;
    DeltaRuleDecodeParams dp = ps[0].unfused.delta;
    dp.split = q;
    dp.staged = true;
    const int blocks = delta_rule_decode_staged_grid(dp);  // persistent: at most the resident blocks; 0: not taken
    if (blocks == 0) continue;
    const Dim3 grid{static_cast<unsigned>(blocks), 1, 1};
    const Dim3 block{static_cast<unsigned>(delta_rule_decode_block(d.Dv, 1, q, ssm == DType::bf16)), 1, 1};
    oc.arms.push_back({fmt::format("unfused/q{}/staged", q), "conv_update_fast+postconv_fast+delta_rule_decode_staged",
                       grid, block, [ps, q](int set, cudaStream_t s) {
                         GdnDecodePath p = ps[set].unfused;
                         p.delta.split = q;
                         p.delta.staged = true;
                         p.launch(s, nullptr, -1);
                       }});
  }
  if (ps[0].fused.is_fused()) {
    const auto& fc = ps[0].fused.fused_contract;
    oc.arms.push_back({"fused", std::string(fc.kernel), fc.grid, fc.block,
                       [ps](int set, cudaStream_t s) { ps[set].fused.launch(s, nullptr, -1); }});
  }
  if (ps[0].prep.is_prep()) {  // conv + post-conv in one kernel, then the delta rule with its default split
    const auto& pc = ps[0].prep.fused_contract;
    oc.arms.push_back({"prep", std::string(pc.kernel), pc.grid, pc.block,
                       [ps](int set, cudaStream_t s) { ps[set].prep.launch(s, nullptr, -1); }});
  }
  const GdnDecodeFusedParams f0 = ps[0].fused.fused;
  oc.reset = [f0, R, C, K, ssn, ssm, ob](cudaStream_t s) {
    check(fill_uniform(f0.conv_state, DType::bf16, int64_t{R} * C * (K - 1), 50, -2.f, 2.f, s));
    check(fill_uniform(f0.ssm_state, ssm, ssn, 70, -0.1f, 0.1f, s));
    check(cudaMemsetAsync(f0.out, 0xA5, ob, s));
  };
  oc.outputs = [f0, csb, ssb, ob] {
    auto o = download(f0.out, ob);
    append(o, download(f0.conv_state, csb));
    append(o, download(f0.ssm_state, ssb));
    return o;
  };
  return oc;
}

// conv.fwd: the varlen prefill conv over `rows` sequences of `seq_len` tokens without history,
// every arm x chunk split (tiled + exact is the byte reference). State: one slot per sequence.
OpCase conv_fwd_case(const KernelShape& s, Buffers& buf, cudaStream_t st) {
  const GdnDims& d = s.dims;
  const int N = s.rows, T = s.tokens(), C = d.C(), K = d.K;
  const DType act = DType::bf16;
  const size_t xb = static_cast<size_t>(T) * C * 2, sb = static_cast<size_t>(N) * C * (K - 1) * 2;
  std::vector<int32_t> cu(static_cast<size_t>(N) + 1), slots(static_cast<size_t>(N));
  for (int n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n * s.seq_len;
  for (int n = 0; n < N; ++n) slots[static_cast<size_t>(n)] = n;
  const std::vector<uint8_t> hist(static_cast<size_t>(N), 0);
  const auto chunks = build_conv_chunks(cu);
  const int max_chunks = conv_max_chunks(T, N);
  const int32_t counts[2] = {N, static_cast<int32_t>(chunks.size())};
  auto* dcu = static_cast<int32_t*>(buf.make(cu.size() * 4));
  auto* dslots = static_cast<int32_t*>(buf.make(slots.size() * 4));
  auto* dhist = static_cast<uint8_t*>(buf.make(hist.size()));
  auto* dcounts = static_cast<int32_t*>(buf.make(8));
  auto* dchunks = static_cast<ConvChunk*>(buf.make(sizeof(ConvChunk) * static_cast<size_t>(max_chunks)));
  check(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dslots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dhist, hist.data(), hist.size(), cudaMemcpyHostToDevice));
  check(cudaMemcpy(dcounts, counts, 8, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dchunks, chunks.data(), sizeof(ConvChunk) * chunks.size(), cudaMemcpyHostToDevice));
  ConvFwdParams p;
  p.x = buf.make(xb);
  p.x_stride = C;
  p.x_dtype = act;
  p.out = buf.make(xb);
  p.out_dtype = act;
  p.state = buf.make(sb);
  p.state_dtype = DType::bf16;
  p.w = static_cast<float*>(buf.make(sizeof(float) * C * K));
  p.cu_seqlens = dcu;
  p.slots = dslots;
  p.has_history = dhist;
  p.n_seqs = dcounts;
  p.chunks = dchunks;
  p.n_chunks = dcounts + 1;
  p.C = C;
  p.K = K;
  p.max_tokens = T;
  p.max_seqs = N;
  check(fill_uniform(const_cast<void*>(p.x), act, int64_t{T} * C, 600, -2.f, 2.f, st));
  check(fill_uniform(const_cast<float*>(p.w), DType::f32, int64_t{C} * K, 601, -0.4f, 0.4f, st));
  OpCase oc;
  oc.op = "conv.fwd";
  oc.sets = 1;
  oc.bytes = op_bytes::conv_fwd(T, N, C, K, dtype_size(act), dtype_size(DType::bf16), false);  // no history
  for (ConvChunksArm ch : {ConvChunksArm::exact, ConvChunksArm::whole}) {
    for (size_t a = 0; a < ArmTraits<ConvFwdArm>::count; ++a) {
      const auto requested = static_cast<ConvFwdArm>(a);
      auto c = conv_fwd_contract(requested, ch, ConvFwdShape{T, N, C, K});
      std::string name = fmt::format("{}+{}", arm_name(requested), arm_name(ch));
      if (!c.fallback_reason.empty()) name += "->" + std::string(arm_name(c.arm));
      oc.arms.push_back({name, std::string(c.kernel), c.grid, c.block,
                         [p, c, ch](int, cudaStream_t s) { check(conv_fwd(p, c, ch, s)); }});
    }
  }
  oc.reset = [p, xb, sb](cudaStream_t s) {
    check(cudaMemsetAsync(p.out, 0xA5, xb, s));
    check(cudaMemsetAsync(p.state, 0x5A, sb, s));
  };
  oc.outputs = [p, xb, sb] {
    auto o = download(p.out, xb);
    append(o, download(p.state, sb));
    return o;
  };
  return oc;
}

struct Spread {
  double median, min, max;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

std::vector<std::string> standard_shapes() {
  return {"4b-decode-b32", "27b-decode-b32", "4b-prefill-32x1024", "27b-prefill-32x1024"};
}

KernelShape parse_shape(const std::string& name) {
  // Plain decimals of at most 9 digits (no leading zero: "b032" is not a second name of "b32"), so
  // that std::stoi below cannot overflow.
  static const std::regex re(R"(^(4b|27b|tiny)-(decode-b([1-9]\d{0,8})|prefill-([1-9]\d{0,8})x([1-9]\d{0,8}))$)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) {
    throw Error(
        fmt::format("unknown shape '{}' (standard: {}; others: MODEL-decode-bN or MODEL-prefill-SxL with MODEL "
                    "4b, 27b or tiny)",
                    printable(name), fmt::join(standard_shapes(), ", ")));
  }
  KernelShape s;
  s.name = name;
  s.model = m[1] == "4b" ? "qwen3.5-4b" : m[1] == "27b" ? "qwen3.5-27b" : "tiny";
  s.dims = preset(s.model).gdn;
  s.decode = m[3].matched;
  if (s.decode) {
    s.rows = std::stoi(m[3]);
  } else {
    s.rows = std::stoi(m[4]);
    s.seq_len = std::stoi(m[5]);
  }
  if (!(s.rows >= 1 && s.rows <= 65535 && (s.decode || (s.seq_len >= 1 && int64_t{s.rows} * s.seq_len <= (1 << 24))))) {
    throw Error(fmt::format("shape '{}' out of range (rows 1..65535; a prefill of at most 2^24 tokens)", name));
  }
  return s;
}

std::vector<ArmResult> run_kernel_bench(const KernelShape& shape, const BenchConfig& cfg,
                                        const std::function<void(const std::string&)>& progress, ClockSampler* clocks) {
  Stream stream;
  const cudaStream_t st = stream.get();
  const int sets = shape.decode ? cfg.sets : 1;
  Buffers buf;
  std::vector<OpCase> cases;
  auto wanted = [&](const std::string& op) {
    return cfg.ops.empty() || std::find(cfg.ops.begin(), cfg.ops.end(), op) != cfg.ops.end();
  };
  if (shape.decode && wanted("conv.update")) cases.push_back(conv_update_case(shape, cfg, sets, buf, st));
  if (!shape.decode && wanted("conv.fwd")) cases.push_back(conv_fwd_case(shape, buf, st));
  if (wanted("postconv")) cases.push_back(postconv_case(shape, sets, buf, st));
  if (!shape.decode && wanted("gdn.prefill")) cases.push_back(gdn_prefill_case(shape, buf, st));
  if (!shape.decode && wanted("delta_rule.prefill")) cases.push_back(delta_prefill_case(shape, buf, st, progress));
  if (!shape.decode && wanted("attention.prefill")) cases.push_back(attention_prefill_case(shape, buf, st, progress));
  if (shape.decode && wanted("gdn.decode")) cases.push_back(gdn_decode_case(shape, sets, buf, st, DType::f32));
  if (shape.decode && wanted("gdn.decode.bf16")) cases.push_back(gdn_decode_case(shape, sets, buf, st, DType::bf16));
  if (wanted("gemm")) {
    for (auto& c : gemm_cases(shape, buf, st, progress)) cases.push_back(std::move(c));
  }
  stream.sync();

  std::vector<ArmResult> results;
  for (auto& oc : cases) {
    const auto probes = std::count_if(oc.arms.begin(), oc.arms.end(), [](const OpCase::Arm& a) { return a.probe; });
    progress(fmt::format("{} {}: {} arms{}, {} buffer set(s)", shape.name, oc.op, oc.arms.size() - probes,
                         probes ? fmt::format(" + {} floor probes", probes) : "", oc.sets));
    // Correctness first: every arm from the same starting state, outputs hashed (a setting's
    // values: outputs and states compared with the first row's).
    std::vector<CapturedGraph> graphs;
    std::vector<ArmResult> rs;
    Values first;            // a setting's reference: the values of the first row that ran
    std::string first_name;  // ... and its name (empty until a row ran)
    for (auto& arm : oc.arms) {
      ArmResult r;
      r.op = oc.op;
      r.arm = arm.arm;
      r.kernel = arm.kernel;
      r.grid = arm.grid;
      r.block = arm.block;
      r.bytes = arm.probe ? 0 : oc.bytes;
      r.probe = arm.probe;
      r.channels = arm.channels;
      r.flops = arm.probe ? 0 : oc.flops;
      r.setting = oc.setting;
      r.out_tolerance = oc.out_tolerance;
      r.state_tolerance = oc.state_tolerance;
      try {
        if (!arm.probe) {  // probes compute nothing to compare
          oc.reset(st);
          arm.launch(0, st);
          stream.sync();
          r.hash = fnv1a(oc.outputs());
          if (oc.setting) {
            const Values v = oc.values();
            if (first_name.empty()) {  // the reference row: its own errors are 0
              first = v;
              first_name = arm.arm;
            }
            r.reference = first_name;
            r.out_error =
                diag::l2_normalised_error(v.out.data(), first.out.data(), std::min(v.out.size(), first.out.size()));
            r.state_error = diag::l2_normalised_error(v.state.data(), first.state.data(),
                                                      std::min(v.state.size(), first.state.size()));
          }
        }
        graphs.push_back(CapturedGraph::capture(fmt::format("{} {} {}", shape.name, oc.op, arm.arm), st, [&] {
          for (int i = 0; i < oc.sets; ++i) arm.launch(i, st);
        }));
      } catch (const ArmError& e) {
        progress(fmt::format("  {} {}: skipped ({})", oc.op, arm.arm, e.what()));
        graphs.emplace_back();
        r.hash = 0;
      } catch (const Error& e) {
        // A setting's form whose launch was refused is left out (the others still run); a fault
        // that left the context unusable ends the run.
        if (!oc.setting || cudaDeviceSynchronize() != cudaSuccess) throw;
        (void)cudaGetLastError();
        progress(fmt::format("  {} {}: skipped, its launch was refused ({})", oc.op, arm.arm, e.what()));
        graphs.emplace_back();
        r.hash = 0;
      }
      rs.push_back(r);
    }
    const uint64_t ref_hash = rs.front().hash;
    for (auto& r : rs) r.hash_matches_reference = r.probe || r.hash == ref_hash;
    // Timing: interleaved repetitions.
    const int replays = std::max(1, (cfg.min_launches + oc.sets - 1) / oc.sets);
    std::vector<std::vector<double>> t(rs.size());
    Event e0, e1;
    for (size_t a = 0; a < rs.size(); ++a) {
      if (graphs[a]) {
        for (int i = 0; i < 3; ++i) graphs[a].replay(st);
      }
    }
    for (int rep = 0; rep < cfg.reps; ++rep) {
      for (size_t a = 0; a < rs.size(); ++a) {
        if (!graphs[a]) continue;
        if (clocks) clocks->start();  // one sample at once, then one a period until stop()
        e0.record(st);
        for (int i = 0; i < replays; ++i) graphs[a].replay(st);
        e1.record(st);
        e1.sync();
        if (clocks) {
          const std::vector<ClockSample> got = clocks->stop();
          rs[a].clocks.insert(rs[a].clocks.end(), got.begin(), got.end());
        }
        t[a].push_back(1000.0 * Event::elapsed_ms(e0, e1) / (replays * oc.sets));
      }
    }
    for (size_t a = 0; a < rs.size(); ++a) {
      if (t[a].empty()) continue;
      Spread sp = spread(t[a]);
      rs[a].median_us = sp.median;
      rs[a].min_us = sp.min;
      rs[a].max_us = sp.max;
      results.push_back(rs[a]);
    }
  }
  return results;
}

}  // namespace sg::bench
