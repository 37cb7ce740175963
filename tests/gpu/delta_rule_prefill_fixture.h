// delta_rule_prefill_fixture.h: what the GPU tests of the two delta-rule prefill kernels (the scan,
// test_delta_rule_prefill.cpp, and the chunked WY form, test_delta_rule_prefill_chunked.cpp) share:
// a varlen problem (heads, dtype, lengths, slots, history flags, two dead programs with garbage
// metadata) and its host inputs, with NaN in every row past the live tokens; its device copies and
// the launch params over them; and, for the two chunked forms (CUDA cores and tensor cores), the
// double reference, the tolerance check and the untouched-bytes check.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/numeric.h"
#include "kernels/ref/delta_rule_ref.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"
#include "tests/support/tolerance.h"
#include "tools/cli/compare.h"

namespace sg::test::drp {

struct Shape {
  int Hk, Hv, Dk, Dv;
};

// One varlen batch and its host inputs (values exactly representable in the dtype).
struct Problem {
  Shape sh{};
  DType t = DType::bf16;
  int num_slots = 10;
  int n_live = 0, max_seqs = 0;
  int64_t T = 0, max_tokens = 0;
  std::vector<int32_t> cu;     // [max_seqs + 1]; entries past n_live + 1 are garbage
  std::vector<int32_t> slots;  // [max_seqs]
  std::vector<uint8_t> hist;   // [max_seqs]
  std::vector<float> q, k, v;  // [max_tokens, Hk, Dk] x2, [max_tokens, Hv, Dv]; rows >= T are NaN
  std::vector<float> g, beta;  // [max_tokens, Hv]
  std::vector<float> state0;   // [num_slots, Hv, Dk, Dv]
  int64_t row() const { return static_cast<int64_t>(sh.Hv) * sh.Dv; }  // output elements per token
  size_t out_elems() const { return static_cast<size_t>(max_tokens * row()); }
  size_t live_out_elems() const { return static_cast<size_t>(T * row()); }
  int64_t head_size() const { return static_cast<int64_t>(sh.Dk) * sh.Dv; }
  size_t out_bytes() const { return static_cast<size_t>(max_tokens * row()) * dtype_size(t); }
};

inline float round_to(DType t, float x) { return t == DType::bf16 ? round_bf16(x) : x; }

// Rows of `dim` values scaled to unit L2 norm (as postconv makes q and k), rounded to the dtype.
inline std::vector<float> unit_rows(size_t rows, int dim, uint64_t seed, DType t) {
  auto x = test::uniform(rows * dim, seed, -1.f, 1.f);
  for (size_t r = 0; r < rows; ++r) {
    double n2 = 0;
    for (int i = 0; i < dim; ++i) n2 += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(n2 + 1e-12));
    for (int i = 0; i < dim; ++i) x[r * dim + i] = round_to(t, x[r * dim + i] * inv);
  }
  return x;
}

