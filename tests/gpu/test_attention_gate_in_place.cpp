// GPU tests of the attention gate read in place (AttentionParams::gate_stride / gate_head_stride):
// the model hands the attention kernels the q / gate projection itself (qg + D, strides qg's row
// and 2 D) and attn_prep copies no gate. Every kernel (CUDA-core decode with and without split-K
// and prefill, tensor-core decode, mma and wgmma prefill) gives the packed gate's bytes that way;
// the generic kernel of other head sizes too; attn_prep without a gate gives the same q and cache bytes and leaves the
// gate buffer untouched; negative strides, and strides the tensor-core kernels cannot read 16 bytes at a time, are
// rejected.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_decode_mma.h"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attention_shapes.h"
#include "models/step_settings.h"
#include "tests/gpu/attention_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::attn;

namespace {

struct Kernel {
  const char* name;
  bool tensor_cores;  // needs strides of whole 16-byte chunks
  int splits;         // decode: context splits (> 1: the partials, then the merge kernel)
  cudaError_t (*launch)(const AttentionParams&, cudaStream_t);
  bool (*runs)(const Shape&);
};

bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return attention_prefill_wgmma_device(d.cc_major, d.cc_minor);
}

const Kernel kKernels[] = {
    {"decode", false, 1, attention_decode, [](const Shape&) { return true; }},
    {"decode split-K", false, 3, attention_decode, [](const Shape&) { return true; }},
    {"prefill", false, 1, attention_prefill, [](const Shape&) { return true; }},
    {"decode mma", true, 1, attention_decode_mma,
     [](const Shape& s) { return attention_decode_mma_supports(s.Hq, s.Hkv, s.D, DType::bf16, DType::bf16); }},
    {"decode mma split-K", true, 3, attention_decode_mma,
     [](const Shape& s) { return attention_decode_mma_supports(s.Hq, s.Hkv, s.D, DType::bf16, DType::bf16); }},
    {"prefill mma", true, 1, [](const AttentionParams& p, cudaStream_t s) { return attention_prefill_mma(p, s); },
     [](const Shape& s) { return attention_prefill_mma_supports(s.D, DType::bf16, DType::bf16); }},
    {"prefill wgmma", true, 1, attention_prefill_wgmma,
     [](const Shape& s) { return attention_prefill_wgmma_supports(s.D, DType::bf16, DType::bf16) && on_cc90(); }},
};

}  // namespace

TEST_CASE("attention: the gate read in place from the q / gate projection gives the packed gate's bytes",
          "[gpu][attention][gate]") {
  const PrefillCase& pc = prefill_cases()[0];  // history, a zero-length and a padding sequence, padding rows
  // The 4B's heads, a small tuned head size and one only the generic kernel runs (D 48).
  for (const Shape& sh : {kShapes[0], kShapes[2], Shape{4, 2, 48, 16, 1e4}}) {
    CAPTURE(sh.Hq, sh.Hkv, sh.D);
    const Batch b = make_batch(pc.seqs, pc.pad);
    const DevMeta dm(b);
    const Inputs in = make_inputs(sh, b.T, 4242);
    Cache c(sh, 5, pc.max_ctx, 0xFF), c2(sh, 5, pc.max_ctx, 0xFF);
    fill_history(sh, c, pc.seqs, 4252);
    fill_history(sh, c2, pc.seqs, 4252);
    const PrepOut po = run_prep(sh, b, dm, in, c, true);
    {  // attn_prep without a gate: the same q and caches, no gate written
      const PrepOut none = run_prep(sh, b, dm, in, c2, true, DType::f32, false);
      CHECK(test::byte_diff(none.q.download(), po.q.download(), DType::bf16) == "");
      CHECK(test::byte_diff(c2.k.download(), c.k.download(), DType::bf16) == "");
      CHECK(test::byte_diff(c2.v.download(), c.v.download(), DType::bf16) == "");
      CHECK(test::byte_diff(none.gate.download(), std::vector<uint8_t>(none.gate.bytes(), 0xA5), DType::bf16) == "");
    }
    const test::DevBuf qg = test::DevBuf::from(in.qg, in.act);  // [T, Hq, 2 D]: per head D of q, then D of gate
    const size_t bytes = static_cast<size_t>(b.T) * sh.Hq * sh.D * 2;
    for (const Kernel& k : kKernels) {
      CAPTURE(k.name);
      if (!k.runs(sh)) continue;
      test::DevBuf packed(bytes), in_place(bytes);
      test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(b.T, sh.Hq, sh.D, k.splits)));
      AttentionParams p = attn_params(sh, b, dm, po, c, packed, DType::bf16);
      p.splits = k.splits;
      p.workspace = k.splits > 1 ? static_cast<float*>(ws.data()) : nullptr;
      check(k.launch(p, nullptr));
      check(cudaDeviceSynchronize());
      AttentionParams g = p;
      g.out = in_place.data();
      g.gate = static_cast<const char*>(qg.data()) + 2 * sh.D;  // bf16: D elements on
      g.gate_stride = static_cast<int64_t>(sh.Hq) * 2 * sh.D;
      g.gate_head_stride = 2 * sh.D;
      check(k.launch(g, nullptr));
      check(cudaDeviceSynchronize());
      const auto want = packed.download();
      CHECK(test::byte_diff(in_place.download(), want, DType::bf16) == "");
      CHECK_FALSE(has_nan(packed.download_f32(DType::bf16)));
      AttentionParams bad = g;
      bad.gate_stride = -1;
      CHECK(k.launch(bad, nullptr) == cudaErrorInvalidValue);
      if (k.tensor_cores) {  // (the CUDA-core kernels would run it, reading past qg's end)
        bad = g;
        bad.gate_head_stride = 2 * sh.D + 2;
        CHECK(k.launch(bad, nullptr) == cudaErrorInvalidValue);
      }
    }
  }
}
