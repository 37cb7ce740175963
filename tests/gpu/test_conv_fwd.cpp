// GPU tests of conv.fwd, the varlen causal conv prefill (kernels/conv_fwd.h):
// - every arm x split (register, k4, k4x2 x exact, whole; tiled x whole) gives the raw bytes of
//   tiled+exact, outputs and the whole state cache, over f32 and bf16 activations, f32 and bf16
//   state, K in {2, 3, 4, 5} and C in {1, 127, 129, 385, 1024, 2048, 8192, 10240};
// - the seed's 0-ulp regression case (C = 1024, K = 4, lengths {33, 37}, first with history, f32);
// - tiled+exact against the CPU reference ref::conv_fwd (state byte-exact, outputs within the
//   tolerance written below);
// - invariants on every run: inputs are read through a row stride > C whose padding columns (and
//   the rows past the live tokens) hold NaN that must never be read; outputs start as poison that
//   must be overwritten on every live row (the reference runs twice, from 0xA5 and from 0x5A
//   poison, with identical live bytes) and left alone past them; padding sequences
//   (slot -1) get zero rows and never touch state; unused slots keep their bytes;
// - one captured launch per arm: the graph's kernel node is the contract's kernel with the
//   contract's grid, and one graph serves a second batch composition of its bucket.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/contracts.h"
#include "kernels/conv_fwd.h"
#include "kernels/ref/conv_ref.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

constexpr uint8_t kPoison = 0xA5;

struct Batch {
  std::vector<int32_t> lens;
  std::vector<int32_t> slots;  // -1: padding sequence
  std::vector<uint8_t> hist;
};

// One problem: shapes, dtypes, a batch and its host data (inputs as f32 values exactly
// representable in their storage dtype).
struct Problem {
  std::string name;
  DType act = DType::bf16, sdt = DType::bf16;
  int C = 0, K = 0;
  int64_t stride = 0;
  int num_slots = 0, max_tokens = 0, max_seqs = 0;
  bool has_bias = true, silu = true;
  uint64_t seed = 0;
  Batch batch;
  std::vector<int32_t> cu;
  std::vector<ConvChunk> chunks;
  std::vector<float> x;        // [max_tokens, stride]; NaN in columns >= C and rows >= T
  std::vector<float> w, bias;  // [C, K], [C]
  std::vector<float> state0;   // [num_slots, C, K-1]
  int N() const { return static_cast<int>(batch.lens.size()); }
  int T() const { return cu.back(); }
};

std::string describe(const Problem& p) {
  std::string s = p.name + " act=" + std::string(dtype_name(p.act)) + " state=" + std::string(dtype_name(p.sdt)) +
                  " C=" + std::to_string(p.C) + " K=" + std::to_string(p.K) + " stride=" + std::to_string(p.stride) +
                  " bias=" + std::to_string(p.has_bias) + " silu=" + std::to_string(p.silu) + " lens={";
  for (size_t i = 0; i < p.batch.lens.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(p.batch.lens[i]);
    if (p.batch.slots[i] < 0)
      s += "(pad)";
    else if (p.batch.hist[i])
      s += "(h)";
  }
  return s + "} seed=" + std::to_string(p.seed);
}

// Fills the host data of a problem whose name, dtypes, C, K, batch, seed and flags are set.
// Bucket: max_tokens = T + extra_tokens, max_seqs = N + extra_seqs.
void fill(Problem& p, int pad_cols, int extra_tokens = 11, int extra_seqs = 2) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.stride = p.C + pad_cols;
  p.cu.assign(1, 0);
  for (int32_t l : p.batch.lens) p.cu.push_back(p.cu.back() + l);
  p.chunks = build_conv_chunks(p.cu, kConvChunkTokens);
  p.max_tokens = std::max(1, p.T() + extra_tokens);
  p.max_seqs = std::max(1, p.N() + extra_seqs);
  const int T = p.T();
  auto xv = p.act == DType::bf16 ? test::uniform_bf16(static_cast<size_t>(T) * p.C, p.seed, -2.f, 2.f)
                                 : test::uniform(static_cast<size_t>(T) * p.C, p.seed, -2.f, 2.f);
  p.x.assign(static_cast<size_t>(p.max_tokens) * p.stride, nan);
  for (int t = 0; t < T; ++t) {
    std::copy_n(xv.begin() + static_cast<int64_t>(t) * p.C, p.C, p.x.begin() + t * p.stride);
  }
  p.w = test::uniform(static_cast<size_t>(p.C) * p.K, p.seed + 1, -1.f, 1.f);
  p.bias = test::uniform(static_cast<size_t>(p.C), p.seed + 2, -0.5f, 0.5f);
  const size_t ns = static_cast<size_t>(p.num_slots) * p.C * (p.K - 1);
  p.state0 =
      p.sdt == DType::bf16 ? test::uniform_bf16(ns, p.seed + 3, -2.f, 2.f) : test::uniform(ns, p.seed + 3, -2.f, 2.f);
}

