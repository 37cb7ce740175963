// CPU tests of graph keys and padding.
#include <stdexcept>

#include "graphs/capture_sizes.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("decode capture sizes follow 1, 2, 4, multiples of 8, and include the maximum", "[graphs][capture]") {
  CHECK(decode_capture_sizes(32) == std::vector<int>{1, 2, 4, 8, 16, 24, 32});
  CHECK(decode_capture_sizes(1) == std::vector<int>{1});
  CHECK(decode_capture_sizes(3) == std::vector<int>{1, 2, 3});
  CHECK(decode_capture_sizes(20) == std::vector<int>{1, 2, 4, 8, 16, 20});
  CHECK(decode_capture_sizes(48) == std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40, 48});
  CHECK_THROWS_AS(decode_capture_sizes(0), std::invalid_argument);
}

TEST_CASE("a batch pads up to the next key and larger batches have none", "[graphs][capture]") {
  auto keys = decode_capture_sizes(32);
  CHECK(pad_to_key(keys, 1) == 1);
  CHECK(pad_to_key(keys, 3) == 4);
  CHECK(pad_to_key(keys, 5) == 8);
  CHECK(pad_to_key(keys, 17) == 24);
  CHECK(pad_to_key(keys, 32) == 32);
  CHECK_FALSE(pad_to_key(keys, 33).has_value());
  CHECK_THROWS_AS(pad_to_key(keys, 0), std::invalid_argument);
}

TEST_CASE("padding rows get slot -1", "[graphs][capture]") {
  CHECK(pad_slots({5, 2, 7}, 4) == std::vector<int32_t>{5, 2, 7, -1});
  CHECK(pad_slots({1}, 1) == std::vector<int32_t>{1});
  CHECK_THROWS_AS(pad_slots({1, 2}, 1), std::invalid_argument);
}

TEST_CASE("live slots must be in range and unique", "[graphs][capture]") {
  CHECK_NOTHROW(validate_slots({0, 3, 1}, 4));
  CHECK_THROWS_AS(validate_slots({0, 4}, 4), std::invalid_argument);
  CHECK_THROWS_AS(validate_slots({-1}, 4), std::invalid_argument);
  try {
    validate_slots({2, 0, 2}, 4);
    FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "row 2: slot 2 already used by row 0");
  }
}
