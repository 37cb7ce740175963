// GPU tests of the C interface (kernels/capi/stepgraph_c.h): calling an op through libstepgraph_c
// gives the same bytes as calling its C++ launcher directly, for every arm, over f32/bf16 mixes,
// strided inputs, padding rows, bias on/off and awkward sizes:
// - conv.update (grid, fast) and postconv (all four arms, token_tile's fallback included): outputs
//   and state compared byte for byte, both sides starting from the same poisoned buffers;
// - conv.fwd (every arm x split) with device metadata (a) and with host metadata (b, the call
//   builds and uploads the descriptors into the workspace), against the launcher with descriptors
//   built by build_conv_chunks;
// - graph capture: host metadata on a capturing stream is refused with SG_ERR_CAPTURE and leaves
//   the capture valid; device metadata and postconv capture, and the replay gives eager's bytes;
// - sg_last_launch() names the contract's kernel and grid.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "kernels/capi/stepgraph_c.h"
#include "kernels/contracts.h"
#include "kernels/conv_fwd.h"
#include "kernels/conv_update.h"
#include "kernels/postconv.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

constexpr uint8_t kPoison = 0xA5;

sg_dtype to_c(DType t) { return t == DType::f32 ? SG_F32 : SG_BF16; }
const char* dname(DType t) { return t == DType::f32 ? "f32" : "bf16"; }

void require_ok(int rc) {
  INFO("C API returned " << sg_status_name(rc) << ": " << sg_last_error());
  REQUIRE(rc == SG_OK);
}

// Values exactly representable in `t`.
std::vector<float> values(size_t n, uint64_t seed, DType t, float lo = -2.f, float hi = 2.f) {
  return t == DType::bf16 ? test::uniform_bf16(n, seed, lo, hi) : test::uniform(n, seed, lo, hi);
}

void check_same(const DevBuf& got, const DevBuf& want, DType t, const char* what) {
  const std::string d = byte_diff(got.download(), want.download(), t);
  INFO(what << ": " << d);
  CHECK(d.empty());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// --- conv.update ----------------------------------------------------------------------------------

struct UpdateCase {
  int rows, C, K;
  int64_t stride;
  DType x, out, state;
  bool bias, silu;
};

}  // namespace