// The varied batch of the matrix: zero-length sequences (one with history and a live slot), a
// single token, a sequence shorter than K-1, chunk-edge lengths, long sequences with history, a
// padding sequence (slot -1, history flag set: must still not read state); shuffled by the seed;
// slots distinct and scrambled over num_slots = N + 3 (some slots stay unused).
Problem matrix_problem(DType act, DType sdt, int C, int K, uint64_t seed) {
  Problem p;
  p.name = "matrix";
  p.act = act;
  p.sdt = sdt;
  p.C = C;
  p.K = K;
  p.seed = seed;
  p.has_bias = seed % 3 != 0;
  p.silu = seed % 5 != 0;
  struct S {
    int len;
    bool hist, pad;
  };
  std::vector<S> seqs = {{0, true, false},   {1, true, false},  {3, false, false},  {8, true, false},
                         {9, true, false},   {33, true, false}, {37, false, false}, {5, true, true},
                         {130, true, false}, {0, false, false}, {16, false, false}, {17, true, false}};
  if (K - 2 >= 1) seqs.push_back({K - 2, true, false});  // shorter than K-1, with history
  std::mt19937_64 rng(seed);
  std::shuffle(seqs.begin(), seqs.end(), rng);
  const int N = static_cast<int>(seqs.size());
  p.num_slots = N + 3;
  std::vector<int32_t> perm(static_cast<size_t>(p.num_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int n = 0; n < N; ++n) {
    p.batch.lens.push_back(seqs[n].len);
    p.batch.slots.push_back(seqs[n].pad ? -1 : perm[n]);
    p.batch.hist.push_back(seqs[n].hist ? 1 : 0);
  }
  fill(p, /*pad_cols=*/1 + static_cast<int>(seed % 7));
  return p;
}

// Device buffers for one bucket (max_tokens, max_seqs) of a problem's shape.
struct Rig {
  const Problem* shape = nullptr;
  DevBuf x, out, state, w, bias, cu, slots, hist, n_seqs, chunks, n_chunks;

  explicit Rig(const Problem& p)
      : shape(&p),
        x(static_cast<size_t>(p.max_tokens) * p.stride * dtype_size(p.act)),
        out(static_cast<size_t>(p.max_tokens) * p.C * dtype_size(p.act)),
        state(p.state0.size() * dtype_size(p.sdt)),
        w(p.w.size() * 4),
        bias(p.bias.size() * 4),
        cu((static_cast<size_t>(p.max_seqs) + 1) * 4),
        slots(static_cast<size_t>(p.max_seqs) * 4),
        hist(static_cast<size_t>(p.max_seqs)),
        n_seqs(4),
        chunks(static_cast<size_t>(conv_max_chunks(p.max_tokens, p.max_seqs)) * sizeof(ConvChunk)),
        n_chunks(4) {}

  // Uploads a problem of the same shape and bucket; outputs back to poison; the chunk table's
  // tail and the metadata past N stay poison/garbage (never interpreted).
  void load(const Problem& p, uint8_t poison = kPoison) {
    require(p.C == shape->C && p.K == shape->K && p.stride == shape->stride && p.max_tokens == shape->max_tokens &&
                p.max_seqs == shape->max_seqs && p.num_slots == shape->num_slots && p.act == shape->act &&
                p.sdt == shape->sdt,
            "Rig::load: problem {} does not fit the rig", p.name);
    auto up = [](DevBuf& b, const void* src, size_t bytes) {
      REQUIRE(bytes <= b.bytes());
      if (bytes) check(cudaMemcpy(b.data(), src, bytes, cudaMemcpyHostToDevice));
    };
    const auto xb = test::to_bytes(p.x, p.act);
    up(x, xb.data(), xb.size());
    out.fill(poison);
    const auto sb = test::to_bytes(p.state0, p.sdt);
    up(state, sb.data(), sb.size());
    up(w, p.w.data(), p.w.size() * 4);
    up(bias, p.bias.data(), p.bias.size() * 4);
    cu.fill(kPoison);
    slots.fill(kPoison);
    hist.fill(kPoison);
    chunks.fill(kPoison);
    up(cu, p.cu.data(), p.cu.size() * 4);
    up(slots, p.batch.slots.data(), p.batch.slots.size() * 4);
    up(hist, p.batch.hist.data(), p.batch.hist.size());
    const int32_t n = p.N(), nc = static_cast<int32_t>(p.chunks.size());
    up(n_seqs, &n, 4);
    up(chunks, p.chunks.data(), p.chunks.size() * sizeof(ConvChunk));
    up(n_chunks, &nc, 4);
    check(cudaDeviceSynchronize());
  }

  ConvFwdParams params() const {
    const Problem& p = *shape;
    ConvFwdParams q;
    q.x = x.data();
    q.x_stride = p.stride;
    q.x_dtype = p.act;
    q.out = out.data();
    q.out_dtype = p.act;
    q.state = state.data();
    q.state_dtype = p.sdt;
    q.w = w.as<float>();
    q.bias = p.has_bias ? bias.as<float>() : nullptr;
    q.silu = p.silu;
    q.cu_seqlens = cu.as<int32_t>();
    q.slots = slots.as<int32_t>();
    q.has_history = hist.as<uint8_t>();
    q.n_seqs = n_seqs.as<int32_t>();
    q.chunks = chunks.as<ConvChunk>();
    q.n_chunks = n_chunks.as<int32_t>();
    q.C = p.C;
    q.K = p.K;
    q.max_tokens = p.max_tokens;
    q.max_seqs = p.max_seqs;
    return q;
  }
};

struct Outcome {
  std::vector<uint8_t> out, state;
};

LaunchContract<ConvFwdArm> contract_for(const Problem& p, ConvFwdArm arm, ConvChunksArm chunks) {
  return conv_fwd_contract(arm, chunks, ConvFwdShape{p.max_tokens, p.max_seqs, p.C, p.K});
}

// One eager launch on fresh buffers whose outputs start as `poison` bytes.
Outcome run(const Problem& p, ConvFwdArm arm, ConvChunksArm chunks, uint8_t poison = kPoison) {
  Rig rig(p);
  rig.load(p, poison);
  const auto c = contract_for(p, arm, chunks);
  check(conv_fwd(rig.params(), c, chunks, nullptr));
  check(cudaDeviceSynchronize());
  return {rig.out.download(), rig.state.download()};
}

std::string arm_label(ConvFwdArm arm, ConvChunksArm chunks) {
  return std::string(arm_name(arm)) + "+" + std::string(arm_name(chunks));
}

// The invariants every run must satisfy; "" when all hold, else the first violation. (Whether every
// live output was written is checked by running the reference twice with different poison bytes:
// a value alone cannot tell poison from an output that happens to have its bytes.)
std::string invariants(const Problem& p, const Outcome& o, uint8_t poison_byte = kPoison) {
  const size_t es = dtype_size(p.act), C = static_cast<size_t>(p.C);
  const size_t T = static_cast<size_t>(p.T());
  if (o.out.size() != static_cast<size_t>(p.max_tokens) * C * es) return "output size";
  std::vector<char> pad_row(T, 0);
  for (int n = 0; n < p.N(); ++n) {
    if (p.batch.slots[n] < 0) {
      for (int32_t t = p.cu[n]; t < p.cu[n + 1]; ++t) pad_row[t] = 1;
    }
  }
  const auto vals = test::from_bytes(o.out, p.act);
  for (size_t i = 0; i < static_cast<size_t>(p.max_tokens) * C; ++i) {
    const uint8_t* e = o.out.data() + i * es;
    const size_t row = i / C;
    if (row >= T) {
      if (!std::all_of(e, e + es, [&](uint8_t b) { return b == poison_byte; })) {
        return "output row " + std::to_string(row) + " past the live tokens was written";
      }
      continue;
    }
    if (std::isnan(vals[i])) return "output element " + std::to_string(i) + " is NaN (a sentinel was read)";
    if (pad_row[row] && std::any_of(e, e + es, [](uint8_t b) { return b != 0; })) {
      return "padding output row " + std::to_string(row) + " is not zero";
    }
  }
  // Slots not owned by a live, non-empty, non-padding sequence keep their bytes.
  std::set<int> written;
  for (int n = 0; n < p.N(); ++n) {
    if (p.batch.slots[n] >= 0 && p.batch.lens[n] > 0) written.insert(p.batch.slots[n]);
  }
  const auto s0 = test::to_bytes(p.state0, p.sdt);
  if (o.state.size() != s0.size()) return "state size";
  const size_t slot_bytes = C * static_cast<size_t>(p.K - 1) * dtype_size(p.sdt);
  for (int s = 0; s < p.num_slots; ++s) {
    if (written.count(s)) continue;
    if (std::memcmp(o.state.data() + s * slot_bytes, s0.data() + s * slot_bytes, slot_bytes) != 0) {
      return "state of untouched slot " + std::to_string(s) + " changed";
    }
  }
  return "";
}

// Every arm x split against tiled+exact: raw bytes of the outputs and of the whole state cache.
void check_all_arms(const Problem& p) {
  INFO(describe(p));
  const Outcome ref = run(p, ConvFwdArm::tiled, ConvChunksArm::exact);
  {
    INFO("tiled+exact");
    CHECK(invariants(p, ref) == "");
    // Every live output written: the same bytes whatever the outputs started as.
    const Outcome ref2 = run(p, ConvFwdArm::tiled, ConvChunksArm::exact, 0x5A);
    CHECK(invariants(p, ref2, 0x5A) == "");
    const size_t live = static_cast<size_t>(p.T()) * p.C * dtype_size(p.act);
    CHECK(byte_diff(std::vector<uint8_t>(ref2.out.begin(), ref2.out.begin() + live),
                    std::vector<uint8_t>(ref.out.begin(), ref.out.begin() + live), p.act) == "");
  }
  for (ConvFwdArm arm : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
    for (ConvChunksArm chunks : {ConvChunksArm::exact, ConvChunksArm::whole}) {
      if (arm == ConvFwdArm::tiled && chunks == ConvChunksArm::exact) continue;
      const auto c = contract_for(p, arm, chunks);
      INFO("requested " << arm_label(arm, chunks) << ", runs " << arm_label(c.arm, chunks) << " (" << c.kernel << ")");
      const Outcome o = run(p, arm, chunks);
      CHECK(invariants(p, o) == "");
      CHECK(byte_diff(o.out, ref.out, p.act) == "");
      CHECK(byte_diff(o.state, ref.state, p.sdt) == "");
    }
  }
}

// The CPU reference on a problem: outputs [T, C] (f32 values as stored) and the state cache.
Outcome reference(const Problem& p, std::vector<float>& out_vals) {
  const ref::Store os = p.act == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
  const ref::Store ss = p.sdt == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
  std::vector<float> state = p.state0;
  out_vals.assign(static_cast<size_t>(std::max(p.T(), 1)) * p.C, 0.f);
  ref::conv_fwd(ref::ConvShape{p.C, p.K, p.silu, os, ss}, p.N(), p.cu.data(), p.x.data(), p.stride,
                p.batch.slots.data(), p.batch.hist.data(), state.data(), p.w.data(),
                p.has_bias ? p.bias.data() : nullptr, out_vals.data());
  return {{}, test::to_bytes(state, p.sdt)};
}

// Tolerances of the GPU against ref::conv_fwd. The fma chain is the same on both sides (-fmad=false,
// explicit fmaf/std::fma in the same order), so acc is bit-identical; only SiLU's exp differs:
// CUDA's expf and glibc's expf are each within an ulp or so of exp, not always the same float,
// and acc / (1 + e) then differs by about an ulp of f32, which bf16 rounding usually hides but can
// push across a rounding boundary (one bf16 ulp). Hence:
//   state: byte-exact (pure data movement);
//   f32 outputs: |gpu - ref| <= 1e-6 + 1e-5 |ref|;
//   bf16 outputs: |gpu - ref| <= 1 bf16 ulp of |ref| + 1e-6.
void check_against_reference(const Problem& p) {
  INFO(describe(p));
  std::vector<float> ref_out;
  const Outcome want = reference(p, ref_out);
  const Outcome got = run(p, ConvFwdArm::tiled, ConvChunksArm::exact);
  CHECK(invariants(p, got) == "");
  CHECK(byte_diff(got.state, want.state, p.sdt) == "");
  const auto vals = test::from_bytes(got.out, p.act);
  size_t bad = 0, first = 0;
  double worst = 0;
  const size_t n = static_cast<size_t>(p.T()) * p.C;
  for (size_t i = 0; i < n; ++i) {
    const double r = ref_out[i];
    double tol = 1e-6 + 1e-5 * std::fabs(r);
    if (p.act == DType::bf16) {
      int e = 0;
      std::frexp(r, &e);  // |r| = m 2^e, m in [0.5, 1): one bf16 ulp is 2^(e-8)
      tol = (r == 0 ? 0.0 : std::ldexp(1.0, e - 8)) + 1e-6;
    }
    const double err = std::fabs(static_cast<double>(vals[i]) - r);
    if (!(err <= tol)) {
      if (bad == 0) first = i;
      ++bad;
    }
    if (tol > 0) worst = std::max(worst, err / tol);
  }
  INFO("worst error / tolerance " << worst << "; first bad element " << first << ": got " << (bad ? vals[first] : 0.f)
                                  << ", reference " << (bad ? ref_out[first] : 0.f));
  CHECK(bad == 0);
}

const std::vector<int> kCs = {1, 127, 129, 385, 1024, 2048, 8192, 10240};
const std::vector<int> kKs = {2, 3, 4, 5};

// The matrix, subsampled: every (C, K) once with activations alternating f32/bf16 along both axes
// and state dtype alternating on its own pattern, plus K = 4 (the model's width, where k4 and
// k4x2 really run) with the other activation dtype too: every value of each axis, each dtype
// pair on small and large C.
std::vector<std::tuple<DType, DType, int, int>> matrix_cases() {
  std::vector<std::tuple<DType, DType, int, int>> v;
  for (size_t ci = 0; ci < kCs.size(); ++ci) {
    for (int K : kKs) {
      const DType act = (ci + static_cast<size_t>(K)) % 2 ? DType::f32 : DType::bf16;
      const DType sdt = (ci / 2 + static_cast<size_t>(K)) % 2 ? DType::f32 : DType::bf16;
      v.emplace_back(act, sdt, kCs[ci], K);
      if (K == 4)
        v.emplace_back(act == DType::f32 ? DType::bf16 : DType::f32, sdt == DType::f32 ? DType::bf16 : DType::f32,
                       kCs[ci], K);
    }
  }
  return v;
}

// The seed's regression (ARMS.md): C = 1024, K = 4, lengths {33, 37}, the first with history, f32.
Problem seed_regression_problem() {
  Problem p;
  p.name = "seed regression";
  p.act = DType::f32;
  p.sdt = DType::f32;
  p.C = 1024;
  p.K = 4;
  p.seed = 2661;
  p.batch.lens = {33, 37};
  p.batch.slots = {1, 0};
  p.batch.hist = {1, 0};
  p.num_slots = 2;
  fill(p, /*pad_cols=*/0, /*extra_tokens=*/0, /*extra_seqs=*/0);
  return p;
}

}  // namespace

