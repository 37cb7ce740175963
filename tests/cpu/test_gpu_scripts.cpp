// The GPU scripts' behaviour where no GPU runs anything (this machine's or CI's): bad options are
// refused with a message and exit 2, --help prints the usage and exits 0, and tools/sanitize_gpu.sh
// without a visible GPU exits 77 before it builds anything. Each script runs as a child process
// (tests/support/child.h) with CUDA_VISIBLE_DEVICES empty.
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"

using namespace sg::test;
namespace fs = std::filesystem;

namespace {

ChildResult script(const std::string& name, const std::vector<std::string>& args, const EnvChanges& env = {}) {
  std::vector<std::string> argv = {"/bin/bash", (fs::path(SG_TEST_SOURCE_DIR) / "tools" / name).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildLimits l;
  l.seconds = 30;
  l.address_space = uint64_t{4} << 30;
  return run_program(argv, env, l, SG_TEST_SOURCE_DIR);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("gpu scripts: bad options are refused with a message and exit 2", "[scripts]") {
  struct Case {
    std::string script;
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {"gpu_tests.sh", {"-j", "0"}, "-j needs a positive whole number, got '0'"},
      {"gpu_tests.sh", {"-j", "x"}, "-j needs a positive whole number, got 'x'"},
      {"gpu_tests.sh", {"-t", ""}, "-t needs a positive number of seconds, got ''"},
      {"gpu_tests.sh", {"--nope"}, "unknown option '--nope'"},
      {"gpu_tests.sh", {"--bin", "/nonexistent/tests_gpu"}, "no tests_gpu to run (/nonexistent/tests_gpu"},
      {"sanitize_gpu.sh", {"-j", "-3"}, "-j needs a positive whole number, got '-3'"},
      {"sanitize_gpu.sh", {"-t", "0"}, "-t needs a positive number of seconds, got '0'"},
      {"sanitize_gpu.sh", {"--leak"}, "unknown option '--leak'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.script, c.args);
    const ChildResult r = script(c.script, c.args);
    CAPTURE(r.out);
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 2);
    CHECK(contains(r.out, c.message));
  }
}

TEST_CASE("gpu scripts: --help prints the usage and exits 0", "[scripts]") {
  for (const std::string name : {"gpu_tests.sh", "sanitize_gpu.sh"}) {
    CAPTURE(name);
    const ChildResult r = script(name, {"--help"});
    CAPTURE(r.out);
    REQUIRE(r.end == ChildResult::End::exited);
    CHECK(r.code == 0);
    CHECK(contains(r.out, "usage: tools/" + name));
  }
}

TEST_CASE("sanitize_gpu.sh: without a visible GPU it exits 77 and builds nothing", "[scripts]") {
  const fs::path build = fs::temp_directory_path() / "sg-test-sanitize-gpu-build";
  fs::remove_all(build);
  const ChildResult r = script("sanitize_gpu.sh", {}, {{"STEPGRAPH_ASAN_GPU_BUILD_DIR", build.string()}});
  CAPTURE(r.out);
  REQUIRE(r.end == ChildResult::End::exited);
  CHECK(r.code == 77);
  CHECK(contains(r.out, "no GPU found"));
  CHECK(!fs::exists(build));
}