TEST_CASE("C API conv.update matches the C++ launcher byte for byte, every arm", "[gpu][capi]") {
  const UpdateCase cases[] = {
      {5, 385, 4, 400, DType::bf16, DType::bf16, DType::bf16, true, true},
      {3, 129, 3, 129, DType::f32, DType::f32, DType::f32, false, true},
      {7, 1024, 2, 1030, DType::bf16, DType::f32, DType::f32, true, false},
      {1, 8192, 4, 8192, DType::bf16, DType::bf16, DType::bf16, true, true},
      {4, 127, 5, 130, DType::f32, DType::bf16, DType::bf16, true, true},
  };
  uint64_t seed = 1000;
  for (const auto& u : cases) {
    for (const char* arm : {"grid", "fast", static_cast<const char*>(nullptr)}) {
      ++seed;
      const int num_slots = u.rows + 3;
      std::vector<int32_t> slots(u.rows);
      for (int r = 0; r < u.rows; ++r) slots[r] = num_slots - 1 - r;  // distinct, not the row order
      if (u.rows > 1) slots[1] = -1;                                  // a padding row
      INFO("rows=" << u.rows << " C=" << u.C << " K=" << u.K << " stride=" << u.stride << " x=" << dname(u.x)
                   << " out=" << dname(u.out) << " state=" << dname(u.state) << " arm=" << (arm ? arm : "(default)")
                   << " seed=" << seed);
      const DevBuf x = DevBuf::from(values(static_cast<size_t>(u.rows) * u.stride, seed, u.x), u.x);
      const DevBuf w = DevBuf::from(test::uniform(static_cast<size_t>(u.C) * u.K, seed + 1), DType::f32);
      const DevBuf bias = DevBuf::from(test::uniform(u.C, seed + 2, -0.5f, 0.5f), DType::f32);
      const DevBuf sl = DevBuf::from_i32(slots);
      const auto state0 = values(static_cast<size_t>(num_slots) * u.C * (u.K - 1), seed + 3, u.state);
      DevBuf state_cpp = DevBuf::from(state0, u.state), state_c = DevBuf::from(state0, u.state);
      const size_t out_bytes = static_cast<size_t>(u.rows) * u.C * dtype_size(u.out);
      DevBuf out_cpp(out_bytes, kPoison), out_c(out_bytes, kPoison);

      const auto want_arm = arm ? *arm_from_name<ConvUpdateArm>(arm) : ArmSelection{}.conv_update;
      const auto contract = conv_update_contract(want_arm, ConvUpdateShape{u.rows, u.C, u.K});
      ConvUpdateParams p;
      p.x = x.data();
      p.x_stride = u.stride;
      p.x_dtype = u.x;
      p.out = out_cpp.data();
      p.out_dtype = u.out;
      p.state = state_cpp.data();
      p.state_dtype = u.state;
      p.slots = sl.as<int32_t>();
      p.w = w.as<float>();
      p.bias = u.bias ? bias.as<float>() : nullptr;
      p.rows = u.rows;
      p.C = u.C;
      p.K = u.K;
      p.silu = u.silu;
      check(conv_update(p, contract, nullptr));

      sg_conv_update_args a{};
      a.x = x.data();
      a.x_stride = u.stride;
      a.x_dtype = to_c(u.x);
      a.out = out_c.data();
      a.out_dtype = to_c(u.out);
      a.state = state_c.data();
      a.state_dtype = to_c(u.state);
      a.slots = sl.as<int32_t>();
      a.w = w.as<float>();
      a.bias = u.bias ? bias.as<float>() : nullptr;
      a.rows = u.rows;
      a.C = u.C;
      a.K = u.K;
      a.silu = u.silu;
      require_ok(sg_conv_update(&a, arm, nullptr));
      const std::string launch = sg_last_launch();
      INFO(launch);
      CHECK(contains(launch, "conv.update=" + std::string(arm_name(contract.arm)) + " kernel " +
                                 std::string(contract.kernel) + " grid " + to_string(contract.grid)));
      check(cudaDeviceSynchronize());

      check_same(out_c, out_cpp, u.out, "out");
      check_same(state_c, state_cpp, u.state, "state");
      // Not vacuous: the output was written (no poison left) and a padding row is zero.
      const auto ob = out_c.download();
      CHECK(std::count(ob.begin(), ob.end(), kPoison) < static_cast<long>(ob.size() / 8));
      if (u.rows > 1) {
        const size_t row = static_cast<size_t>(u.C) * dtype_size(u.out);
        CHECK(std::all_of(ob.begin() + row, ob.begin() + 2 * row, [](uint8_t v) { return v == 0; }));
      }
    }
  }
}

// --- postconv -------------------------------------------------------------------------------------

namespace {
struct PostconvCase {
  int T, Hk, Hv, Dk, Dv;
  int conv_pad, a_pad, b_pad;
  DType conv, ab, qkv;
};
}  // namespace

