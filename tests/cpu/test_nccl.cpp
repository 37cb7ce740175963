// engine/nccl.h on the CPU: the version this build links, and the errors of communicators that
// cannot be made before NCCL is asked (no device given; a build without NCCL). NCCL itself is left
// uncalled here (its refusal on a machine without a GPU allocates what the sanitizer build's leak
// check would report); communicators and collectives: tests/gpu/test_tp_step.cpp.
#include <regex>
#include <string>

#include "engine/error.h"
#include "engine/nccl.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

// The sg::Error's message of making communicators for `devices` ("" when none is thrown).
std::string comms_error(const std::vector<int>& devices) {
  try {
    NcclComms comms(devices);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("nccl: the linked version, and communicators that cannot be made are clear errors", "[nccl]") {
  if (!nccl_available()) {
    CHECK(nccl_version().empty());
    CHECK(comms_error({0}).find("this build has no NCCL") != std::string::npos);
    return;
  }
  const std::string v = nccl_version();
  CAPTURE(v);
  CHECK(std::regex_match(v, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));
  CHECK(comms_error({}).find("NCCL communicators: no device given") != std::string::npos);
}