// Two dead programs follow the live ones (max_seqs = live + 2); their metadata is garbage that
// would corrupt slot 1 (unused) or read far out of bounds if it were interpreted.
inline Problem make_problem(Shape sh, DType t, const std::vector<int32_t>& lens, const std::vector<int32_t>& slots,
                            const std::vector<uint8_t>& hist, uint64_t seed) {
  Problem P;
  P.sh = sh;
  P.t = t;
  P.n_live = static_cast<int>(lens.size());
  P.max_seqs = P.n_live + 2;
  P.cu.assign(1, 0);
  for (int32_t l : lens) P.cu.push_back(P.cu.back() + l);
  P.T = P.cu.back();
  P.max_tokens = P.T + 3;
  P.cu.push_back(1 << 30);
  P.cu.push_back(-5);
  P.slots = slots;
  P.slots.insert(P.slots.end(), {1, 1});
  P.hist = hist;
  P.hist.insert(P.hist.end(), {1, 0});
  const size_t Tm = static_cast<size_t>(P.max_tokens);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  P.q = unit_rows(Tm * sh.Hk, sh.Dk, seed, t);
  P.k = unit_rows(Tm * sh.Hk, sh.Dk, seed + 1, t);
  P.v = t == DType::bf16 ? test::uniform_bf16(Tm * sh.Hv * sh.Dv, seed + 2, -1.f, 1.f)
                         : test::uniform(Tm * sh.Hv * sh.Dv, seed + 2, -1.f, 1.f);
  P.g = test::uniform(Tm * sh.Hv, seed + 3, -1.f, 0.f);
  P.beta = test::uniform(Tm * sh.Hv, seed + 4, 0.f, 1.f);
  for (size_t i = 0; i < P.g.size(); i += 37) P.g[i] = -12.f;  // a few tokens with fast decay
  for (size_t i = static_cast<size_t>(P.T) * sh.Hk * sh.Dk; i < P.q.size(); ++i) P.q[i] = P.k[i] = nan;
  for (size_t i = static_cast<size_t>(P.T * P.row()); i < P.v.size(); ++i) P.v[i] = nan;
  for (size_t i = static_cast<size_t>(P.T) * sh.Hv; i < P.g.size(); ++i) P.g[i] = P.beta[i] = nan;
  P.state0 = test::uniform(static_cast<size_t>(P.num_slots) * sh.Hv * P.head_size(), seed + 5, -0.5f, 0.5f);
  return P;
}

// The live sequences of `whole` cut to token ranges [begin[n], begin[n] + lens[n]) (rows of the
// whole batch), as a batch of their own: same slots, history flag `hist`, starting state `state`.
// Prefilling the first parts, then the rest with history, must agree with prefilling `whole`.
inline Problem segment_problem(const Problem& whole, const std::vector<int64_t>& begin,
                               const std::vector<int32_t>& lens, uint8_t hist, const std::vector<float>& state) {
  const Shape sh = whole.sh;
  const size_t n_seqs = lens.size();
  Problem P = whole;
  P.cu.assign(1, 0);
  for (int32_t l : lens) P.cu.push_back(P.cu.back() + l);
  P.T = P.cu.back();
  P.max_tokens = P.T;
  P.max_seqs = P.n_live = static_cast<int>(n_seqs);
  P.hist.assign(n_seqs, hist);
  P.slots.assign(whole.slots.begin(), whole.slots.begin() + static_cast<int64_t>(n_seqs));
  P.state0 = state;
  const auto gather = [&](const std::vector<float>& src, int64_t width) {  // [T, width] rows of the parts
    std::vector<float> dst;
    for (size_t n = 0; n < n_seqs; ++n)
      dst.insert(dst.end(), src.begin() + begin[n] * width, src.begin() + (begin[n] + lens[n]) * width);
    return dst;
  };
  P.q = gather(whole.q, static_cast<int64_t>(sh.Hk) * sh.Dk);
  P.k = gather(whole.k, static_cast<int64_t>(sh.Hk) * sh.Dk);
  P.v = gather(whole.v, P.row());
  P.g = gather(whole.g, sh.Hv);
  P.beta = gather(whole.beta, sh.Hv);
  return P;
}

// Device copies of a problem's inputs and metadata.
struct DevProblem {
  DevBuf q, k, v, g, beta, cu, slots, hist, n;
  explicit DevProblem(const Problem& P)
      : q(DevBuf::from(P.q, P.t)),
        k(DevBuf::from(P.k, P.t)),
        v(DevBuf::from(P.v, P.t)),
        g(DevBuf::from(P.g, DType::f32)),
        beta(DevBuf::from(P.beta, DType::f32)),
        cu(DevBuf::from_i32(P.cu)),
        slots(DevBuf::from_i32(P.slots)),
        hist(DevBuf::from_bytes(P.hist)),
        n(DevBuf::from_i32({P.n_live})) {}
};

// Output bytes [max_tokens, Hv, Dv] and the whole state cache after a run.
struct Result {
  std::vector<uint8_t> out, state;
};

