// CPU tests of the launchers' named refusals (kernels/launch_check.h) and of how a failed launch
// reports one (graphs/manifest.h launch_failed).
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "graphs/manifest.h"
#include "kernels/launch_check.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("launch check: the first failed requirement names the field and the rule", "[launch_check]") {
  {
    LaunchCheck c("skinny_gemm");
    c.in_range(32, 1, 32, "M").not_null(&c, "x").require(true, "never shown");
    CHECK(c.ok());
    CHECK(take_launch_refusal().empty());
  }
  {
    LaunchCheck c("skinny_gemm");
    c.in_range(33, 1, 32, "M").not_null(nullptr, "x").require(false, "a later rule");
    CHECK_FALSE(c.ok());
    CHECK(take_launch_refusal() == "skinny_gemm: M = 33, must be 1..32");
    CHECK(take_launch_refusal().empty());  // read once
  }
  {
    LaunchCheck c("embedding");
    c.in_range(0, 1, INT64_MAX, "V");
    CHECK(take_launch_refusal() == "embedding: V = 0, must be >= 1");
  }
  {
    LaunchCheck c("postconv");
    c.in_range(4, 1, 8, "Dk").not_null(nullptr, "conv").require(false, "never reached");
    CHECK(take_launch_refusal() == "postconv: conv is null");
  }
  {
    LaunchCheck c("swiglu");
    c.require(false, "interleave must be 0 or 8");
    LaunchCheck next("rmsnorm");  // a new launch forgets the last refusal
    CHECK(next.ok());
    CHECK(take_launch_refusal().empty());
  }
}

TEST_CASE("a refused launch's error names the node and the launcher's reason", "[launch_check][manifest]") {
  // The message of the Error launch_failed throws ("" if it threw none).
  auto message_of = [](cudaError_t e, const NodeLabel& label) {
    try {
      launch_failed(e, label);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  LaunchCheck("postconv").require(false, "token_tile needs Dk = Dv = 128");
  CHECK(message_of(cudaErrorInvalidValue, NodeLabel{3, "postconv", "token_tile", 0}) ==
        "layer 3 postconv (arm token_tile): the launch failed with cudaErrorInvalidValue: the launcher refused "
        "postconv: token_tile needs Dk = Dv = 128");
  // Without a recorded reason (or for another error) the generic text.
  std::string message = message_of(cudaErrorInvalidValue, NodeLabel{-1, "argmax", "-", 0});
  CHECK(message.find("argmax (arm -): the launch failed with cudaErrorInvalidValue (") == 0);
  CHECK(message.find("the op's launcher refused its shape") != std::string::npos);
  // A kernel's fault met by the launch (a sticky error from an earlier kernel) is not a refusal.
  message = message_of(cudaErrorIllegalAddress, NodeLabel{-1, "lm_head", "skinny bn=64 splits=1", 0});
  CHECK(message.find("lm_head (arm skinny bn=64 splits=1): the launch met cudaErrorIllegalAddress (") == 0);
  CHECK(message.find("a kernel faulted at or before this launch") != std::string::npos);
  CHECK(message.find("refused") == std::string::npos);
  CHECK(kernel_fault_error(cudaErrorLaunchFailure));
  CHECK(kernel_fault_error(cudaErrorAssert));
  CHECK_FALSE(kernel_fault_error(cudaErrorInvalidValue));
  CHECK_FALSE(kernel_fault_error(cudaErrorMemoryAllocation));
}
