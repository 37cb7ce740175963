// gdn_prefill_fixture.h: what the fused gdn.prefill GPU tests (test_gdn_prefill_fused.cpp) share:
// a problem (heads, dtypes, a varlen batch, host inputs with NaN in every stride gap), the device
// buffers of its bucket for both paths, the unfused reference path (conv.fwd tiled+exact, then
// postconv megablock), the fused run, the invariants of a fused outcome, and the byte comparison.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/contracts.h"
#include "kernels/conv_fwd.h"
#include "kernels/gdn_prefill_fused.h"
#include "kernels/postconv.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

namespace sg::test::gpf {

inline constexpr uint8_t kPoison = 0xA5;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Seq {
  int len;
  bool hist, pad;
};

// One problem: shapes, dtypes, a batch and its host data (values exactly representable in their
// storage dtype; NaN in every stride gap and in the rows past the live tokens).
struct Problem {
  std::string name;
  DType act = DType::bf16, qkv = DType::bf16, sdt = DType::bf16, abt = DType::bf16;
  int Hk = 0, Hv = 0, Dk = 128, Dv = 0, K = 0;
  std::vector<int32_t> lens, slots;
  std::vector<uint8_t> hist;
  int num_slots = 0, max_tokens = 0, max_seqs = 0;
  int64_t x_stride = 0, a_stride = 0, b_stride = 0;
  bool has_bias = true, silu = true, odd_w = false;  // odd_w: w 4 bytes off 16-byte alignment
  uint64_t seed = 0;
  std::vector<int32_t> cu;
  std::vector<float> x, a, b, w, bias, A_log, dt_bias, state0;
  int C() const { return 2 * Hk * Dk + Hv * Dv; }
  int N() const { return static_cast<int>(lens.size()); }
  int T() const { return cu.back(); }
  GdnPrefillShape shape() const { return GdnPrefillShape{max_tokens, max_seqs, Hk, Hv, Dk, Dv, K}; }
};

inline std::string describe(const Problem& p) {
  std::string s = fmt::format(
      "{} act={} qkv={} state={} ab={} Hk={} Hv={} Dv={} C={} K={} x_stride={} bias={} silu={} "
      "odd_w={} bucket=({}, {}) lens={{",
      p.name, dtype_name(p.act), dtype_name(p.qkv), dtype_name(p.sdt), dtype_name(p.abt), p.Hk, p.Hv, p.Dv, p.C(), p.K,
      p.x_stride, p.has_bias, p.silu, p.odd_w, p.max_tokens, p.max_seqs);
  for (int n = 0; n < p.N(); ++n) {
    s += fmt::format("{}{}{}", n ? "," : "", p.lens[n], p.slots[n] < 0 ? "(pad)" : p.hist[n] ? "(h)" : "");
  }
  return s + fmt::format("}} seed={}", p.seed);
}

inline std::vector<float> rounded(std::vector<float> v, DType t) {
  if (t == DType::bf16) {
    for (auto& e : v) e = round_bf16(e);
  }
  return v;
}

// rows x cols values in a [bucket_rows, stride] layout, NaN elsewhere.
inline std::vector<float> strided(const std::vector<float>& dense, int rows, int cols, int bucket_rows,
                                  int64_t stride) {
  std::vector<float> out(static_cast<size_t>(bucket_rows) * stride, kNaN);
  for (int r = 0; r < rows; ++r)
    std::copy_n(dense.begin() + static_cast<int64_t>(r) * cols, cols, out.begin() + r * stride);
  return out;
}

// Fills the host data of a problem whose name, dtypes, heads, K, batch, slots and seed are set.
inline void fill(Problem& p, int x_pad, int extra_tokens = 11, int extra_seqs = 2) {
  p.cu.assign(1, 0);
  for (int32_t l : p.lens) p.cu.push_back(p.cu.back() + l);
  p.max_tokens = std::max(1, p.T() + extra_tokens);
  p.max_seqs = std::max(1, p.N() + extra_seqs);
  p.x_stride = p.C() + x_pad;
  p.a_stride = p.Hv + 1 + static_cast<int>(p.seed % 3);
  p.b_stride = p.Hv + static_cast<int>(p.seed % 2);
  const int T = p.T(), C = p.C();
  auto x = test::uniform(static_cast<size_t>(T) * C, p.seed, -2.f, 2.f);
  // Every fifth token is scaled by 2^-10 (exact): its q/k sums of squares come near the 1e-6 epsilon.
  for (int t = 0; t < T; t += 5) {
    for (int c = 0; c < C; ++c) x[static_cast<size_t>(t) * C + c] = std::ldexp(x[static_cast<size_t>(t) * C + c], -10);
  }
  p.x = strided(rounded(x, p.act), T, C, p.max_tokens, p.x_stride);
  // a + dt_bias spans softplus's x > 20 branch; b both tails of the sigmoid.
  p.a = strided(rounded(test::uniform(static_cast<size_t>(T) * p.Hv, p.seed + 1, -8.f, 25.f), p.abt), T, p.Hv,
                p.max_tokens, p.a_stride);
  p.b = strided(rounded(test::uniform(static_cast<size_t>(T) * p.Hv, p.seed + 2, -8.f, 8.f), p.abt), T, p.Hv,
                p.max_tokens, p.b_stride);
  p.w = test::uniform(static_cast<size_t>(C) * p.K, p.seed + 3, -1.f, 1.f);
  p.bias = test::uniform(static_cast<size_t>(C), p.seed + 4, -0.5f, 0.5f);
  p.A_log = test::uniform(static_cast<size_t>(p.Hv), p.seed + 5, -1.f, 1.5f);
  p.dt_bias = test::uniform(static_cast<size_t>(p.Hv), p.seed + 6, -1.f, 1.f);
  p.state0 = rounded(test::uniform(static_cast<size_t>(p.num_slots) * C * (p.K - 1), p.seed + 7, -2.f, 2.f), p.sdt);
}

// Sequences in the given order; slots distinct and scrambled over num_slots = N + 3.
inline void set_batch(Problem& p, const std::vector<Seq>& seqs) {
  std::mt19937_64 rng(p.seed);
  p.num_slots = static_cast<int>(seqs.size()) + 3;
  std::vector<int32_t> perm(static_cast<size_t>(p.num_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t n = 0; n < seqs.size(); ++n) {
    p.lens.push_back(seqs[n].len);
    p.slots.push_back(seqs[n].pad ? -1 : perm[n]);
    p.hist.push_back(seqs[n].hist ? 1 : 0);
  }
}

inline Problem make(const std::string& name, DType act, DType qkv, int Hk, int Hv, int Dv, int K, uint64_t seed) {
  Problem p;
  p.name = name;
  p.act = act;
  p.qkv = qkv;
  p.sdt = seed % 2 ? DType::bf16 : DType::f32;
  p.abt = seed % 4 < 2 ? act : DType::bf16;
  p.Hk = Hk;
  p.Hv = Hv;
  p.Dv = Dv;
  p.K = K;
  p.seed = seed;
  p.has_bias = seed % 3 != 1;
  p.silu = seed % 7 != 3;
  p.odd_w = seed % 5 == 2;
  return p;
}

// The varied batch: zero-length (one with history), one token, shorter than K-1, the 8-token chunk
// edges of conv.fwd, 62..66 (tile edges), long ones with history, two padding sequences (one
// crossing a tile edge); shuffled by the seed.
inline Problem matrix_problem(DType act, DType qkv, int Hk, int Hv, int Dv, int K, uint64_t seed) {
  Problem p = make("matrix", act, qkv, Hk, Hv, Dv, K, seed);
  std::vector<Seq> seqs = {{0, true, false},   {1, true, false},  {3, false, false},  {8, true, false},
                           {9, true, false},   {33, true, false}, {37, false, false}, {5, true, true},
                           {130, true, false}, {0, false, false}, {16, false, false}, {62, true, false},
                           {2, true, false},   {70, true, true},  {66, true, false},  {1, true, false}};
  if (K - 2 >= 1) seqs.push_back({K - 2, true, false});
  std::mt19937_64 rng(seed);
  std::shuffle(seqs.begin(), seqs.end(), rng);
  set_batch(p, seqs);
  const int pads[] = {3, 8, 0};  // unaligned rows (element path), aligned with a gap, dense
  fill(p, pads[seed % 3]);
  return p;
}

// Device buffers of one problem's bucket, for both paths.
struct Rig {
  const Problem* shape;
  DevBuf x, a, b, w, bias, A_log, dt_bias, state, cu, slots, hist, n_seqs, chunks, n_chunks, conv, q, k, v, g, beta;

  explicit Rig(const Problem& p) : shape(&p) {
    const size_t rows = static_cast<size_t>(p.max_tokens), qe = dtype_size(p.qkv);
    x = DevBuf(rows * p.x_stride * dtype_size(p.act));
    a = DevBuf(rows * p.a_stride * dtype_size(p.abt));
    b = DevBuf(rows * p.b_stride * dtype_size(p.abt));
    w = DevBuf((p.w.size() + 4) * 4);
    bias = DevBuf(p.bias.size() * 4);
    A_log = DevBuf(p.A_log.size() * 4);
    dt_bias = DevBuf(p.dt_bias.size() * 4);
    state = DevBuf(p.state0.size() * dtype_size(p.sdt));
    cu = DevBuf((static_cast<size_t>(p.max_seqs) + 1) * 4);
    slots = DevBuf(static_cast<size_t>(p.max_seqs) * 4);
    hist = DevBuf(static_cast<size_t>(p.max_seqs));
    n_seqs = DevBuf(4);
    chunks = DevBuf(static_cast<size_t>(conv_max_chunks(p.max_tokens, p.max_seqs)) * sizeof(ConvChunk) + 1);
    n_chunks = DevBuf(4);
    conv = DevBuf(rows * p.C() * dtype_size(p.act));
    q = DevBuf(rows * p.Hk * p.Dk * qe);
    k = DevBuf(rows * p.Hk * p.Dk * qe);
    v = DevBuf(rows * p.Hv * p.Dv * qe);
    g = DevBuf(rows * p.Hv * 4);
    beta = DevBuf(rows * p.Hv * 4);
  }

  const float* w_ptr() const { return w.as<float>() + (shape->odd_w ? 1 : 0); }

  // Uploads a problem of the same shape and bucket; outputs and the metadata tails to poison.
  void load(const Problem& p, uint8_t poison = kPoison) {
    require(p.C() == shape->C() && p.K == shape->K && p.x_stride == shape->x_stride && p.a_stride == shape->a_stride &&
                p.b_stride == shape->b_stride && p.max_tokens == shape->max_tokens && p.max_seqs == shape->max_seqs &&
                p.num_slots == shape->num_slots && p.act == shape->act && p.qkv == shape->qkv && p.sdt == shape->sdt &&
                p.abt == shape->abt && p.odd_w == shape->odd_w,
            "Rig::load: problem {} does not fit the rig", p.name);
    auto up = [](DevBuf& d, const void* src, size_t bytes, size_t offset = 0) {
      REQUIRE(offset + bytes <= d.bytes());
      if (bytes) check(cudaMemcpy(static_cast<char*>(d.data()) + offset, src, bytes, cudaMemcpyHostToDevice));
    };
    auto up_vals = [&](DevBuf& d, const std::vector<float>& vals, DType t) {
      const auto bytes = test::to_bytes(vals, t);
      up(d, bytes.data(), bytes.size());
    };
    up_vals(x, p.x, p.act);
    up_vals(a, p.a, p.abt);
    up_vals(b, p.b, p.abt);
    up(w, p.w.data(), p.w.size() * 4, p.odd_w ? 4 : 0);
    up_vals(bias, p.bias, DType::f32);
    up_vals(A_log, p.A_log, DType::f32);
    up_vals(dt_bias, p.dt_bias, DType::f32);
    up_vals(state, p.state0, p.sdt);
    for (DevBuf* d : {&cu, &slots, &hist, &chunks, &conv}) d->fill(kPoison);
    for (DevBuf* d : {&q, &k, &v, &g, &beta}) d->fill(poison);
    up(cu, p.cu.data(), p.cu.size() * 4);
    up(slots, p.slots.data(), p.slots.size() * 4);
    up(hist, p.hist.data(), p.hist.size());
    const auto ch = build_conv_chunks(p.cu, kConvChunkTokens);
    const int32_t n = p.N(), nc = static_cast<int32_t>(ch.size());
    up(n_seqs, &n, 4);
    up(chunks, ch.data(), ch.size() * sizeof(ConvChunk));
    up(n_chunks, &nc, 4);
    check(cudaDeviceSynchronize());
  }

  GdnPrefillFusedParams fused() const {
    const Problem& p = *shape;
    GdnPrefillFusedParams f;
    f.x = x.data();
    f.x_stride = p.x_stride;
    f.act = p.act;
    f.state = state.data();
    f.state_dtype = p.sdt;
    f.w = w_ptr();
    f.bias = p.has_bias ? bias.as<float>() : nullptr;
    f.silu = p.silu;
    f.a = a.data();
    f.a_stride = p.a_stride;
    f.b = b.data();
    f.b_stride = p.b_stride;
    f.ab_dtype = p.abt;
    f.A_log = A_log.as<float>();
    f.dt_bias = dt_bias.as<float>();
    f.q = q.data();
    f.k = k.data();
    f.v = v.data();
    f.qkv_dtype = p.qkv;
    f.g = g.as<float>();
    f.beta = beta.as<float>();
    f.cu_seqlens = cu.as<int32_t>();
    f.slots = slots.as<int32_t>();
    f.has_history = hist.as<uint8_t>();
    f.n_seqs = n_seqs.as<int32_t>();
    f.Hk = p.Hk;
    f.Hv = p.Hv;
    f.Dk = p.Dk;
    f.Dv = p.Dv;
    f.K = p.K;
    f.max_tokens = p.max_tokens;
    f.max_seqs = p.max_seqs;
    return f;
  }

  // The unfused reference path: conv.fwd tiled+exact, then postconv megablock over the live T.
  void run_unfused(const Problem& p, cudaStream_t s) {
    ConvFwdParams c;
    c.x = x.data();
    c.x_stride = p.x_stride;
    c.x_dtype = p.act;
    c.out = conv.data();
    c.out_dtype = p.act;
    c.state = state.data();
    c.state_dtype = p.sdt;
    c.w = w_ptr();
    c.bias = p.has_bias ? bias.as<float>() : nullptr;
    c.silu = p.silu;
    c.cu_seqlens = cu.as<int32_t>();
    c.slots = slots.as<int32_t>();
    c.has_history = hist.as<uint8_t>();
    c.n_seqs = n_seqs.as<int32_t>();
    c.chunks = chunks.as<ConvChunk>();
    c.n_chunks = n_chunks.as<int32_t>();
    c.C = p.C();
    c.K = p.K;
    c.max_tokens = p.max_tokens;
    c.max_seqs = p.max_seqs;
    const auto cc =
        conv_fwd_contract(ConvFwdArm::tiled, ConvChunksArm::exact, ConvFwdShape{p.max_tokens, p.max_seqs, p.C(), p.K});
    check(conv_fwd(c, cc, ConvChunksArm::exact, s));
    const GdnPrefillFusedParams f = fused();
    PostconvParams pc;
    pc.conv = conv.data();
    pc.conv_stride = p.C();
    pc.conv_dtype = p.act;
    pc.a = f.a;
    pc.a_stride = f.a_stride;
    pc.b = f.b;
    pc.b_stride = f.b_stride;
    pc.ab_dtype = f.ab_dtype;
    pc.A_log = f.A_log;
    pc.dt_bias = f.dt_bias;
    pc.q = f.q;
    pc.k = f.k;
    pc.v = f.v;
    pc.qkv_dtype = f.qkv_dtype;
    pc.g = f.g;
    pc.beta = f.beta;
    pc.T = p.T();
    pc.Hk = p.Hk;
    pc.Hv = p.Hv;
    pc.Dk = p.Dk;
    pc.Dv = p.Dv;
    const auto pcc =
        postconv_contract(PostconvArm::megablock, PostconvShape{std::max(1, p.T()), p.Hk, p.Hv, p.Dk, p.Dv});
    check(postconv(pc, pcc, s));
  }
};

struct Outcome {
  std::vector<uint8_t> q, k, v, g, beta, state;
};

inline Outcome download(const Rig& r) {
  check(cudaDeviceSynchronize());
  return {r.q.download(), r.k.download(), r.v.download(), r.g.download(), r.beta.download(), r.state.download()};
}

inline Outcome run_fused(const Problem& p, uint8_t poison = kPoison) {
  Rig rig(p);
  rig.load(p, poison);
  check(gdn_prefill_fused(rig.fused(), gdn_prefill_contract(GdnPrefillArm::fused, p.shape()), nullptr));
  return download(rig);
}

// The reference's outcome, with the g and beta rows of padding tokens set to the fused arm's zeros.
inline Outcome run_reference(const Problem& p) {
  Rig rig(p);
  rig.load(p);
  rig.run_unfused(p, nullptr);
  Outcome o = download(rig);
  const size_t row = static_cast<size_t>(p.Hv) * 4;
  for (int n = 0; n < p.N(); ++n) {
    if (p.slots[n] >= 0) continue;
    for (int32_t t = p.cu[n]; t < p.cu[n + 1]; ++t) {
      std::fill_n(o.g.begin() + t * row, row, uint8_t{0});
      std::fill_n(o.beta.begin() + t * row, row, uint8_t{0});
    }
  }
  return o;
}

// "" when the fused outcome keeps every invariant (header), else the first violation.
inline std::string invariants(const Problem& p, const Outcome& o, uint8_t poison) {
  const int T = p.T();
  std::vector<char> pad(static_cast<size_t>(T), 0);
  for (int n = 0; n < p.N(); ++n) {
    if (p.slots[n] < 0) std::fill(pad.begin() + p.cu[n], pad.begin() + p.cu[n + 1], 1);
  }
  struct Out {
    const char* name;
    const std::vector<uint8_t>* bytes;
    DType t;
    size_t row;  // elements per token
  };
  const Out outs[] = {{"q", &o.q, p.qkv, static_cast<size_t>(p.Hk) * p.Dk},
                      {"k", &o.k, p.qkv, static_cast<size_t>(p.Hk) * p.Dk},
                      {"v", &o.v, p.qkv, static_cast<size_t>(p.Hv) * p.Dv},
                      {"g", &o.g, DType::f32, static_cast<size_t>(p.Hv)},
                      {"beta", &o.beta, DType::f32, static_cast<size_t>(p.Hv)}};
  for (const Out& out : outs) {
    const size_t rb = out.row * dtype_size(out.t);
    const auto vals = test::from_bytes(*out.bytes, out.t);
    for (int t = 0; t < p.max_tokens; ++t) {
      const uint8_t* r = out.bytes->data() + t * rb;
      if (t >= T) {
        if (!std::all_of(r, r + rb, [&](uint8_t x) { return x == poison; })) {
          return fmt::format("{} row {} past the live tokens was written", out.name, t);
        }
      } else if (pad[t] && !std::all_of(r, r + rb, [](uint8_t x) { return x == 0; })) {
        return fmt::format("{} row {} of a padding sequence is not zero", out.name, t);
      } else if (std::any_of(vals.begin() + t * out.row, vals.begin() + (t + 1) * out.row,
                             [](float x) { return std::isnan(x); })) {
        return fmt::format("{} row {} holds NaN (a sentinel was read)", out.name, t);
      }
    }
  }
  std::set<int> owned;
  for (int n = 0; n < p.N(); ++n) {
    if (p.slots[n] >= 0 && p.lens[n] > 0) owned.insert(p.slots[n]);
  }
  const auto s0 = test::to_bytes(p.state0, p.sdt);
  const size_t sb = static_cast<size_t>(p.C()) * (p.K - 1) * dtype_size(p.sdt);
  for (int s = 0; s < p.num_slots; ++s) {
    if (!owned.count(s) && std::memcmp(o.state.data() + s * sb, s0.data() + s * sb, sb) != 0) {
      return fmt::format("state of slot {} (no live sequence) changed", s);
    }
  }
  return "";
}

inline std::vector<uint8_t> live_rows(const std::vector<uint8_t>& b, int T, size_t row_bytes) {
  return std::vector<uint8_t>(b.begin(), b.begin() + T * row_bytes);
}

// The fused arm against the reference, byte for byte, plus the invariants and the written-bytes check.
inline void check_problem(const Problem& p) {
  INFO(describe(p));
  REQUIRE(gdn_prefill_contract(GdnPrefillArm::fused, p.shape()).arm == GdnPrefillArm::fused);
  const Outcome want = run_reference(p);
  const Outcome got = run_fused(p);
  CHECK(invariants(p, got, kPoison) == "");
  CHECK(byte_diff(got.q, want.q, p.qkv) == "");
  CHECK(byte_diff(got.k, want.k, p.qkv) == "");
  CHECK(byte_diff(got.v, want.v, p.qkv) == "");
  CHECK(byte_diff(got.g, want.g, DType::f32) == "");
  CHECK(byte_diff(got.beta, want.beta, DType::f32) == "");
  CHECK(byte_diff(got.state, want.state, p.sdt) == "");
  // Every live byte written: the same bytes whatever the outputs started as.
  const Outcome got2 = run_fused(p, 0x5A);
  CHECK(invariants(p, got2, 0x5A) == "");
  const int T = p.T();
  const size_t qk_row = static_cast<size_t>(p.Hk) * p.Dk * dtype_size(p.qkv);
  const size_t v_row = static_cast<size_t>(p.Hv) * p.Dv * dtype_size(p.qkv), gate_row = static_cast<size_t>(p.Hv) * 4;
  CHECK(live_rows(got2.q, T, qk_row) == live_rows(got.q, T, qk_row));
  CHECK(live_rows(got2.k, T, qk_row) == live_rows(got.k, T, qk_row));
  CHECK(live_rows(got2.v, T, v_row) == live_rows(got.v, T, v_row));
  CHECK(live_rows(got2.g, T, gate_row) == live_rows(got.g, T, gate_row));
  CHECK(live_rows(got2.beta, T, gate_row) == live_rows(got.beta, T, gate_row));
  CHECK(got2.state == got.state);
}

}  // namespace sg::test::gpf