TEST_CASE("conv.fwd: every arm and split gives the bytes of tiled+exact", "[gpu][conv_fwd]") {
  uint64_t seed = 1000;
  for (auto [act, sdt, C, K] : matrix_cases()) {
    check_all_arms(matrix_problem(act, sdt, C, K, seed++));
  }
}

TEST_CASE("conv.fwd: the seed's regression case is byte-exact in every arm", "[gpu][conv_fwd]") {
  Problem p = seed_regression_problem();
  check_all_arms(p);
  check_against_reference(p);
  // Same case with the stride of a projection view and x/out in a bucket larger than the batch.
  Problem q = p;
  fill(q, /*pad_cols=*/3, /*extra_tokens=*/25, /*extra_seqs=*/3);
  check_all_arms(q);
  check_against_reference(q);
}

TEST_CASE("conv.fwd: special batches", "[gpu][conv_fwd]") {
  // A single token with history; all sequences empty; only padding; a batch of sequences shorter
  // than K-1; one long sequence with history.
  struct B {
    const char* name;
    std::vector<int32_t> lens, slots;
    std::vector<uint8_t> hist;
  };
  const std::vector<B> batches = {
      {"single token", {1}, {2}, {1}},
      {"all empty", {0, 0, 0}, {0, 1, 2}, {1, 0, 1}},
      {"only padding", {4, 9}, {-1, -1}, {1, 0}},
      {"short sequences", {1, 2, 3, 1, 2}, {4, 0, 3, 1, 2}, {1, 1, 0, 0, 1}},
      {"one long sequence", {1000}, {3}, {1}},
  };
  uint64_t seed = 7000;
  for (const auto& b : batches) {
    for (DType act : {DType::bf16, DType::f32}) {
      for (int K : {2, 4, 5}) {
        Problem p;
        p.name = b.name;
        p.act = act;
        p.sdt = act;
        p.C = 385;
        p.K = K;
        p.seed = seed++;
        p.batch = Batch{b.lens, b.slots, b.hist};
        p.num_slots = 6;
        fill(p, /*pad_cols=*/5);
        check_all_arms(p);
      }
    }
  }
}

