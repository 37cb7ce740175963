// GPU test of the counter-based fill: device values equal the host formula, bit for bit.
#include "engine/error.h"
#include "kernels/fill.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"

using namespace sg;

TEST_CASE("fill_uniform on the GPU equals uniform_at on the host", "[gpu][fill]") {
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t n = 100003;
    test::DevBuf b(static_cast<size_t>(n) * dtype_size(t));
    check(fill_uniform(b.data(), t, n, 42, -2.f, 3.f, nullptr));
    auto got = b.download_f32(t);
    size_t bad = 0;
    float lo = 1e9f, hi = -1e9f;
    for (int64_t i = 0; i < n; ++i) {
      float want = uniform_at(42, i, -2.f, 3.f);
      if (t == DType::bf16) want = round_bf16(want);
      bad += got[static_cast<size_t>(i)] != want;
      lo = std::min(lo, got[static_cast<size_t>(i)]);
      hi = std::max(hi, got[static_cast<size_t>(i)]);
    }
    CHECK(bad == 0);
    CHECK(lo >= -2.f);
    CHECK(hi <= 3.f);
    CHECK(hi - lo > 4.9f);  // the range is actually covered
  }
}
