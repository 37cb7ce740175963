// The GPU scripts' behaviour where no GPU runs anything (this machine's or CI's): bad options are
// refused with a message and exit 2, --help prints the usage and exits 0, and tools/sanitize_gpu.sh
// without a visible GPU exits 77 before it builds anything. tools/gpu_tests.sh's own logic (which
// cases run where, --filter, --tool) runs against a stand-in tests_gpu and compute-sanitizer,
// shell scripts that answer as the real ones do and log what they were asked to run. Each script
// runs as a child process (tests/support/child.h) with CUDA_VISIBLE_DEVICES empty. The probes'
// ablation scripts (tools/probes/delta_prefill_phases.sh, delta_recurrence_ablate.sh,
// delta_t_ablate.sh) still find every text they edit in the kernels as they are (--edits-only: the
// copies made, nothing built).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/child.h"
#include "tests/support/temp_dir.h"

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

bool exited_with(const ChildResult& r, int code) { return r.end == ChildResult::End::exited && r.code == code; }

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_script(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  fs::permissions(p, fs::perms::owner_all, fs::perm_options::add);
}

// A stand-in tests_gpu (Catch2 v2's options): one device-wide case ("soak case") and three
// others; it lists the cases a spec or an --input-file selects and "runs" them by appending
// "<name>" lines to $FAKE_RUNS; FAKE_RC sets its exit code for runs (77: no GPU); FAKE_EMPTY=1
// makes a run match nothing (Catch2 v2: "No tests ran", exit 0); FAKE_KILL=1 makes a run end by
// SIGKILL before it prints anything (as the out-of-memory killer ends it).
constexpr const char* kFakeTests = R"SH(#!/bin/bash
if [ "$1" = --help ]; then echo "  --list-test-names-only  list all/matching test cases names only"; exit 0; fi
list=0; [ "$1" = --list-test-names-only ] && { list=1; shift; }
pick() {
  case "$1" in
    --input-file) sed 's/\\\(.\)/\1/g' "$2" ;;
    "[soak],[faults],[cupti],[sigint]") echo "soak case" ;;
    "~[soak]~[faults]~[cupti]~[sigint]") printf 'alpha case\nbeta case\nmodel one\n' ;;
    "model*") echo "model one" ;;
    "[soak],model*") printf 'soak case\nmodel one\n' ;;
  esac
}
if [ $list = 1 ]; then pick "$@"; exit 0; fi
[ "${FAKE_EMPTY:-0}" = 1 ] && { echo "No tests ran"; exit 0; }
[ "${FAKE_KILL:-0}" = 1 ] && kill -9 $$
pick "$@" >> "$FAKE_RUNS"
[ "${FAKE_RC:-0}" = 0 ] && echo "All tests passed (3 assertions in $(pick "$@" | wc -l) test cases)"
exit "${FAKE_RC:-0}"
)SH";

// A stand-in compute-sanitizer: logs its options to $FAKE_SANITIZER, runs the command after
// --error-exitcode N and prints the summary line the real one prints; FAKE_SAN_ERRORS=1 makes it
// report errors (three hazards in racecheck's words, in two kernels: a library-style one and a
// demangled C++ one) and exit with N, as the real one does on a finding.
constexpr const char* kFakeSanitizer = R"SH(#!/bin/bash
echo "$*" >> "$FAKE_SANITIZER"
while [ $# -gt 0 ] && [ "$1" != --error-exitcode ]; do shift; done
code=$2
shift 2
"$@"; rc=$?
if [ "${FAKE_SAN_ERRORS:-0}" = 1 ]; then
  echo "========= Error: Race reported between Read access at nvjet_sm90_tst_24x64_TNN+0x1a70 in unknown"
  echo "=========     and Write access at nvjet_sm90_tst_24x64_TNN+0x1b00 in unknown [128 hazards]"
  echo "=========     at void sg::(anonymous namespace)::norm_kernel<true, false>(sg::NormArgs)+0x70 in /src/rmsnorm.cu:93"
  echo "=========         Host Frame: [0x2f1a6] in libcuda.so.1"
  echo "========= ERROR SUMMARY: 3 errors"
  exit "$code"
fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
)SH";

