// GPU tests of sequence isolation in the prefill attention kernels (attention.h; shared pieces:
// attention_fixture.h), at the model's head sizes and D 64 and 128: three sequences with history packed so that a
// query tile of each kernel (8 or 16 rows in the CUDA-core kernel, 64 in the tensor-core ones,
// whose warps hold 16) spans two or three of them, then the middle sequence's cache slot filled
// with NaN (every byte 0xFF): the other sequences' output rows keep the bytes of the run without
// the poison, padding rows stay zero, and the poisoned sequence's rows are not finite (so the test
// cannot pass vacuously). A second case puts NaN in every slot past its sequence's last position
// (stale rows that a kernel reading whole key tiles reaches): no output byte may change. The
// model-level form of these tests is in test_isolation.cpp (D = 32).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attention_shapes.h"
#include "models/step_settings.h"
#include "tests/gpu/attention_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::attn;

namespace {

using Launch = std::function<cudaError_t(const AttentionParams&)>;

// One kernel on one shape: `seqs` packed with 3 padding rows, a bf16 cache of 8 slots x max_ctx
// positions holding their history, attn_prep's q and gate.
struct Case {
  const Shape& sh;
  const Launch& launch;
  Batch b;
  DevMeta dm;
  Cache c;
  PrepOut po;
  Case(const Shape& shape, const Launch& l, const std::vector<Seq>& seqs, int max_ctx, uint64_t seed)
      : sh(shape),
        launch(l),
        b(make_batch(seqs, 3)),
        dm(b),
        c(shape, 8, max_ctx, 0x00),
        po((fill_history(shape, c, seqs, seed), run_prep(shape, b, dm, make_inputs(shape, b.T, seed + 100), c))) {}
  size_t row() const { return static_cast<size_t>(sh.Hq) * sh.D; }  // outputs a token
  // The kernel's bf16 output bytes [T, Hq, D] (written over 0x5A).
  std::vector<uint8_t> run() {
    test::DevBuf out(static_cast<size_t>(b.T) * row() * 2, 0x5A);
    check(launch(attn_params(sh, b, dm, po, c, out, DType::bf16)));
    check(cudaDeviceSynchronize());
    return out.download();
  }
  // Every K and V byte of `slot` from position `pos` on set to 0xFF (NaN); returns how many.
  size_t poison(int slot, int pos) {
    auto kb = c.k.download(), vb = c.v.download();
    const size_t from = c.index(sh, slot, pos, 0, 0) * 2, to = c.index(sh, slot + 1, 0, 0, 0) * 2;
    for (size_t i = from; i < to; ++i) kb[i] = vb[i] = 0xFF;
    c.k = test::DevBuf::from_bytes(kb);
    c.v = test::DevBuf::from_bytes(vb);
    return to - from;
  }
};

// Each prefill kernel on each shape it runs on this device (the model's shapes and D 64 and 128,
// the wgmma kernel's other instruction shapes): body(Case&).
template <typename Body>
void for_each_case(const std::vector<Seq>& seqs, int max_ctx, uint64_t seed, Body&& body) {
  const std::vector<std::pair<const char*, Launch>> kernels = {
      {"simt", [](const AttentionParams& p) { return attention_prefill(p, nullptr); }},
      {"mma", [](const AttentionParams& p) { return attention_prefill_mma(p, nullptr); }},
      {"wgmma", [](const AttentionParams& p) { return attention_prefill_wgmma(p, nullptr); }}};
  const DeviceLimits dev = DeviceLimits::current();
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({8, 2, 64, 16, 1e4});
  shapes.push_back({8, 2, 128, 32, 1e4});
  for (const Shape& sh : shapes) {
    for (const auto& [name, launch] : kernels) {
      CAPTURE(sh.Hq, sh.Hkv, sh.D, name);
      if (std::string(name) == "wgmma" && !(attention_prefill_wgmma_supports(sh.D, DType::bf16, DType::bf16) &&
                                            attention_prefill_wgmma_device(dev.cc_major, dev.cc_minor))) {
        continue;
      }
      Case k(sh, launch, seqs, max_ctx, seed + sh.D);
      body(k);
    }
  }
}

}  // namespace

TEST_CASE("attention prefill: NaN in one slot's cache reaches no row of another sequence", "[gpu][attention][wgmma]") {
  // Rows 0-6 slot 2, 7-15 slot 5 (poisoned), 16-21 slot 0, then 3 padding rows.
  const std::vector<Seq> seqs = {{5, 7, 2}, {3, 9, 5}, {10, 6, 0}};
  const int poisoned = 5;
  for_each_case(seqs, 32, 4100, [&](Case& k) {
    const Batch& b = k.b;
    const size_t row = k.row(), row_bytes = row * 2;  // bf16 out
    const std::vector<uint8_t> clean = k.run();
    k.poison(poisoned, 0);  // the whole slot: history and the prefill's own keys
    const std::vector<uint8_t> dirty = k.run();
    bool poisoned_nonfinite = false;
    const std::vector<float> dv = test::from_bytes(dirty, DType::bf16);
    for (int t = 0; t < b.T; ++t) {
      CAPTURE(t);
      const size_t at = static_cast<size_t>(t) * row_bytes;
      if (b.live(t) && b.slot(t) == poisoned) {
        for (size_t i = 0; i < row; ++i) poisoned_nonfinite |= !std::isfinite(dv[t * row + i]);
        continue;
      }
      CHECK(std::memcmp(dirty.data() + at, clean.data() + at, row_bytes) == 0);
      if (!b.live(t)) {  // padding rows: zeros
        bool zero = true;
        for (size_t i = 0; i < row; ++i) zero = zero && dv[t * row + i] == 0.0f;
        CHECK(zero);
      }
    }
    CHECK(poisoned_nonfinite);
  });
}

TEST_CASE("attention prefill: NaN in a slot past its sequence's last position changes no output byte",
          "[gpu][attention][wgmma]") {
  // The tensor-core kernels read whole 64-key tiles (the wgmma kernel by TMA, up to max_context),
  // so a pass's last tile reaches cache rows past the sequence's last position: stale there, NaN
  // after a poisoned earlier occupant of the slot. Masked scores and zeroed V rows keep them out.
  const std::vector<Seq> seqs = {{5, 7, 2}, {3, 9, 5}, {10, 6, 0}};
  for_each_case(seqs, 48, 4300, [&](Case& k) {
    const std::vector<uint8_t> clean = k.run();
    size_t poisoned = 0;  // every slot from its sequence's last position + 1 to max_ctx
    for (const Seq& s : seqs) poisoned += k.poison(s.slot, s.hist + s.n);
    REQUIRE(poisoned > 0);
    const std::vector<uint8_t> dirty = k.run();
    CHECK(dirty == clean);
  });
}
