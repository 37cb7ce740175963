// CPU tests of the launch choice (kernels/launch_policy.h); the pdl setting is tested in tests/gpu/test_pdl.cpp.
#include <thread>

#include "kernels/launch_policy.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("PdlScope sets this thread's launch choice and restores the one before", "[launch][pdl]") {
  CHECK_FALSE(pdl_enabled());  // off unless a scope turns it on
  {
    const PdlScope on(true);
    CHECK(pdl_enabled());
    {
      const PdlScope off(false);
      CHECK_FALSE(pdl_enabled());
    }
    CHECK(pdl_enabled());
    bool other = true;
    std::thread([&] { other = pdl_enabled(); }).join();
    CHECK_FALSE(other);  // another thread keeps its own choice
  }
  CHECK_FALSE(pdl_enabled());
}