TEST_CASE("C API postconv matches the C++ launcher byte for byte, every arm", "[gpu][capi]") {
  const PostconvCase cases[] = {
      {17, 2, 4, 128, 128, 8, 3, 1, DType::bf16, DType::bf16, DType::bf16},
      {16, 16, 32, 128, 128, 0, 0, 0, DType::f32, DType::f32, DType::f32},
      {5, 2, 6, 32, 64, 5, 2, 0, DType::bf16, DType::f32, DType::f32},  // token_tile falls back to fast
      {1, 4, 8, 128, 128, 0, 1, 1, DType::bf16, DType::bf16, DType::f32},
      {129, 16, 48, 128, 128, 16, 16, 16, DType::bf16, DType::bf16, DType::bf16},
  };
  uint64_t seed = 2000;
  for (const auto& u : cases) {
    for (const char* arm : {"megablock", "fast", "split", "token_tile", static_cast<const char*>(nullptr)}) {
      ++seed;
      const int C = 2 * u.Hk * u.Dk + u.Hv * u.Dv;
      const int64_t cs = C + u.conv_pad, as = u.Hv + u.a_pad, bs = u.Hv + u.b_pad;
      INFO("T=" << u.T << " Hk=" << u.Hk << " Hv=" << u.Hv << " Dk=" << u.Dk << " Dv=" << u.Dv
                << " conv=" << dname(u.conv) << " ab=" << dname(u.ab) << " qkv=" << dname(u.qkv)
                << " arm=" << (arm ? arm : "(default)") << " seed=" << seed);
      const DevBuf conv = DevBuf::from(values(static_cast<size_t>(u.T) * cs, seed, u.conv), u.conv);
      const DevBuf a = DevBuf::from(values(static_cast<size_t>(u.T) * as, seed + 1, u.ab, -3.f, 3.f), u.ab);
      const DevBuf b = DevBuf::from(values(static_cast<size_t>(u.T) * bs, seed + 2, u.ab, -3.f, 3.f), u.ab);
      const DevBuf A_log = DevBuf::from(test::uniform(u.Hv, seed + 3, -1.f, 1.f), DType::f32);
      const DevBuf dt_bias = DevBuf::from(test::uniform(u.Hv, seed + 4, -1.f, 1.f), DType::f32);
      const size_t qk_bytes = static_cast<size_t>(u.T) * u.Hk * u.Dk * dtype_size(u.qkv);
      const size_t v_bytes = static_cast<size_t>(u.T) * u.Hv * u.Dv * dtype_size(u.qkv);
      const size_t gb_bytes = static_cast<size_t>(u.T) * u.Hv * sizeof(float);
      DevBuf q1(qk_bytes, kPoison), k1(qk_bytes, kPoison), v1(v_bytes, kPoison), g1(gb_bytes, kPoison),
          be1(gb_bytes, kPoison);
      DevBuf q2(qk_bytes, kPoison), k2(qk_bytes, kPoison), v2(v_bytes, kPoison), g2(gb_bytes, kPoison),
          be2(gb_bytes, kPoison);

      const auto want_arm = arm ? *arm_from_name<PostconvArm>(arm) : ArmSelection{}.postconv;
      const auto contract = postconv_contract(want_arm, PostconvShape{u.T, u.Hk, u.Hv, u.Dk, u.Dv});
      PostconvParams p;
      p.conv = conv.data();
      p.conv_stride = cs;
      p.conv_dtype = u.conv;
      p.a = a.data();
      p.a_stride = as;
      p.b = b.data();
      p.b_stride = bs;
      p.ab_dtype = u.ab;
      p.A_log = A_log.as<float>();
      p.dt_bias = dt_bias.as<float>();
      p.q = q1.data();
      p.k = k1.data();
      p.v = v1.data();
      p.qkv_dtype = u.qkv;
      p.g = g1.as<float>();
      p.beta = be1.as<float>();
      p.T = u.T;
      p.Hk = u.Hk;
      p.Hv = u.Hv;
      p.Dk = u.Dk;
      p.Dv = u.Dv;
      check(postconv(p, contract, nullptr));

      sg_postconv_args c{};
      c.conv = conv.data();
      c.conv_stride = cs;
      c.conv_dtype = to_c(u.conv);
      c.a = a.data();
      c.a_stride = as;
      c.b = b.data();
      c.b_stride = bs;
      c.ab_dtype = to_c(u.ab);
      c.A_log = A_log.as<float>();
      c.dt_bias = dt_bias.as<float>();
      c.q = q2.data();
      c.k = k2.data();
      c.v = v2.data();
      c.qkv_dtype = to_c(u.qkv);
      c.g = g2.as<float>();
      c.beta = be2.as<float>();
      c.T = u.T;
      c.Hk = u.Hk;
      c.Hv = u.Hv;
      c.Dk = u.Dk;
      c.Dv = u.Dv;
      require_ok(sg_postconv(&c, arm, nullptr));
      const std::string launch = sg_last_launch();
      INFO(launch);
      CHECK(contains(launch, "postconv=" + std::string(arm_name(contract.arm)) + " kernel " +
                                 std::string(contract.kernel) + " grid " + to_string(contract.grid)));
      if (arm && !contract.fallback_reason.empty()) CHECK(contains(launch, "(requested " + std::string(arm) + ": "));
      check(cudaDeviceSynchronize());

      check_same(q2, q1, u.qkv, "q");
      check_same(k2, k1, u.qkv, "k");
      check_same(v2, v1, u.qkv, "v");
      check_same(g2, g1, DType::f32, "g");
      check_same(be2, be1, DType::f32, "beta");
    }
  }
}