struct FakeGpu {
  sg::test::TempDir dir{"sg_gpu_tests"};
  fs::path bin = dir.path / "tests_gpu", runs = dir.path / "runs", sanitizer = dir.path / "sanitizer";
  FakeGpu() {
    write_script(bin, kFakeTests);
    fs::create_directories(dir.path / "cuda");
    write_script(dir.path / "cuda" / "compute-sanitizer", kFakeSanitizer);
  }
  ChildResult run(std::vector<std::string> args, const std::string& rc = "0", const EnvChanges& more = {}) const {
    args.insert(args.end(), {"--bin", bin.string(), "--out", (dir.path / "out").string()});
    const char* path = std::getenv("PATH");
    EnvChanges env = {{"FAKE_RUNS", runs.string()},
                      {"FAKE_SANITIZER", sanitizer.string()},
                      {"FAKE_RC", rc},
                      {"PATH", (dir.path / "cuda").string() + ":" + (path ? path : "/usr/bin:/bin")}};
    for (const auto& [k, v] : more) env[k] = v;
    return script("gpu_tests.sh", args, env);
  }
};

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
      {"gpu_tests.sh", {"--tool", "nope"}, "--tool must be memcheck, racecheck, initcheck or synccheck, got 'nope'"},
      {"gpu_tests.sh", {"--filter", ""}, "--filter needs a test spec"},
      {"sanitize_gpu.sh", {"-j", "-3"}, "-j needs a positive whole number, got '-3'"},
      {"sanitize_gpu.sh", {"-t", "0"}, "-t needs a positive number of seconds, got '0'"},
      {"sanitize_gpu.sh", {"--leak"}, "unknown option '--leak'"},
      {"probes/delta_recurrence_ablate.sh", {"nope"}, "unknown variant 'nope' (known: full no-store"},
      {"probes/delta_recurrence_ablate.sh", {"--rounds", "0"}, "--rounds needs a positive count"},
      {"probes/delta_prefill_phases.sh", {"-j", "x"}, "-j needs a positive count"},
      {"probes/delta_prefill_phases.sh", {"--rounds", "2"}, "unknown option --rounds"},
      {"probes/delta_t_ablate.sh", {"no-pv"}, "unknown variant 'no-pv' (known: full one-vhead no-p"},
      {"probes/delta_t_ablate.sh", {"-j"}, "-j needs a positive count"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.script, c.args);
    const ChildResult r = script(c.script, c.args);
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 2));
    CHECK(contains(r.out, c.message));
  }
}

TEST_CASE("gpu scripts: --help prints the usage and exits 0", "[scripts]") {
  for (const std::string name : {"gpu_tests.sh", "sanitize_gpu.sh", "probes/delta_prefill_phases.sh",
                                 "probes/delta_recurrence_ablate.sh", "probes/delta_t_ablate.sh"}) {
    CAPTURE(name);
    const ChildResult r = script(name, {"--help"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 0));
    CHECK(contains(r.out, "usage: tools/" + name));
  }
}

TEST_CASE("sanitize_gpu.sh: without a visible GPU it exits 77 and builds nothing", "[scripts]") {
  const fs::path build = fs::temp_directory_path() / "sg-test-sanitize-gpu-build";
  fs::remove_all(build);
  const ChildResult r = script("sanitize_gpu.sh", {}, {{"STEPGRAPH_ASAN_GPU_BUILD_DIR", build.string()}});
  CAPTURE(r.out, r.describe());
  REQUIRE(exited_with(r, 77));
  CHECK(contains(r.out, "no GPU found"));
  CHECK(!fs::exists(build));
}

TEST_CASE("gpu_tests.sh: the device-wide cases run alone, the others in N processes", "[scripts]") {
  const FakeGpu f;
  const ChildResult r = f.run({"-j", "2"});
  CAPTURE(r.out, r.describe());
  REQUIRE(exited_with(r, 0));
  const std::string runs = read_all(f.runs);
  CHECK(runs.find("soak case") == 0);  // first, and alone
  for (const char* name : {"alpha case", "beta case", "model one"}) CHECK(contains(runs, name));
  CHECK(contains(r.out, "the other 3 cases in 2 processes at once (lists)"));
  CHECK(contains(r.out, "every process passed"));
  CHECK(!fs::exists(f.sanitizer));
  // Each process's log and its case names, numbered as the summary numbers them (1 .. N).
  const fs::path out = f.dir.path / "out";
  CHECK(contains(r.out, "shard 1 of 2 (1 cases): rc=0"));
  CHECK(contains(r.out, "shard 2 of 2 (2 cases): rc=0"));
  CHECK(read_all(out / "shard1.cases") == "beta case\n");
  CHECK(read_all(out / "shard2.cases") == "alpha case\nmodel one\n");
  CHECK(contains(read_all(out / "shard2.log"), "All tests passed (3 assertions in 2 test cases)"));
  CHECK(!fs::exists(out / "shard0.log"));
}

TEST_CASE("gpu_tests.sh: --filter runs only the cases its spec picks", "[scripts]") {
  SECTION("no device-wide case picked") {
    const FakeGpu f;
    const ChildResult r = f.run({"-j", "3", "--filter", "model*"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 0));
    CHECK(read_all(f.runs) == "model one\n");
    CHECK(contains(r.out, "the other 1 cases in 1 processes at once"));
  }
  SECTION("a device-wide case picked runs alone first") {
    const FakeGpu f;
    const ChildResult r = f.run({"--filter", "[soak],model*"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 0));
    CHECK(read_all(f.runs) == "soak case\nmodel one\n");
  }
  SECTION("a spec that picks nothing is an error") {
    const FakeGpu f;
    const ChildResult r = f.run({"--filter", "nothing*"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 1));
    CHECK(contains(r.out, "lists no test case for --filter 'nothing*'"));
    CHECK(!fs::exists(f.runs));
  }
}