// The prefill params of problem P over its device copies, a state cache and an output buffer.
inline DeltaRulePrefillParams prefill_params(const Problem& P, const DevProblem& d, void* state, void* out,
                                             int split = 0) {
  DeltaRulePrefillParams p;
  p.q = d.q.data();
  p.k = d.k.data();
  p.v = d.v.data();
  p.qkv_dtype = P.t;
  p.g = d.g.as<float>();
  p.beta = d.beta.as<float>();
  p.cu_seqlens = d.cu.as<int32_t>();
  p.slots = d.slots.as<int32_t>();
  p.has_history = d.hist.as<uint8_t>();
  p.n_seqs = d.n.as<int32_t>();
  p.state = state;
  p.out = out;
  p.out_dtype = P.t;
  p.max_seqs = P.max_seqs;
  p.Hk = P.sh.Hk;
  p.Hv = P.sh.Hv;
  p.Dk = P.sh.Dk;
  p.Dv = P.sh.Dv;
  p.split = split;
  return p;
}

// ---- What the chunked-form tests share (test_delta_rule_prefill_chunked.cpp, _mma.cpp).

constexpr double kTolBf16 = 8e-3;  // normalised, bf16 outputs (delta_rule_ref.h)

// Device copies of a problem's inputs and metadata, plus its state and output buffers.
struct Rig : DevProblem {
  DevBuf state, out;
  explicit Rig(const Problem& P) : DevProblem(P), state(DevBuf::from(P.state0, DType::f32)), out(P.out_bytes()) {}
  // state = state0, every output byte = poison.
  void reset(const Problem& P, uint8_t poison) {
    const auto s0 = to_bytes(P.state0, DType::f32);
    check(cudaMemcpy(state.data(), s0.data(), s0.size(), cudaMemcpyHostToDevice));
    out.fill(poison);
    check(cudaDeviceSynchronize());  // the memset is on the legacy stream; replays run on another
  }
  DeltaRulePrefillParams params(const Problem& P) const {
    return prefill_params(P, *this, state.as<float>(), out.data());
  }
};

// ||a - b|| / ||b|| (tests/support/tolerance.h).
inline double norm_err(const float* a, const float* b, size_t n) { return l2_normalised_error(a, b, n); }

// The expected values: outputs [T, Hv, Dv] (as stored) and the whole state cache.
struct Expected {
  std::vector<float> out, state;
  const char* what;
};

inline Expected reference(const Problem& P) {
  Expected x{std::vector<float>(static_cast<size_t>(P.T * P.row()), 0.0f), P.state0, "ref::delta_rule_prefill_chunked"};
  ref::delta_rule_prefill_chunked(
      ref::DeltaShape{P.sh.Hk, P.sh.Hv, P.sh.Dk, P.sh.Dv, P.t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32},
      P.n_live, P.cu.data(), P.q.data(), P.k.data(), P.v.data(), P.g.data(), P.beta.data(), P.slots.data(),
      P.hist.data(), x.state.data(), x.out.data());
  return x;
}

// Where a failing comparison differs (tools/cli/compare.h): for each live sequence of a slot,
// the map of its outputs [tokens, Hv, Dv] (got_out, want_out: the whole [T, Hv, Dv] buffers) and of
// its slot's final state (got_state, want_state: the whole state caches), as warnings; nullptr
// leaves a part out. The pattern (which chunks, rows, heads, columns) names the product at fault.
inline void warn_error_maps(const Problem& P, const float* got_out, const float* want_out, const float* got_state,
                            const float* want_state, double tol) {
  const int64_t row = P.row(), hs = P.sh.Hv * P.head_size();
  for (int n = 0; n < P.n_live; ++n) {
    const int64_t b = P.cu[n], e = P.cu[n + 1];
    if (e == b || P.slots[n] < 0) continue;
    if (got_out != nullptr)
      WARN("outputs of sequence " << n << " (" << e - b << " tokens): "
                                  << diag::error_map(got_out + b * row, want_out + b * row,
                                                     static_cast<size_t>((e - b) * row),
                                                     diag::delta_out_views(e - b, P.sh.Hv, P.sh.Dv), tol));
    if (got_state != nullptr)
      WARN("final state of sequence " << n << " (slot " << P.slots[n] << "): "
                                      << diag::error_map(got_state + P.slots[n] * hs, want_state + P.slots[n] * hs,
                                                         static_cast<size_t>(hs),
                                                         diag::delta_state_views(P.sh.Hv, P.sh.Dk, P.sh.Dv), tol));
  }
}