// --- conv.fwd -------------------------------------------------------------------------------------

namespace {

struct FwdCase {
  int C, K;
  int pad_cols;
  DType x, out, state;
  bool bias, silu;
};

// One varlen batch on the device, with its metadata in both forms.
struct FwdProblem {
  FwdCase u;
  std::vector<int32_t> cu, slots;
  std::vector<uint8_t> hist;
  std::vector<ConvChunk> chunks;
  int N = 0, T = 0, max_tokens = 0, max_seqs = 0, num_slots = 0;
  int64_t stride = 0;
  DevBuf x, w, bias, cu_dev, slots_dev, hist_dev, n_seqs_dev, chunks_dev, n_chunks_dev;
  std::vector<float> state0;
};

FwdProblem make_fwd(const FwdCase& u, uint64_t seed) {
  FwdProblem p;
  p.u = u;
  const std::vector<int32_t> lens{33, 0, 37, 1, 2, 9};
  p.slots = {3, 5, -1, 0, 6, 2};
  p.hist = {1, 1, 1, 0, 1, 0};
  p.N = static_cast<int>(lens.size());
  p.cu = {0};
  for (int32_t l : lens) p.cu.push_back(p.cu.back() + l);
  p.T = p.cu.back();
  p.max_tokens = p.T + 9;
  p.max_seqs = p.N + 2;
  p.num_slots = 8;
  p.stride = u.C + u.pad_cols;
  p.chunks = build_conv_chunks(p.cu);
  // Device metadata padded to the bucket: cu_seqlens [max_seqs + 1], slots and history [max_seqs],
  // descriptors [conv_max_chunks] (zeros past the live ones).
  std::vector<int32_t> cu_pad = p.cu, slots_pad = p.slots;
  std::vector<uint8_t> hist_pad = p.hist;
  cu_pad.resize(p.max_seqs + 1, p.T);
  slots_pad.resize(p.max_seqs, -1);
  hist_pad.resize(p.max_seqs, 0);
  std::vector<ConvChunk> chunks_pad = p.chunks;
  chunks_pad.resize(conv_max_chunks(p.max_tokens, p.max_seqs), ConvChunk{0, 0, 0});
  std::vector<uint8_t> chunk_bytes(chunks_pad.size() * sizeof(ConvChunk));
  std::memcpy(chunk_bytes.data(), chunks_pad.data(), chunk_bytes.size());
  p.x = DevBuf::from(values(static_cast<size_t>(p.max_tokens) * p.stride, seed, u.x), u.x);
  p.w = DevBuf::from(test::uniform(static_cast<size_t>(u.C) * u.K, seed + 1), DType::f32);
  p.bias = DevBuf::from(test::uniform(u.C, seed + 2, -0.5f, 0.5f), DType::f32);
  p.cu_dev = DevBuf::from_i32(cu_pad);
  p.slots_dev = DevBuf::from_i32(slots_pad);
  p.hist_dev = DevBuf::from_bytes(hist_pad);
  p.n_seqs_dev = DevBuf::from_i32({p.N});
  p.chunks_dev = DevBuf::from_bytes(chunk_bytes);
  p.n_chunks_dev = DevBuf::from_i32({static_cast<int32_t>(p.chunks.size())});
  p.state0 = values(static_cast<size_t>(p.num_slots) * u.C * (u.K - 1), seed + 3, u.state);
  return p;
}

size_t fwd_out_bytes(const FwdProblem& p) { return static_cast<size_t>(p.max_tokens) * p.u.C * dtype_size(p.u.out); }

// The C struct for p with the device metadata (a), writing to out/state.
sg_conv_fwd_args fwd_args(const FwdProblem& p, void* out, void* state) {
  sg_conv_fwd_args a{};
  a.x = p.x.data();
  a.x_stride = p.stride;
  a.x_dtype = to_c(p.u.x);
  a.out = out;
  a.out_dtype = to_c(p.u.out);
  a.state = state;
  a.state_dtype = to_c(p.u.state);
  a.w = p.w.as<float>();
  a.bias = p.u.bias ? p.bias.as<float>() : nullptr;
  a.cu_seqlens = p.cu_dev.as<int32_t>();
  a.slots = p.slots_dev.as<int32_t>();
  a.has_history = p.hist_dev.as<uint8_t>();
  a.C = p.u.C;
  a.K = p.u.K;
  a.max_tokens = p.max_tokens;
  a.max_seqs = p.max_seqs;
  a.silu = p.u.silu;
  a.n_seqs = p.n_seqs_dev.as<int32_t>();
  a.chunks = p.chunks_dev.as<sg_conv_chunk>();
  a.n_chunks = p.n_chunks_dev.as<int32_t>();
  return a;
}

// The same struct switched to host metadata (b) with `ws` as the workspace.
sg_conv_fwd_args host_meta(sg_conv_fwd_args a, const FwdProblem& p, const DevBuf& ws) {
  a.n_seqs = nullptr;
  a.chunks = nullptr;
  a.n_chunks = nullptr;
  a.cu_seqlens_host = p.cu.data();
  a.N = p.N;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  return a;
}

}  // namespace

