// kernel_bench_gemm.cpp: the projections of `stepgraph kernels` (--op gemm): each projection weight
// of the preset (gdn.in_proj, gdn.out_proj, attn.qkv_proj, attn.o_proj, mlp.gate_up, mlp.down,
// lm_head) at the rows the step gives it (decode: the batch; prefill: every token, and for lm_head
// one row a sequence, the last tokens the step gathers), y = x W^T in bf16, through
// the forms of the --gemm setting: cublasGemmEx (cublas, the first row), cuBLASLt with the fastest of
// its top heuristic algorithms timed on the shape (lt, at most 32 rows), the skinny tensor-core kernel
// with the block rows and split count the model picks (skinny: compute capability 9.0, at most 32
// rows) and the own wgmma GEMM (wgmma: compute capability 9.0, more than 32 rows); on prefill shapes
// also gate_up with its SwiGLU (mlp.gate_up+swiglu: cublasGemmEx followed by the swiglu kernel
// against the wgmma GEMM's epilogue, the activation compared). They sum in other orders (a setting,
// not arms), so each row's output is compared with the first row's by its L2-normalised error. On
// decode shapes the weights rotate over enough buffer sets that every launch streams its W from
// memory, as the step's 24 layers do; prefill GEMMs are bound by their products, one set.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/gemm.h"
#include "engine/gemm_lt.h"
#include "engine/tensor.h"
#include "kernels/fill.h"
#include "kernels/gemm_wgmma.h"
#include "kernels/skinny_gemm.h"
#include "kernels/swiglu.h"
#include "models/qwen35_config.h"
#include "models/step_settings.h"
#include "tools/cli/kernel_bench_cases.h"