// Outputs of each live non-padding sequence and the final state of its slot within tolerance of
// `want`; padding rows exactly +0.
// The worst normalised errors check_close saw (f32 outputs, final states), for measuring tolerances.
struct Worst {
  double out = 0, state = 0;
};

inline void check_close(const Problem& P, const Result& r, const Expected& want, double tol_f32,
                        Worst* worst = nullptr) {
  INFO("against " << want.what);
  const auto got = from_bytes(r.out, P.t);
  const auto got_s = from_bytes(r.state, DType::f32);
  const int64_t row = P.row();
  bool out_failed = false, state_failed = false;
  for (int n = 0; n < P.n_live; ++n) {
    const int64_t b = P.cu[n], e = P.cu[n + 1];
    if (e == b) continue;
    CAPTURE(n, P.slots[n], static_cast<int>(P.hist[n]), e - b);
    if (P.slots[n] < 0) {
      size_t nonzero = 0;
      for (int64_t i = b * row; i < e * row; ++i) nonzero += got[i] != 0.0f || std::signbit(got[i]);
      CHECK(nonzero == 0);
      continue;
    }
    const double err = norm_err(got.data() + b * row, want.out.data() + b * row, static_cast<size_t>((e - b) * row));
    CAPTURE(err);
    out_failed |= !(err <= (P.t == DType::bf16 ? kTolBf16 : tol_f32));
    if (P.t == DType::bf16) {
      size_t bad = 0;
      for (int64_t i = b * row; i < e * row; ++i) {
        const double tol = 2 * std::ldexp(1.0, -7) * std::fabs(want.out[i]) + 1e-4;
        bad += !(std::fabs(got[i] - want.out[i]) <= tol);
      }
      out_failed |= bad != 0;
      CHECK(bad == 0);
      CHECK(err <= kTolBf16);
    } else {
      CHECK(err <= tol_f32);
      if (worst != nullptr && err > worst->out) worst->out = err;
    }
    const int64_t s0 = P.slots[n] * P.sh.Hv * P.head_size();
    const double serr =
        norm_err(got_s.data() + s0, want.state.data() + s0, static_cast<size_t>(P.sh.Hv * P.head_size()));
    CAPTURE(serr);
    state_failed |= !(serr <= tol_f32);
    CHECK(serr <= tol_f32);
    if (worst != nullptr && serr > worst->state) worst->state = serr;
  }
  // The maps count elements off by more than a fraction of the largest |want|: tol_f32 of it for f32
  // outputs, half a bf16 step of it for bf16 (the checks above are an L2 norm and a per-element
  // bound; the maps' bins show where the differences are either way).
  if (out_failed)
    warn_error_maps(P, got.data(), want.out.data(), nullptr, nullptr,
                    P.t == DType::bf16 ? std::ldexp(1.0, -8) : tol_f32);
  if (state_failed) warn_error_maps(P, nullptr, nullptr, got_s.data(), want.state.data(), tol_f32);
}

