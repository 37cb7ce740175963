// attention_fixture.h: what the attention GPU tests share (test_attention.cpp: bf16 KV cache;
// test_attention_f32_cache.cpp: f32 KV cache): shapes, packed token batches and their device
// metadata, random layer inputs, a poisoned slot-indexed KV cache of either dtype with random
// history, attn_prep and attention params, the CPU attention reference fed the GPU's own
// q / gate / cache, and counting elements outside a tolerance.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/attention.h"
#include "kernels/attn_prep.h"
#include "kernels/ref/attention_ref.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

namespace sg::test::attn {

struct Shape {
  int Hq, Hkv, D, rot;
  double theta;
};
inline const Shape kShapes[] = {{16, 4, 256, 64, 1e7}, {24, 4, 256, 64, 1e7}, {4, 2, 32, 16, 1e4}};
inline constexpr float kEps = 1e-6f;

struct Seq {
  int hist, n, slot;  // slot < 0: a padding sequence
};

// Packed token metadata: sequences in order, then `pad` padding rows (token_seq -1).
struct Batch {
  std::vector<int32_t> positions, token_seq, slots;
  int T = 0;
  bool live(int t) const { return token_seq[t] >= 0 && slots[token_seq[t]] >= 0; }
  int slot(int t) const { return slots[token_seq[t]]; }
};

inline Batch make_batch(const std::vector<Seq>& seqs, int pad) {
  Batch b;
  for (size_t s = 0; s < seqs.size(); ++s) {
    b.slots.push_back(seqs[s].slot);
    for (int i = 0; i < seqs[s].n; ++i) {
      b.positions.push_back(seqs[s].hist + i);
      b.token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  for (int i = 0; i < pad; ++i) {
    b.positions.push_back(0);
    b.token_seq.push_back(-1);
  }
  b.T = static_cast<int>(b.positions.size());
  return b;
}

struct DevMeta {
  test::DevBuf pos, seq, slots;
  explicit DevMeta(const Batch& b)
      : pos(test::DevBuf::from_i32(b.positions)),
        seq(test::DevBuf::from_i32(b.token_seq)),
        slots(test::DevBuf::from_i32(b.slots)) {}
  AttnTokenMeta meta() const { return {pos.as<int32_t>(), seq.as<int32_t>(), slots.as<int32_t>(), nullptr}; }
};

// One layer's inputs for a batch: projections (values of dtype `act`, which is also the q / gate
// dtype of attn_prep) and f32 norm weights.
struct Inputs {
  std::vector<float> qg, k, v, qn, kn;
  DType act = DType::bf16;
};

// Uniform values in [lo, hi) for a buffer of dtype t: bf16-representable for bf16, unrounded for
// f32 (so any bf16 rounding on the way to an f32 buffer shows).
inline std::vector<float> random_values(DType t, size_t n, uint64_t seed, float lo, float hi) {
  return t == DType::bf16 ? test::uniform_bf16(n, seed, lo, hi) : test::uniform(n, seed, lo, hi);
}

inline Inputs make_inputs(const Shape& sh, int T, uint64_t seed, DType act = DType::bf16) {
  const auto gen = [act](size_t n, uint64_t s, float lo, float hi) { return random_values(act, n, s, lo, hi); };
  Inputs in;
  in.qg = gen(static_cast<size_t>(T) * sh.Hq * 2 * sh.D, seed, -2.f, 2.f);
  in.k = gen(static_cast<size_t>(T) * sh.Hkv * sh.D, seed + 1, -2.f, 2.f);
  in.v = gen(in.k.size(), seed + 2, -1.f, 1.f);
  in.qn = test::uniform(sh.D, seed + 3, -0.5f, 0.5f);
  in.kn = test::uniform(sh.D, seed + 4, -0.5f, 0.5f);
  in.act = act;
  return in;
}

// The slot-indexed KV cache [num_slots, max_ctx, Hkv, D] of `dtype`, every byte `poison`.
struct Cache {
  int num_slots, max_ctx;
  DType dtype;
  test::DevBuf k, v;  // [num_slots, max_ctx, Hkv, D] each
  size_t elems;
  Cache(const Shape& sh, int num_slots_, int max_ctx_, uint8_t poison, DType dtype_ = DType::bf16)
      : num_slots(num_slots_),
        max_ctx(max_ctx_),
        dtype(dtype_),
        k(static_cast<size_t>(num_slots_) * max_ctx_ * sh.Hkv * sh.D * dtype_size(dtype_), poison),
        v(static_cast<size_t>(num_slots_) * max_ctx_ * sh.Hkv * sh.D * dtype_size(dtype_), poison),
        elems(static_cast<size_t>(num_slots_) * max_ctx_ * sh.Hkv * sh.D) {}
  size_t index(const Shape& sh, int slot, int pos, int g, int d) const {
    return ((static_cast<size_t>(slot) * max_ctx + pos) * sh.Hkv + g) * sh.D + d;
  }
};

// Writes random history (positions 0..hist-1) for each live sequence straight into the cache
// (random_values of the cache dtype).
inline void fill_history(const Shape& sh, Cache& c, const std::vector<Seq>& seqs, uint64_t seed) {
  const size_t es = dtype_size(c.dtype);
  auto kb = c.k.download(), vb = c.v.download();
  for (const Seq& s : seqs) {
    if (s.slot < 0 || s.hist == 0) continue;
    const size_t n = static_cast<size_t>(s.hist) * sh.Hkv * sh.D;
    auto kv = test::to_bytes(random_values(c.dtype, n, seed + s.slot, -2.f, 2.f), c.dtype);
    auto vv = test::to_bytes(random_values(c.dtype, n, seed + 100 + s.slot, -1.f, 1.f), c.dtype);
    std::copy(kv.begin(), kv.end(), kb.begin() + c.index(sh, s.slot, 0, 0, 0) * es);
    std::copy(vv.begin(), vv.end(), vb.begin() + c.index(sh, s.slot, 0, 0, 0) * es);
  }
  c.k = test::DevBuf::from_bytes(kb);
  c.v = test::DevBuf::from_bytes(vb);
}

struct PrepOut {
  test::DevBuf q, gate;  // [T, Hq, D] each, of `dtype`
  DType dtype;
};

// attn_prep of the inputs (in.act in, in.act q / gate out) into the cache (c.dtype); with
// `rope_table`, the rotary angles come from a table rope_table_fill wrote (with bf16 everywhere,
// the 16-byte kernel runs then, the per-element one without a table); norm weights of norm_dtype.
inline PrepOut run_prep(const Shape& sh, const Batch& b, const DevMeta& dm, const Inputs& in, Cache& c,
                        bool rope_table = false, DType norm_dtype = DType::f32) {
  auto dqg = test::DevBuf::from(in.qg, in.act), dk = test::DevBuf::from(in.k, in.act),
       dv = test::DevBuf::from(in.v, in.act);
  auto dqn = test::DevBuf::from(in.qn, norm_dtype), dkn = test::DevBuf::from(in.kn, norm_dtype);
  const size_t qbytes = static_cast<size_t>(b.T) * sh.Hq * sh.D * dtype_size(in.act);
  PrepOut o{test::DevBuf(qbytes), test::DevBuf(qbytes), in.act};
  AttnPrepParams p;
  p.qg = dqg.data();
  p.k = dk.data();
  p.v = dv.data();
  p.in_dtype = in.act;
  p.q_norm = dqn.data();
  p.k_norm = dkn.data();
  p.norm_dtype = norm_dtype;
  p.q = o.q.data();
  p.gate = o.gate.data();
  p.q_dtype = in.act;
  p.k_cache = c.k.data();
  p.v_cache = c.v.data();
  p.cache_dtype = c.dtype;
  p.meta = dm.meta();
  p.T = b.T;
  p.Hq = sh.Hq;
  p.Hkv = sh.Hkv;
  p.D = sh.D;
  p.rotary_dim = sh.rot;
  p.max_context = c.max_ctx;
  p.eps = kEps;
  p.rope_theta = sh.theta;
  test::DevBuf table(static_cast<size_t>(c.max_ctx) * std::max(sh.rot, 2) * sizeof(float));
  if (rope_table) {
    check(rope_table_fill(static_cast<float*>(table.data()), c.max_ctx, sh.rot, sh.theta, nullptr));
    p.rope_table = static_cast<const float*>(table.data());
  }
  check(attn_prep(p, nullptr));
  check(cudaDeviceSynchronize());
  return o;
}

inline AttentionParams attn_params(const Shape& sh, const Batch& b, const DevMeta& dm, const PrepOut& po,
                                   const Cache& c, test::DevBuf& out, DType out_dtype) {
  AttentionParams p;
  p.q = po.q.data();
  p.gate = po.gate.data();
  p.q_dtype = po.dtype;
  p.k_cache = c.k.data();
  p.v_cache = c.v.data();
  p.cache_dtype = c.dtype;
  p.meta = dm.meta();
  p.out = out.data();
  p.out_dtype = out_dtype;
  p.T = b.T;
  p.Hq = sh.Hq;
  p.Hkv = sh.Hkv;
  p.D = sh.D;
  p.max_context = c.max_ctx;
  return p;
}

// CPU attention for the listed rows, from the GPU's own q / gate / cache (as f32 values).
inline std::vector<float> ref_attention(const Shape& sh, const Batch& b, const std::vector<float>& q,
                                        const std::vector<float>& gate, const std::vector<float>& kc,
                                        const std::vector<float>& vc, const Cache& c, const std::vector<int>& rows,
                                        ref::Store st) {
  const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
  std::vector<float> out(static_cast<size_t>(b.T) * row, 0.f);
  for (int t : rows) {
    if (!b.live(t)) continue;
    const int slot = b.slot(t), pos = b.positions[t];
    ref::KvView view{kc.data() + c.index(sh, slot, 0, 0, 0), vc.data() + c.index(sh, slot, 0, 0, 0), pos};
    ref::attention_decode(q.data() + t * row, kc.data() + c.index(sh, slot, pos, 0, 0),
                          vc.data() + c.index(sh, slot, pos, 0, 0), gate.data() + t * row, &view, out.data() + t * row,
                          1, sh.Hq, sh.Hkv, sh.D, st);
  }
  return out;
}

// Runs `launch` on stream s, eagerly or captured into a graph that is instantiated and replayed
// once, then synchronises (the tests' replay == eager checks).
inline void run_once(cudaStream_t s, bool graph, const std::function<cudaError_t(cudaStream_t)>& launch) {
  if (!graph) {
    check(launch(s));
    check(cudaStreamSynchronize(s));
    return;
  }
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const cudaError_t launched = launch(s);
  check(cudaStreamEndCapture(s, &g));
  check(launched);
  check(cudaGraphInstantiate(&ge, g, 0));
  check(cudaGraphLaunch(ge, s));
  check(cudaStreamSynchronize(s));
  check(cudaGraphExecDestroy(ge));
  check(cudaGraphDestroy(g));
}

// Runs `run(stream, out, graph)` into three buffers of `bytes` bytes poisoned with 0x5A: eagerly,
// eagerly again and captured into a graph; checks that the three hold the same bytes and returns
// the eager run's.
inline std::vector<uint8_t> eager_rerun_replay(size_t bytes,
                                               const std::function<void(cudaStream_t, test::DevBuf&, bool)>& run) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  test::DevBuf eager(bytes, 0x5A), again(bytes, 0x5A), graphed(bytes, 0x5A);
  run(s, eager, false);
  run(s, again, false);
  run(s, graphed, true);
  check(cudaStreamDestroy(s));
  const auto e = eager.download();
  CHECK(test::byte_diff(again.download(), e, DType::bf16) == "");
  CHECK(test::byte_diff(graphed.download(), e, DType::bf16) == "");
  return e;
}

// The rejections both tensor-core kernels share (`launch` runs one of them on valid params p): an
// f32 cache or q, a D they are not built for, Hq not a multiple of Hkv, a misaligned cache.
inline void check_mma_rejects(const AttentionParams& p,
                              const std::function<cudaError_t(const AttentionParams&)>& launch) {
  AttentionParams bad = p;
  bad.cache_dtype = DType::f32;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.q_dtype = DType::f32;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.D = 48;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.Hq = 3;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.k_cache = static_cast<const char*>(p.k_cache) + 2;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.v_cache = static_cast<const char*>(p.v_cache) + 2;
  CHECK(launch(bad) == cudaErrorInvalidValue);
  bad = p;
  bad.T = 0;
  CHECK(launch(bad) == cudaSuccess);
}

// |got - want| <= rel * |want| + abs.
struct Tol {
  double rel, abs;
};

// Number of elements of the listed rows outside tolerance; `first` describes the first one.
inline size_t count_bad(const std::vector<float>& got, const std::vector<float>& want, const std::vector<int>& rows,
                        size_t row, Tol tol, std::string& first) {
  size_t bad = 0;
  for (int r : rows) {
    for (size_t i = r * row; i < (r + 1) * row; ++i) {
      if (!(std::fabs(got[i] - want[i]) <= tol.rel * std::fabs(want[i]) + tol.abs)) {
        if (bad++ == 0)
          first = "row " + std::to_string(r) + " elem " + std::to_string(i - r * row) + ": got " +
                  std::to_string(got[i]) + " want " + std::to_string(want[i]);
      }
    }
  }
  return bad;
}

// The prefill tests' batches (tuned, f32-cache and generic kernels): contexts that cross the key
// tiles at odd points (17, 43, 1024, 63), history, a zero-length and a padding sequence, padding
// rows, and one 4096-token sequence.
struct PrefillCase {
  std::vector<Seq> seqs;
  int pad;
  int max_ctx;
  int sample;  // check every sample-th row (plus the last 8 rows)
  // The rows checked: every sample-th, and the last 8.
  std::vector<int> rows(int T) const {
    std::vector<int> r;
    for (int t = 0; t < T; ++t)
      if (t % sample == 0 || t >= T - 8) r.push_back(t);
    return r;
  }
};
inline const std::vector<PrefillCase>& prefill_cases() {
  static const std::vector<PrefillCase> cases = {
      {{{0, 17, 3}, {5, 0, 1}, {1000, 24, 0}, {0, 1, 4}, {2, 3, -1}, {3, 40, 2}}, 5, 1100, 1},
      {{{0, 1024, 1}, {0, 0, 2}, {30, 33, 0}}, 3, 1100, 3},
      {{{0, 4096, 2}}, 16, 4200, 17},
  };
  return cases;
}

inline std::vector<int> all_rows(int T) {
  std::vector<int> r(T);
  for (int i = 0; i < T; ++i) r[i] = i;
  return r;
}

inline bool has_nan(const std::vector<float>& v) {
  for (float x : v)
    if (std::isnan(x)) return true;
  return false;
}

// The prefill kernel on p (its output `out`, [T, row] of ot), then the decode kernel on the same
// rows (every token a row) into a fresh poisoned buffer: each within tol of want on `rows`, no NaN
// in the prefill's output. Returns the prefill's output for further checks.
inline std::vector<float> check_prefill_then_decode(AttentionParams p, const test::DevBuf& out, int T, size_t row,
                                                    DType ot, const std::vector<float>& want,
                                                    const std::vector<int>& rows, Tol tol) {
  check(attention_prefill(p, nullptr));
  check(cudaDeviceSynchronize());
  const auto got = out.download_f32(ot);
  CHECK_FALSE(has_nan(got));
  std::string first;
  const size_t bad = count_bad(got, want, rows, row, tol, first);
  INFO("prefill: " << first);
  CHECK(bad == 0);
  test::DevBuf out2(T * row * dtype_size(ot));  // [T, Hq, D], poisoned
  p.out = out2.data();
  check(attention_decode(p, nullptr));
  check(cudaDeviceSynchronize());
  std::string first2;
  const size_t bad2 = count_bad(out2.download_f32(ot), want, rows, row, tol, first2);
  INFO("decode on prefill rows: " << first2);
  CHECK(bad2 == 0);
  return got;
}

}  // namespace sg::test::attn