TEST_CASE("C API conv.fwd matches the C++ launcher byte for byte, device and host metadata", "[gpu][capi]") {
  const FwdCase cases[] = {
      {385, 4, 7, DType::bf16, DType::bf16, DType::bf16, true, true},
      {1024, 4, 0, DType::f32, DType::f32, DType::bf16, false, true},
      {129, 3, 3, DType::f32, DType::f32, DType::f32, true, false},  // k4 and k4x2 fall back to register
      {64, 2, 1, DType::bf16, DType::f32, DType::f32, true, true},   // mixed x/out: tiled only
  };
  uint64_t seed = 3000;
  for (const auto& u : cases) {
    for (const char* arm : {"tiled", "register", "k4", "k4x2"}) {
      for (const char* split : {"exact", "whole"}) {
        ++seed;
        const auto want_arm = *arm_from_name<ConvFwdArm>(arm);
        const auto want_split = *arm_from_name<ConvChunksArm>(split);
        FwdProblem p = make_fwd(u, seed);
        const auto contract = conv_fwd_contract(want_arm, want_split, ConvFwdShape{p.max_tokens, p.max_seqs, u.C, u.K});
        INFO("C=" << u.C << " K=" << u.K << " x=" << dname(u.x) << " out=" << dname(u.out)
                  << " state=" << dname(u.state) << " arm=" << arm << " chunks=" << split << " seed=" << seed);
        if (contract.arm != ConvFwdArm::tiled && u.x != u.out) {
          sg_conv_fwd_args a = fwd_args(p, p.x.data(), p.x.data());  // never launched
          CHECK(sg_conv_fwd(&a, arm, split, nullptr) == SG_ERR_DTYPE);
          continue;
        }
        const size_t ob = fwd_out_bytes(p);
        DevBuf out_cpp(ob, kPoison), out_a(ob, kPoison), out_b(ob, kPoison), out_d(ob, kPoison);
        DevBuf st_cpp = DevBuf::from(p.state0, u.state), st_a = DevBuf::from(p.state0, u.state),
               st_b = DevBuf::from(p.state0, u.state), st_d = DevBuf::from(p.state0, u.state);

        ConvFwdParams cp;
        cp.x = p.x.data();
        cp.x_stride = p.stride;
        cp.x_dtype = u.x;
        cp.out = out_cpp.data();
        cp.out_dtype = u.out;
        cp.state = st_cpp.data();
        cp.state_dtype = u.state;
        cp.w = p.w.as<float>();
        cp.bias = u.bias ? p.bias.as<float>() : nullptr;
        cp.silu = u.silu;
        cp.cu_seqlens = p.cu_dev.as<int32_t>();
        cp.slots = p.slots_dev.as<int32_t>();
        cp.has_history = p.hist_dev.as<uint8_t>();
        cp.n_seqs = p.n_seqs_dev.as<int32_t>();
        cp.chunks = p.chunks_dev.as<ConvChunk>();
        cp.n_chunks = p.n_chunks_dev.as<int32_t>();
        cp.C = u.C;
        cp.K = u.K;
        cp.max_tokens = p.max_tokens;
        cp.max_seqs = p.max_seqs;
        check(conv_fwd(cp, contract, want_split, nullptr));

        // (a) device metadata.
        sg_conv_fwd_args a = fwd_args(p, out_a.data(), st_a.data());
        require_ok(sg_conv_fwd(&a, arm, split, nullptr));
        const std::string launch = sg_last_launch();
        INFO(launch);
        CHECK(contains(launch, "conv.fwd=" + std::string(arm_name(contract.arm)) + " kernel " +
                                   std::string(contract.kernel) + " grid " + to_string(contract.grid)));
        CHECK(contains(launch, " chunks " + std::string(split)));

        // (b) host metadata, same bucket; (d) host metadata, default buckets (T, N): another grid,
        // the same bytes on the live rows (the rows past T are not written: compared separately).
        size_t ws_bytes = 0;
        require_ok(sg_conv_fwd_workspace_bytes(p.max_tokens, p.max_seqs, &ws_bytes));
        DevBuf ws(ws_bytes, 0x5A);
        sg_conv_fwd_args b = host_meta(fwd_args(p, out_b.data(), st_b.data()), p, ws);
        require_ok(sg_conv_fwd(&b, arm, split, nullptr));
        sg_conv_fwd_args d = host_meta(fwd_args(p, out_d.data(), st_d.data()), p, ws);
        d.max_tokens = 0;
        d.max_seqs = 0;
        require_ok(sg_conv_fwd(&d, arm, split, nullptr));
        check(cudaDeviceSynchronize());

        check_same(out_a, out_cpp, u.out, "out (a)");
        check_same(st_a, st_cpp, u.state, "state (a)");
        check_same(out_b, out_cpp, u.out, "out (b)");
        check_same(st_b, st_cpp, u.state, "state (b)");
        check_same(out_d, out_cpp, u.out, "out (b, default buckets)");
        check_same(st_d, st_cpp, u.state, "state (b, default buckets)");
        const auto got = out_cpp.download();
        const size_t live = static_cast<size_t>(p.T) * u.C * dtype_size(u.out);
        CHECK(std::count(got.begin() + live, got.end(), kPoison) == static_cast<long>(got.size() - live));
      }
    }
  }
}