TEST_CASE("conv.fwd: inputs of every magnitude give the same bytes in every arm", "[gpu][conv_fwd]") {
  // Inputs sign * 2^u, u uniform in [-100, -60] or [-30, 80] (and some exact zeros): the
  // accumulator spans tiny, zero, huge and SiLU-overflowing values, which exercises every branch
  // of the register arms' inline SiLU division against the tiled arm's plain one. (Magnitudes
  // near 2^-52 are left out: an output there could equal the 0xA5 poison pattern by chance.)
  uint64_t seed = 9100;
  for (DType act : {DType::f32, DType::bf16}) {
    for (int K : {2, 4}) {
      Problem p = matrix_problem(act, act, 1024, K, seed++);
      p.name = "wide magnitudes";
      p.silu = true;
      std::mt19937_64 rng(p.seed);
      std::uniform_real_distribution<float> lo(-100.f, -60.f), hi(-30.f, 80.f);
      for (int t = 0; t < p.T(); ++t) {
        for (int c = 0; c < p.C; ++c) {
          const float e = rng() % 4 == 0 ? lo(rng) : hi(rng);
          float v = std::ldexp(1.0f, static_cast<int>(e));
          if (rng() % 2) v = -v;
          if (rng() % 17 == 0) v = 0.0f;
          p.x[static_cast<size_t>(t) * p.stride + c] = act == DType::bf16 ? round_bf16(v) : v;
        }
      }
      check_all_arms(p);
      check_against_reference(p);
    }
  }
}