TEST_CASE("gpu_tests.sh: --tool runs every process under compute-sanitizer, without the device-wide cases",
          "[scripts]") {
  SECTION("a passing run reports the tool's summary") {
    const FakeGpu f;
    const ChildResult r = f.run({"-j", "2", "--tool", "racecheck"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 0));
    const std::string runs = read_all(f.runs);
    CHECK(!contains(runs, "soak case"));
    for (const char* name : {"alpha case", "beta case", "model one"}) CHECK(contains(runs, name));
    const std::string calls = read_all(f.sanitizer);
    CHECK(contains(calls, "--tool racecheck --report-api-errors no --error-exitcode 99"));
    CHECK(std::count(calls.begin(), calls.end(), '\n') == 2);  // one call a process
    CHECK(contains(r.out, "1 device-wide case(s) left out under compute-sanitizer"));
    CHECK(contains(r.out, "ERROR SUMMARY: 0 errors"));
    CHECK(contains(r.out, "under racecheck"));
  }
  SECTION("a filter of device-wide cases only is an error") {
    const FakeGpu f;
    const ChildResult r = f.run({"--tool", "memcheck", "--filter", "[soak],[faults],[cupti],[sigint]"});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 1));
    CHECK(contains(r.out, "picks only device-wide cases"));
  }
  SECTION("a sanitizer finding fails the run") {
    const FakeGpu f;
    const ChildResult r = f.run({"-j", "2", "--tool", "memcheck"}, "0", {{"FAKE_SAN_ERRORS", "1"}});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 1));
    CHECK(contains(r.out, "rc=99"));
    CHECK(contains(r.out, "ERROR SUMMARY: 3 errors"));
    // The kernels its reports name, most reported first, so that a summary says where to look.
    CHECK(contains(r.out,
                   "reported in: nvjet_sm90_tst_24x64_TNN (2), void sg::(anonymous namespace)::norm_kernel<true, "
                   "false>(sg::NormArgs) (1)"));
    CHECK(contains(r.out, "gpu_tests.sh: FAILED"));
  }
  SECTION("no GPU: exit 77") {
    const FakeGpu f;
    const ChildResult r = f.run({"--tool", "memcheck"}, "77");
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 77));
    CHECK(contains(r.out, "no GPU, nothing run"));
  }
}

TEST_CASE("gpu_tests.sh: a failing or killed process fails the run", "[scripts]") {
  struct Case {
    std::string rc;
    EnvChanges env;
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {"1", {}, {"shard 1 of 1 (1 cases): rc=1"}},
      // Ended by SIGKILL (as the out-of-memory killer ends it): named as killed, with the hint.
      {"0",
       {{"FAKE_KILL", "1"}},
       {"shard 1 of 1 (1 cases): rc=137; killed (SIGKILL) before it finished", "run fewer processes at once (-j)"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.rc, c.says);
    const FakeGpu f;
    const ChildResult r = f.run({"-j", "2", "--filter", "model*"}, c.rc, c.env);
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 1));
    for (const std::string& part : c.says) CHECK(contains(r.out, part));
    CHECK(contains(r.out, "gpu_tests.sh: FAILED"));
  }
}

TEST_CASE("gpu_tests.sh: a process that ran no test case fails the run", "[scripts]") {
  // The whole suite; a filter of the device-wide cases only; one that picks none of them.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-j", "2"},
                                               {"--filter", "[soak],[faults],[cupti],[sigint]"},
                                               {"-j", "2", "--filter", "model*"}}) {
    CAPTURE(args);
    const FakeGpu f;
    const ChildResult r = f.run(args, "0", {{"FAKE_EMPTY", "1"}});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 1));
    CHECK(contains(r.out, "no test case ran (a failure)"));
    CHECK(contains(r.out, "gpu_tests.sh: FAILED"));
  }
}

TEST_CASE("probe ablation scripts: every edit still finds its text in the kernel", "[scripts]") {
  struct Case {
    std::string script;
    int copies;
  };
  for (const Case& c : {Case{"probes/delta_prefill_phases.sh", 14}, Case{"probes/delta_recurrence_ablate.sh", 8},
                        Case{"probes/delta_t_ablate.sh", 10}}) {
    CAPTURE(c.script);
    sg::test::TempDir tmp("sg_probe_edits");
    const ChildResult r = script(c.script, {"--edits-only"}, {{"TMPDIR", tmp.path.string()}});
    CAPTURE(r.out, r.describe());
    REQUIRE(exited_with(r, 0));
    CHECK(contains(r.out, std::to_string(c.copies) + " edited copies"));
    int cu = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp.path)) cu += e.path().extension() == ".cu";
    CHECK(cu == c.copies);
  }
}
