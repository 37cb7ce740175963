// expect_error.h: expect_error(f, needles), the CPU tests' check that f throws sg::Error whose
// message holds every needle (the message and the missing needle are printed on a failure).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tests/support/catch.h"

namespace sg::test {

// Runs f, which must throw sg::Error whose message contains every needle.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    FAIL("expected an sg::Error");
  } catch (const Error& e) {
    const std::string w = e.what();
    INFO("message: " << w);
    for (const auto& n : needles) {
      INFO("expected to find: " << n);
      CHECK(w.find(n) != std::string::npos);
    }
  }
}

}  // namespace sg::test