TEST_CASE("conv.fwd: tiled+exact matches the CPU reference", "[gpu][conv_fwd][reference]") {
  uint64_t seed = 3000;
  for (auto [act, sdt, C, K] : matrix_cases()) {
    check_against_reference(matrix_problem(act, sdt, C, K, seed++));
  }
}

TEST_CASE("conv.fwd: one captured launch per arm runs the contract's kernel and grid", "[gpu][conv_fwd][graphs]") {
  // Bucket of batch A; batch B is another composition of the same bucket (more sequences, other
  // lengths, fewer chunks live): one graph serves both.
  Problem a;
  a.name = "graph batch A";
  a.act = DType::bf16;
  a.sdt = DType::bf16;
  a.C = 385;
  a.K = 4;
  a.seed = 91;
  a.batch = Batch{{37, 0, 5, 100}, {3, 1, -1, 0}, {1, 1, 1, 0}};
  a.num_slots = 8;
  fill(a, /*pad_cols=*/2, /*extra_tokens=*/60, /*extra_seqs=*/4);
  Problem b = a;
  b.name = "graph batch B";
  b.seed = 92;
  b.batch = Batch{{1, 2, 150, 9, 3, 20}, {7, 6, 5, -1, 2, 4}, {1, 0, 1, 1, 1, 0}};
  {
    const int mt = a.max_tokens, ms = a.max_seqs;
    fill(b, 2, 0, 0);
    REQUIRE(b.T() <= mt);
    REQUIRE(b.N() <= ms);
    b.max_tokens = mt;
    b.max_seqs = ms;
    b.x.resize(static_cast<size_t>(mt) * b.stride, std::numeric_limits<float>::quiet_NaN());
  }

  Stream stream;
  for (ConvFwdArm arm : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
    for (ConvChunksArm chunks : {ConvChunksArm::exact, ConvChunksArm::whole}) {
      const auto c = contract_for(a, arm, chunks);
      const std::string label = arm_label(arm, chunks);
      CAPTURE(label);
      REQUIRE(c.arm == arm);  // K = 4: no fallback
      Rig rig(a);
      rig.load(a);
      NodeRecorder rec;
      CapturedGraph g = CapturedGraph::capture("conv.fwd " + label, stream.get(), [&] {
        check(conv_fwd(rig.params(), c, chunks, stream.get()));
        rec.launched(stream.get(), NodeLabel{-1, "conv.fwd", std::string(arm_name(c.arm)), 0});
      });
      ArmSelection sel;
      sel.conv_fwd = arm;
      sel.conv_chunks = chunks;
      const Manifest m = build_manifest("conv.fwd " + label, sel.describe(), g.graph(), rec);
      REQUIRE(m.nodes.size() == 1);
      CHECK(m.unlabelled() == 0);
      CHECK(m.nodes[0].label.arm == std::string(arm_name(arm)));
      CAPTURE(m.nodes[0].kernel);
      CHECK(m.nodes[0].kernel.find(std::string(c.kernel)) != std::string::npos);
      CHECK(m.nodes[0].grid == c.grid);
      CHECK(m.nodes[0].block == c.block);
      CHECK(m.nodes[0].smem_bytes == c.smem_bytes);
      // Expected grid, spelled out: ceil(C / tile) x (worst-case chunks | max_seqs).
      const unsigned gx = static_cast<unsigned>((a.C + conv_fwd_channel_tile(arm) - 1) / conv_fwd_channel_tile(arm));
      const unsigned gy = chunks == ConvChunksArm::exact
                              ? static_cast<unsigned>(conv_max_chunks(a.max_tokens, a.max_seqs, kConvChunkTokens))
                              : static_cast<unsigned>(a.max_seqs);
      CHECK(c.grid == Dim3{gx, gy, 1});

      for (const Problem* p : {&a, &b}) {
        INFO(describe(*p));
        const Outcome eager = run(*p, ConvFwdArm::tiled, ConvChunksArm::exact);
        rig.load(*p);
        g.replay(stream.get());
        stream.sync();
        const Outcome replayed{rig.out.download(), rig.state.download()};
        CHECK(invariants(*p, replayed) == "");
        CHECK(byte_diff(replayed.out, eager.out, p->act) == "");
        CHECK(byte_diff(replayed.state, eager.state, p->sdt) == "");
      }
    }
  }
}

