// kernel_bench_gemm.cpp: the projections of `stepgraph kernels` on decode shapes (--op gemm): each
// projection weight of the preset (gdn.in_proj, gdn.out_proj, attn.qkv_proj, attn.o_proj,
// mlp.gate_up, mlp.down, lm_head) at the shape's rows, y = x W^T in bf16, through the forms of the
// --gemm setting: cublasGemmEx (cublas, the first row), cuBLASLt with the fastest of its top
// heuristic algorithms timed on the shape (lt) and the skinny tensor-core kernel with the block
// rows and split count the model picks (skinny: compute capability 9.0, at most 32 rows). They sum
// in other orders (a setting, not arms), so each row's y is compared with cublas's by its
// L2-normalised error. The weights rotate over enough buffer sets that every launch streams its W
// from memory, as the step's 24 layers do.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/gemm.h"
#include "engine/gemm_lt.h"
#include "engine/tensor.h"
#include "kernels/fill.h"
#include "kernels/skinny_gemm.h"
#include "models/qwen35_config.h"
#include "models/step_settings.h"
#include "tools/cli/kernel_bench_cases.h"

namespace sg::bench {

namespace {

struct Projection {
  const char* name;
  int64_t N, K;  // W [N, K]
};

// The model's projection weights ([out, in], models/step_layout.cpp) for the preset.
std::vector<Projection> projections(const Qwen35Config& c) {
  const GdnDims& g = c.gdn;
  std::vector<Projection> out;
  if (c.num_linear_attention() > 0) {
    out.push_back({"gdn.in_proj", g.C() + int64_t{g.Hv} * g.Dv + 2 * int64_t{g.Hv}, c.hidden});
    out.push_back({"gdn.out_proj", c.hidden, int64_t{g.Hv} * g.Dv});
  }
  if (c.num_full_attention() > 0) {
    out.push_back({"attn.qkv_proj", 2 * int64_t{c.Hq} * c.D + 2 * int64_t{c.Hkv} * c.D, c.hidden});
    out.push_back({"attn.o_proj", c.hidden, int64_t{c.Hq} * c.D});
  }
  out.push_back({"mlp.gate_up", 2 * int64_t{c.intermediate}, c.hidden});
  out.push_back({"mlp.down", c.hidden, c.intermediate});
  out.push_back({"lm_head", c.vocab, c.hidden});
  return out;
}

// The handles every projection's rows share (one stream, one GEMM at a time on it).
struct GemmHandles {
  CublasHandle cublas;
  LtGemm lt;
  explicit GemmHandles(cudaStream_t st) : cublas(st), lt(st, cublas.workspace(), cublas.workspace_bytes()) {}
};

}  // namespace

std::vector<OpCase> gemm_cases(const KernelShape& s, Buffers& buf, cudaStream_t st,
                               const std::function<void(const std::string&)>& progress) {
  const Qwen35Config cfg = preset(s.model);
  const int M = s.rows;
  const DType bf = DType::bf16;
  const DeviceLimits dl = DeviceLimits::current();
  auto h = std::make_shared<GemmHandles>(st);
  std::vector<OpCase> cases;
  for (const Projection& pr : projections(cfg)) {
    const size_t wb = static_cast<size_t>(pr.N * pr.K) * 2, xb = static_cast<size_t>(M * pr.K) * 2,
                 yb = static_cast<size_t>(M * pr.N) * 2;
    // Enough weight copies for 256 MB, at most 24: a weight never stays in the 60 MB L2 between its launches.
    const int sets = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / wb + 1, 1, 24));
    std::vector<TensorView> x, W, y;
    for (int i = 0; i < sets; ++i) {
      x.push_back(TensorView::contiguous(buf.make(xb), bf, {M, pr.K}));
      W.push_back(TensorView::contiguous(buf.make(wb), bf, {pr.N, pr.K}));
      y.push_back(TensorView::contiguous(buf.make(yb), bf, {M, pr.N}));
      check(fill_uniform(x.back().data, bf, M * pr.K, 1000 + i, -1.f, 1.f, st));
      check(fill_uniform(W.back().data, bf, pr.N * pr.K, 1100 + i, -0.05f, 0.05f, st));
    }
    OpCase oc;
    oc.op = pr.name;
    oc.sets = sets;
    oc.bytes = static_cast<double>(wb + xb + yb);
    oc.flops = 2.0 * M * static_cast<double>(pr.N) * static_cast<double>(pr.K);
    oc.setting = true;
    // Per element each form is within 1e-5 of the sum of |x W| plus a bf16 rounding of cublas's
    // test reference (tests/gpu/test_gemm.cpp), so two forms within about 2 (2^-8 + 1e-5 sqrt(K))
    // over the whole y: 1e-2.
    oc.out_tolerance = 1e-2;
    oc.state_tolerance = 0;
    oc.arms.push_back({"cublas", "cublasGemmEx", {}, {}, [h, x, W, y](int i, cudaStream_t) {
                         gemm_xwt(h->cublas, x[i], W[i], y[i]);
                       }});
    if (M <= kGemmLtMaxRows) {
      h->lt.tune(x[0], W[0], y[0]);  // one choice for the shape (every set's), timed now: never in a capture
      oc.arms.push_back({"lt", h->lt.describe(lt_shape(x[0], W[0], y[0])), {}, {}, [h, x, W, y](int i, cudaStream_t) {
                           h->lt.run(x[i], W[i], y[i]);
                         }});
    }
    const int N = static_cast<int>(pr.N), K = static_cast<int>(pr.K);
    if (dl.cc_major == 9 && dl.cc_minor == 0 && M <= 32 && pr.N <= INT32_MAX && skinny_gemm_supports(M, N, K)) {
      SkinnyGemmParams p;
      p.M = M, p.N = N, p.K = K;
      p.block_rows = skinny_gemm_block_rows(M, N, dl.sms);
      p.splits = skinny_gemm_pick_splits(M, N, K, dl.sms);
      p.y_dtype = bf;
      if (p.splits > 1) {
        p.workspace = static_cast<float*>(buf.make(skinny_gemm_workspace_bytes(M, N, p.splits)));
        p.counters = static_cast<int32_t*>(buf.make(static_cast<size_t>((N + 63) / 64) * 4));
        check(cudaMemsetAsync(p.counters, 0, static_cast<size_t>((N + 63) / 64) * 4, st));  // left zero by every launch
      }
      oc.arms.push_back({"skinny",
                         fmt::format("skinny bn={} splits={}", p.block_rows, p.splits),
                         {},
                         {},
                         [p, x, W, y](int i, cudaStream_t x_st) {
                           SkinnyGemmParams q = p;
                           q.x = x[i].data, q.W = W[i].data, q.y = y[i].data;
                           check(skinny_gemm(q, x_st));
                         }});
    } else {
      progress(fmt::format("  {} skinny: not run (compute capability 9.0 and at most 32 rows, K % 64 == 0)", pr.name));
    }
    oc.reset = [y0 = y[0], yb](cudaStream_t x_st) { check(cudaMemsetAsync(y0.data, 0xA5, yb, x_st)); };
    oc.values = [y0 = y[0], yb] { return Values{download_bf16(y0.data, yb), {}}; };
    oc.outputs = [y0 = y[0], yb] { return download(y0.data, yb); };
    cases.push_back(std::move(oc));
  }
  return cases;
}

}  // namespace sg::bench