// Slots that no live, non-empty, non-padding sequence owns keep their bytes; output bytes past the
// live tokens keep the poison.
inline void check_untouched(const Problem& P, const Result& r, uint8_t poison) {
  std::vector<bool> owned(static_cast<size_t>(P.num_slots), false);
  for (int n = 0; n < P.n_live; ++n) {
    if (P.slots[n] >= 0 && P.cu[n + 1] > P.cu[n]) owned[static_cast<size_t>(P.slots[n])] = true;
  }
  const auto s0 = to_bytes(P.state0, DType::f32);
  const size_t slot_bytes = static_cast<size_t>(P.sh.Hv * P.head_size()) * sizeof(float);
  for (int s = 0; s < P.num_slots; ++s) {
    if (owned[static_cast<size_t>(s)]) continue;
    CAPTURE(s);
    CHECK(std::memcmp(r.state.data() + s * slot_bytes, s0.data() + s * slot_bytes, slot_bytes) == 0);
  }
  const size_t live_bytes = static_cast<size_t>(P.T * P.row()) * dtype_size(P.t);
  size_t tail_changed = 0;
  for (size_t i = live_bytes; i < r.out.size(); ++i) tail_changed += r.out[i] != poison;
  CHECK(tail_changed == 0);
}

inline const std::vector<int32_t> kLens = {63, 0, 1024, 70, 1, 64, 200, 65};
// Sequence 3 is padding (70 tokens); slot 7 belongs to the zero-length sequence and must keep its
// bytes even without history.
inline const std::vector<int32_t> kSlots = {3, 7, 0, -1, 8, 5, 2, 9};
inline const std::vector<std::vector<uint8_t>> kHists = {
    {1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 1, 1, 0, 1, 0}};
inline const char* const kHistNames[] = {"all history", "no history", "mixed"};