TEST_CASE("conv.fwd: the launcher refuses a contract that is not the params' own", "[gpu][conv_fwd]") {
  Problem p = matrix_problem(DType::bf16, DType::bf16, 129, 4, 5);
  Rig rig(p);
  rig.load(p);
  const ConvFwdParams q = rig.params();
  auto c = contract_for(p, ConvFwdArm::reg, ConvChunksArm::exact);
  CHECK(conv_fwd(q, c, ConvChunksArm::whole, nullptr) == cudaErrorInvalidValue);  // split mismatch
  auto wrong_c =
      conv_fwd_contract(ConvFwdArm::reg, ConvChunksArm::exact, ConvFwdShape{p.max_tokens, p.max_seqs, 1024, 4});
  CHECK(conv_fwd(q, wrong_c, ConvChunksArm::exact, nullptr) == cudaErrorInvalidValue);
  ConvFwdParams mixed = q;
  mixed.out_dtype = DType::f32;  // register arms need x_dtype == out_dtype
  CHECK(conv_fwd(mixed, c, ConvChunksArm::exact, nullptr) == cudaErrorInvalidValue);
  ConvFwdParams no_chunks = q;
  no_chunks.chunks = nullptr;
  CHECK(conv_fwd(no_chunks, c, ConvChunksArm::exact, nullptr) == cudaErrorInvalidValue);
  // Nothing was launched: outputs are still poison.
  check(cudaDeviceSynchronize());
  const auto out = rig.out.download();
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == kPoison; }));
}