namespace sg::bench {

namespace {

struct Projection {
  const char* name;
  int64_t N, K;              // W [N, K]
  bool last_tokens = false;  // a prefill step runs it on each sequence's last token only (the LM head)
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
  out.push_back({"lm_head", c.vocab, c.hidden, true});
  return out;
}

// The handles every projection's rows share (one stream, one GEMM at a time on it).
struct GemmHandles {
  CublasHandle cublas;
  LtGemm lt;
  explicit GemmHandles(cudaStream_t st) : cublas(st), lt(st, cublas.workspace(), cublas.workspace_bytes()) {}
};

GemmWgmmaParams wgmma_params(const TensorView& x, const TensorView& W, void* y, int sms) {
  GemmWgmmaParams p;
  p.x = x.data;
  p.W = W.data;
  p.y = y;
  p.M = static_cast<int>(x.dim(0));
  p.N = static_cast<int>(W.dim(0));
  p.K = static_cast<int>(W.dim(1));
  p.sms = sms;
  return p;
}

// gate_up with its activation on a prefill shape: x [M, H], W [2I, H] (gate and up rows taken as
// interleaved in groups of 8, the model's layout), gu [M, 2I] the two-kernel form's intermediate;
// act [M, I] compared. Bytes: x, W and act (the fused form's; the two-kernel form also writes and
// reads gu).
OpCase swiglu_case(int M, int I, const TensorView& x, const TensorView& W, const TensorView& gu, Buffers& buf,
                   const std::shared_ptr<GemmHandles>& h, int sms) {
  const size_t ab = static_cast<size_t>(M) * I * 2;
  void* act = buf.make(ab);
  OpCase oc;
  oc.op = "mlp.gate_up+swiglu";
  oc.bytes = static_cast<double>(x.bytes() + W.bytes() + ab);
  oc.flops = 2.0 * M * static_cast<double>(W.dim(0)) * static_cast<double>(W.dim(1));
  oc.setting = true;
  oc.out_tolerance = 1e-2;  // as the GEMM rows: the activation of two GEMMs within it
  SwigluParams sp;
  sp.gu = gu.data;
  sp.y = act;
  sp.T = M;
  sp.I = I;
  sp.interleave = 8;
  oc.arms.push_back({"cublas+swiglu", "cublasGemmEx + swiglu", {}, {}, [h, x, W, gu, sp](int, cudaStream_t x_st) {
                       gemm_xwt(h->cublas, x, W, gu);
                       check(swiglu(sp, x_st));
                     }});
  GemmWgmmaParams p = wgmma_params(x, W, act, sms);
  p.swiglu_group = 8;
  oc.arms.push_back({"wgmma+swiglu", "gemm_wgmma (SwiGLU epilogue)", {}, {}, [p](int, cudaStream_t x_st) {
                       check(gemm_wgmma(p, x_st));
                     }});
  oc.reset = [act, ab](cudaStream_t x_st) { check(cudaMemsetAsync(act, 0xA5, ab, x_st)); };
  oc.values = [act, ab] { return Values{download_bf16(act, ab), {}}; };
  oc.outputs = [act, ab] { return download(act, ab); };
  return oc;
}

}  // namespace

std::vector<OpCase> gemm_cases(const KernelShape& s, Buffers& buf, cudaStream_t st,
                               const std::function<void(const std::string&)>& progress) {
  const Qwen35Config cfg = preset(s.model);
  const DType bf = DType::bf16;
  const DeviceLimits dl = DeviceLimits::current();
  auto h = std::make_shared<GemmHandles>(st);
  std::vector<OpCase> cases;
  for (const Projection& pr : projections(cfg)) {
    // Decode: the batch; prefill: every token of every sequence, or one row a sequence (gather_last).
    const int M = pr.last_tokens ? s.rows : s.tokens();
    const size_t wb = static_cast<size_t>(pr.N * pr.K) * 2, xb = static_cast<size_t>(M * pr.K) * 2,
                 yb = static_cast<size_t>(M * pr.N) * 2;
    // Decode: enough weight copies for 256 MB, at most 24, so that a weight never stays in the 60 MB L2
    // between its launches. Prefill: one.
    const int sets =
        M <= kGemmLtMaxRows ? static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / wb + 1, 1, 24)) : 1;
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
    if (dl.cc_major == 9 && dl.cc_minor == 0 && pr.N <= INT32_MAX && skinny_gemm_supports(M, N, K)) {
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
    } else if (M <= kGemmLtMaxRows) {
      progress(fmt::format("  {} skinny: not run (compute capability 9.0 and at most 32 rows, K % 64 == 0)", pr.name));
    }
    const bool wgmma = sm90a_device(dl.cc_major, dl.cc_minor) && M > kGemmLtMaxRows;
    if (wgmma && gemm_wgmma_supports(M, pr.N, pr.K, 0)) {
      oc.arms.push_back({"wgmma", "gemm_wgmma", {}, {}, [x, W, y, sms = dl.sms](int i, cudaStream_t x_st) {
                           check(gemm_wgmma(wgmma_params(x[i], W[i], y[i].data, sms), x_st));
                         }});
    } else if (M > kGemmLtMaxRows) {
      progress(fmt::format("  {} wgmma: not run (compute capability 9.0, N and K multiples of 8)", pr.name));
    }
    oc.reset = [y0 = y[0], yb](cudaStream_t x_st) { check(cudaMemsetAsync(y0.data, 0xA5, yb, x_st)); };
    oc.values = [y0 = y[0], yb] { return Values{download_bf16(y0.data, yb), {}}; };
    oc.outputs = [y0 = y[0], yb] { return download(y0.data, yb); };
    cases.push_back(std::move(oc));
    if (wgmma && std::string_view(pr.name) == "mlp.gate_up" && gemm_wgmma_supports(M, pr.N, pr.K, 8) &&
        cfg.intermediate % 8 == 0) {
      cases.push_back(swiglu_case(M, static_cast<int>(cfg.intermediate), x[0], W[0], y[0], buf, h, dl.sms));
    }
  }
  return cases;
}

}  // namespace sg::bench