TEST_CASE("C API under graph capture: host metadata is refused, device metadata replays eager's bytes",
          "[gpu][capi][graphs]") {
  const FwdCase u{385, 4, 7, DType::bf16, DType::bf16, DType::bf16, true, true};
  FwdProblem p = make_fwd(u, 4001);
  const size_t ob = fwd_out_bytes(p);
  DevBuf out_eager(ob, kPoison), out_graph(ob, kPoison);
  DevBuf st_eager = DevBuf::from(p.state0, u.state), st_graph = DevBuf::from(p.state0, u.state);
  size_t ws_bytes = 0;
  require_ok(sg_conv_fwd_workspace_bytes(p.max_tokens, p.max_seqs, &ws_bytes));
  DevBuf ws(ws_bytes, 0);

  Stream s;
  check(cudaDeviceSynchronize());  // every buffer is ready before the capture starts
  sg_conv_fwd_args eager = fwd_args(p, out_eager.data(), st_eager.data());
  require_ok(sg_conv_fwd(&eager, "register", "exact", s.get()));
  s.sync();

  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  sg_conv_fwd_args host = host_meta(fwd_args(p, out_graph.data(), st_graph.data()), p, ws);
  const int refused = sg_conv_fwd(&host, "register", "exact", s.get());
  const std::string refused_msg = sg_last_error();
  sg_conv_fwd_args dev = fwd_args(p, out_graph.data(), st_graph.data());
  const int captured = sg_conv_fwd(&dev, "register", "exact", s.get());
  const std::string captured_msg = sg_last_error();
  const cudaError_t end = cudaStreamEndCapture(s.get(), &graph);
  CHECK(refused == SG_ERR_CAPTURE);
  CHECK(contains(refused_msg, "being captured"));
  INFO(captured_msg);
  CHECK(captured == SG_OK);
  REQUIRE(end == cudaSuccess);  // the refusal did not invalidate the capture
  size_t nodes = 0;
  check(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes == 1);  // one kernel, no copy
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0));
  check(cudaGraphLaunch(exec, s.get()));
  s.sync();
  check(cudaGraphExecDestroy(exec));
  check(cudaGraphDestroy(graph));
  check_same(out_graph, out_eager, u.out, "out (graph)");
  check_same(st_graph, st_eager, u.state, "state (graph)");

  // conv.update and postconv have no host metadata: they capture as they are.
  check(cudaDeviceSynchronize());
  const int rows = 3, C = 2 * 2 * 32 + 4 * 64;
  const DevBuf x = DevBuf::from(values(static_cast<size_t>(rows) * C, 4002, DType::bf16), DType::bf16);
  const DevBuf w = DevBuf::from(test::uniform(static_cast<size_t>(C) * 4, 4003), DType::f32);
  const DevBuf sl = DevBuf::from_i32({2, -1, 0});
  const auto state0 = values(static_cast<size_t>(3) * C * 3, 4004, DType::bf16);
  DevBuf s1 = DevBuf::from(state0, DType::bf16), s2 = DevBuf::from(state0, DType::bf16);
  DevBuf o1(static_cast<size_t>(rows) * C * 2, kPoison), o2(static_cast<size_t>(rows) * C * 2, kPoison);
  sg_conv_update_args ua{};
  ua.x = x.data();
  ua.x_stride = C;
  ua.x_dtype = ua.out_dtype = ua.state_dtype = SG_BF16;
  ua.slots = sl.as<int32_t>();
  ua.w = w.as<float>();
  ua.rows = rows;
  ua.C = C;
  ua.K = 4;
  ua.silu = 1;
  ua.out = o1.data();
  ua.state = s1.data();
  check(cudaDeviceSynchronize());
  require_ok(sg_conv_update(&ua, "fast", s.get()));
  s.sync();
  ua.out = o2.data();
  ua.state = s2.data();
  check(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  const int rc = sg_conv_update(&ua, "fast", s.get());
  check(cudaStreamEndCapture(s.get(), &graph));
  require_ok(rc);
  check(cudaGraphInstantiate(&exec, graph, 0));
  check(cudaGraphLaunch(exec, s.get()));
  s.sync();
  check(cudaGraphExecDestroy(exec));
  check(cudaGraphDestroy(graph));
  check_same(o2, o1, DType::bf16, "conv.update out (graph)");
  check_same(s2, s1, DType::bf16, "conv.update state (graph)");
}