// A captured launch replays the eager bytes: batch A (lengths 300, 1, 65, 0, 40 with a padding
// sequence) fixes the buffers and is captured; batch B, another composition that fits them (fewer
// tokens, one sequence fewer live, other slots and histories, garbage metadata after the live
// entries), is written into the same device metadata. For each, replay == eager bytes (outputs and
// state) and nothing outside the batch is touched. `launch(params, stream)` is the form's launcher
// (captured under `arm`), `run(P, rig)` an eager run. Returns the capture's one kernel node, for the
// caller's grid, block and shared-memory checks (check_replay_nodes: a form of `kernels` kernels,
// its nodes in launch order).
template <typename Launch, typename Run>
std::vector<ManifestNode> check_replay_nodes(Shape sh, DType t, const char* arm, size_t kernels, Launch launch,
                                             Run run) {
  const Problem A = make_problem(sh, t, {300, 1, 65, 0, 40}, {4, 2, -1, 6, 0}, {1, 0, 1, 0, 1}, 4242);
  Problem B = A;
  B.n_live = 3;
  B.cu = {0, 129, 130, 194, 1 << 30, -5, 7};  // lengths 129, 1, 64, then garbage
  B.slots = {9, -1, 3, 1, 1, 1, 1};
  B.hist = {0, 1, 1, 1, 0, 1, 0};
  B.T = 194;
  Rig rig(A);
  Stream stream;
  NodeRecorder rec;
  const std::string name = std::string("delta_rule.prefill ") + arm;
  CapturedGraph graph = CapturedGraph::capture(name, stream.get(), [&] {
    check(launch(rig.params(A), stream.get()));
    rec.launched(stream.get(), NodeLabel{-1, "delta_rule.prefill", arm, 0}, static_cast<int>(kernels));
  });
  const Manifest m = build_manifest(name, "-", graph.graph(), rec);
  REQUIRE(m.nodes.size() == kernels);
  for (const Problem* P : {&A, static_cast<const Problem*>(&B)}) {
    CAPTURE(P->n_live, P->T);
    // Metadata of this batch into the captured buffers (B's inputs are A's rows: same tokens).
    check(cudaMemcpy(rig.cu.data(), P->cu.data(), P->cu.size() * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(rig.slots.data(), P->slots.data(), P->slots.size() * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(rig.hist.data(), P->hist.data(), P->hist.size(), cudaMemcpyHostToDevice));
    check(cudaMemcpy(rig.n.data(), &P->n_live, 4, cudaMemcpyHostToDevice));
    const Result eager = run(*P, rig);
    rig.reset(*P, 0xA5);
    graph.replay(stream.get());
    stream.sync();
    const Result replayed{rig.out.download(), rig.state.download()};
    CHECK(byte_diff(replayed.out, eager.out, t) == "");
    CHECK(byte_diff(replayed.state, eager.state, DType::f32) == "");
    check_untouched(*P, replayed, 0xA5);
  }
  return m.nodes;
}

template <typename Launch, typename Run>
ManifestNode check_replay(Shape sh, DType t, const char* arm, Launch launch, Run run) {
  return check_replay_nodes(sh, t, arm, 1, launch, run)[0];
}

// Two sequences in the buffers and none live (n_seqs = 0): every program exits, the state and
// every output byte stay as they were.
template <typename Run>
void check_no_live(Shape sh, Run run) {
  Problem P = make_problem(sh, DType::bf16, {4, 3}, {1, 2}, {1, 0}, 5);
  P.n_live = 0;
  Rig rig(P);
  const Result r = run(P, rig);
  CHECK(byte_diff(r.state, to_bytes(P.state0, DType::f32), DType::f32) == "");
  size_t changed = 0;
  for (uint8_t x : r.out) changed += x != 0xA5;
  CHECK(changed == 0);
}

// ---- Two checks every chunked form runs; `run(P, rig)` launches the form under test on problem P
// over rig and returns its outputs and state.

// A sequence split into two prefills (the second with history) agrees with one prefill: sequences
// of 150 and 9 tokens without history, against 70 + 4 tokens and then the remaining 80 + 5 with
// history (chunk boundaries fall elsewhere, so only a tolerance applies): outputs within tol_out
// (normalised, per sequence), the final states within tol_state.
template <typename Run>
void check_two_segments(Shape sh, DType t, double tol_out, double tol_state, Run run) {
  const Problem whole = make_problem(sh, t, {150, 9}, {2, 6}, {0, 0}, 99);
  Rig rw(whole);
  const Result rwhole = run(whole, rw);
  auto segment = [&](const std::vector<int64_t>& begin, const std::vector<int32_t>& lens, uint8_t hist,
                     const std::vector<float>& state) {
    const Problem P = segment_problem(whole, begin, lens, hist, state);
    Rig rig(P);
    return run(P, rig);
  };
  const Result r1 = segment({0, 150}, {70, 4}, 0, whole.state0);
  const Result r2 = segment({70, 154}, {80, 5}, 1, from_bytes(r1.state, DType::f32));
  // Whole rows [0,70) = r1 [0,70), [70,150) = r2 [0,80), [150,154) = r1 [70,74), [154,159) = r2 [80,85).
  const auto o1 = from_bytes(r1.out, t), o2 = from_bytes(r2.out, t);
  const size_t rw_ = static_cast<size_t>(whole.row());
  std::vector<float> joined;
  auto append = [&](const std::vector<float>& src, size_t a, size_t b) {
    joined.insert(joined.end(), src.begin() + static_cast<int64_t>(a * rw_),
                  src.begin() + static_cast<int64_t>(b * rw_));
  };
  append(o1, 0, 70);
  append(o2, 0, 80);
  append(o1, 70, 74);
  append(o2, 80, 85);
  const auto ow = from_bytes(rwhole.out, t);
  for (auto [b, e] : {std::pair<size_t, size_t>{0, 150}, {150, 159}}) {
    const double err = norm_err(joined.data() + b * rw_, ow.data() + b * rw_, (e - b) * rw_);
    CAPTURE(b, e, err);
    CHECK(err <= tol_out);
  }
  const auto s2 = from_bytes(r2.state, DType::f32), sw = from_bytes(rwhole.state, DType::f32);
  const size_t slot = static_cast<size_t>(sh.Hv * whole.head_size());
  for (size_t s : {size_t{2}, size_t{6}}) {
    const double serr = norm_err(s2.data() + s * slot, sw.data() + s * slot, slot);
    CAPTURE(s, serr);
    CHECK(serr <= tol_state);
  }
}

// Causality for non-finite values: two sequences with history, 9 and 40 tokens, shape (1, 2, 128,
// 128); in sequence 0 v of its token 5 is NaN and k of its token 6 is +Inf, in sequence 1 the same
// at its tokens 37 and 38 (the second half of a chunk). The outputs before the bad tokens are
// finite and are the bytes of the same sequences cut before them; every row in `bad_rows` (rows of
// the whole batch) holds a non-finite value.
template <typename Run>
void check_nan_causal(DType t, const std::vector<size_t>& bad_rows, Run run) {
  const Shape sh{1, 2, 128, 128};
  Problem whole = make_problem(sh, t, {9, 40}, {2, 6}, {1, 1}, 31337);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (auto [vt, kt] : {std::pair<int64_t, int64_t>{5, 6}, {9 + 37, 9 + 38}}) {
    for (int64_t i = 0; i < whole.row(); ++i) whole.v[static_cast<size_t>(vt * whole.row() + i)] = nan;
    for (int64_t i = 0; i < int64_t{sh.Hk} * sh.Dk; ++i) whole.k[static_cast<size_t>(kt * sh.Hk * sh.Dk + i)] = inf;
  }
  const Problem cut = segment_problem(whole, {0, 9}, {5, 37}, 1, whole.state0);
  Rig rw(whole), rc(cut);
  const Result a = run(whole, rw), b = run(cut, rc);
  const size_t rb = static_cast<size_t>(whole.row()) * dtype_size(t);      // bytes per token row
  auto rows = [rb](const std::vector<uint8_t>& o, size_t r0, size_t r1) {  // token rows [r0, r1)
    return std::vector<uint8_t>(o.begin() + static_cast<int64_t>(r0 * rb), o.begin() + static_cast<int64_t>(r1 * rb));
  };
  CHECK(byte_diff(rows(a.out, 0, 5), rows(b.out, 0, 5), t) == "");
  CHECK(byte_diff(rows(a.out, 9, 46), rows(b.out, 5, 42), t) == "");
  const auto vals = from_bytes(rows(a.out, 0, 5), t), vals1 = from_bytes(rows(a.out, 9, 46), t);
  CHECK(std::all_of(vals.begin(), vals.end(), [](float x) { return std::isfinite(x); }));
  CHECK(std::all_of(vals1.begin(), vals1.end(), [](float x) { return std::isfinite(x); }));
  for (size_t r : bad_rows) {
    CAPTURE(r);
    const auto bad = from_bytes(rows(a.out, r, r + 1), t);
    CHECK(std::any_of(bad.begin(), bad.end(), [](float x) { return !std::isfinite(x); }));
  }
}

// The warpgroup forms' matrix (bf16 q, k, v; Dk = Dv = 128) against the double reference: shapes
// (Hk, Hv) = (2, 4) and (1, 2), normal and fast decay (g in [-20, -5] on every live token), each
// history pattern of kHists. bf16 outputs within the bf16 tolerance, every live row written and
// deterministic (a second run over another poison gives the same bytes); f32 outputs and the f32
// state within tol_f32, the output dtype changing no state byte; with normal decay and every
// sequence with history, a bf16 state read widened and rounded once (within 8e-3). `launch(P,
// params)` runs the form synchronously; `also(P, rig, f32_params, f32_result)` adds the caller's
// checks after each f32-output run (the rig and the f32 output buffer are free to reuse). Prints
// the worst errors seen, after `name`.
template <typename Launch, typename Also>
void check_warpgroup_matrix(const char* name, double tol_f32, Launch launch, Also also) {
  Worst worst, worst_fast;
  double worst_bf16_state = 0;
  // Two v-heads a k head (the two-kernel form's T kernel: a block of two), and three (a block of one).
  for (const Shape sh : {Shape{2, 4, 128, 128}, Shape{1, 2, 128, 128}, Shape{1, 3, 128, 128}}) {
    for (bool fast : {false, true}) {
      for (int h = 0; h < 3; ++h) {
        CAPTURE(sh.Hk, sh.Hv, fast, kHistNames[h]);
        const uint64_t seed = 9300 + sh.Hv + 10 * h + (fast ? 100 : 0);
        INFO("seed " << seed);
        Problem P = make_problem(sh, DType::bf16, kLens, kSlots, kHists[static_cast<size_t>(h)], seed);
        if (fast) {
          const auto g = uniform(static_cast<size_t>(P.T) * sh.Hv, seed + 7, -20.f, -5.f);
          std::copy(g.begin(), g.end(), P.g.begin());
        }
        Rig rig(P);
        auto run = [&](uint8_t poison) {
          rig.reset(P, poison);
          launch(P, rig.params(P));
          return Result{rig.out.download(), rig.state.download()};
        };
        // bf16 outputs against the bf16-storing reference.
        const Expected ref = reference(P);
        const Result a = run(0xA5);
        check_close(P, a, ref, tol_f32, fast ? &worst_fast : &worst);
        check_untouched(P, a, 0xA5);
        const Result b = run(0x5A);
        const size_t live_bytes = static_cast<size_t>(P.T * P.row()) * 2;
        CHECK(std::memcmp(a.out.data(), b.out.data(), live_bytes) == 0);
        CHECK(byte_diff(b.state, a.state, DType::f32) == "");
        check_untouched(P, b, 0x5A);

        // f32 outputs (the same bf16 inputs) against the f32-storing reference.
        Problem Pf = P;
        Pf.t = DType::f32;
        const Expected ref_f = reference(Pf);
        DevBuf out_f(Pf.out_bytes(), 0xA5);
        rig.reset(P, 0xA5);
        DeltaRulePrefillParams pf = rig.params(P);
        pf.out = out_f.data();
        pf.out_dtype = DType::f32;
        launch(P, pf);
        const Result f{out_f.download(), rig.state.download()};
        check_close(Pf, f, ref_f, tol_f32, fast ? &worst_fast : &worst);
        check_untouched(Pf, f, 0xA5);
        CHECK(byte_diff(f.state, a.state, DType::f32) == "");  // the output dtype changes no state byte
        also(P, rig, pf, f);

        // A bf16 state: read widened, the final state rounded once.
        if (!fast && h == 0) {
          const DevBuf st16 = DevBuf::from(P.state0, DType::bf16);
          std::vector<float> s0r(P.state0.size());
          for (size_t i = 0; i < s0r.size(); ++i) s0r[i] = round_bf16(P.state0[i]);
          Problem Pr = Pf;
          Pr.state0 = s0r;
          const Expected ref_r = reference(Pr);
          rig.reset(P, 0xA5);
          DeltaRulePrefillParams pb = pf;
          pb.state = st16.data();
          pb.state_dtype = DType::bf16;
          launch(P, pb);
          const auto got_s = from_bytes(st16.download(), DType::bf16);
          for (int n = 0; n < P.n_live; ++n) {
            if (P.slots[n] < 0 || P.cu[n + 1] == P.cu[n]) continue;
            const int64_t s0 = P.slots[n] * P.sh.Hv * P.head_size();
            const double serr =
                norm_err(got_s.data() + s0, ref_r.state.data() + s0, static_cast<size_t>(P.sh.Hv * P.head_size()));
            CAPTURE(n, serr);
            CHECK(serr <= 8e-3);  // one bf16 rounding of the final state
            worst_bf16_state = std::max(worst_bf16_state, serr);
          }
        }
      }
    }
  }
  std::printf(
      "%s delta-rule prefill, worst normalised error vs the double reference: f32 outputs %.3g, state %.3g; "
      "fast decay: f32 outputs %.3g, state %.3g; bf16 state %.3g\n",
      name, worst.out, worst.state, worst_fast.out, worst_fast.state, worst_bf16_state);
}

}  // namespace sg::test::drp
