// CPU tests of the engine's pure pieces: bf16 rounding, tensor views, dtype parsing, errors.
#include <cmath>
#include <limits>

#include "engine/arena.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("bf16 conversion rounds to nearest even", "[engine][bf16]") {
  CHECK(f32_to_bf16(1.0f).bits == 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (down to 1.0).
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);
  // Just above halfway rounds up.
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits == 0x3f81);
  CHECK(f32_to_bf16(-2.5f).bits == 0xc020);
  CHECK(bf16_to_f32(bf16_t{0x3f80}) == 1.0f);
  CHECK(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // The largest finite float rounds to infinity in bf16 (it is past bf16's largest finite value).
  CHECK(std::isinf(round_bf16(std::numeric_limits<float>::max())));
}

TEST_CASE("tensor views: contiguous strides, rows, describe", "[engine][tensor]") {
  float buf[24];
  auto v = TensorView::contiguous(buf, DType::f32, {2, 3, 4}, Where::host);
  CHECK(v.numel() == 24);
  CHECK(v.bytes() == 96);
  CHECK(v.stride[0] == 12);
  CHECK(v.stride[1] == 4);
  CHECK(v.stride[2] == 1);
  CHECK(v.is_contiguous());
  auto r = v.rows(1, 2);
  CHECK(r.data == buf + 12);
  CHECK(r.shape[0] == 1);
  CHECK(v.describe() == "[2, 3, 4] f32 host");
  CHECK_THROWS_AS(v.rows(1, 3), Error);
}

TEST_CASE("dtype names parse and unknown names list the valid ones", "[engine][tensor]") {
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(dtype_size(DType::bf16) == 2);
  try {
    parse_dtype("fp8");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("valid: f32, bf16") != std::string::npos);
  }
  try {  // a name from a file reaches the message escaped (no terminal control sequence)
    parse_dtype("\x1b[2Jbf16");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("unknown dtype '\\x1b[2Jbf16'") != std::string::npos);
    CHECK(std::string(e.what()).find('\x1b') == std::string::npos);
  }
}

TEST_CASE("require() formats its message with the call site", "[engine][error]") {
  try {
    require(1 + 1 == 3, "math is broken: {}", 42);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string w = e.what();
    CHECK(w.find("math is broken: 42") != std::string::npos);
    CHECK(w.find("test_engine.cpp") != std::string::npos);
  }
}

TEST_CASE("a measuring arena counts aligned bytes and a frozen arena refuses to allocate", "[engine][arena]") {
  Arena a = Arena::measure();
  auto x = a.take("x", DType::bf16, {3, 5});  // 30 bytes
  auto y = a.take("y", DType::f32, {10});     // aligned to 256, 40 bytes
  CHECK(x.data == nullptr);
  CHECK(y.shape[0] == 10);
  CHECK(a.used() == 256 + 40);
  CHECK(a.entries().size() == 2);
  a.freeze();
  CHECK_THROWS_AS(a.take("z", DType::f32, {1}), Error);
}
