// child.h: runs code that may crash, hang or allocate without bound in a forked child process, so
// that such a failure fails one test instead of killing the test program. The child gets a time
// limit (alarm(), with a SIGKILL from the parent as a backstop) and an address-space limit
// (RLIMIT_AS; not under AddressSanitizer, whose shadow memory needs the address space); its
// stdout and stderr are captured. Used by the bad-input suite (tests/cpu/test_bad_input*.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sg::test {

struct ChildLimits {
  unsigned seconds = 20;                       // wall-clock limit
  uint64_t address_space = uint64_t{1} << 30;  // run_in_child: on top of what the test program maps;
                                               // run_program: the program's whole limit
  double sigint_after = 0;  // > 0: the parent sends SIGINT after this many seconds, and not before the
                            // child catches SIGINT (its SigCgt in /proc/PID/status: the program's
                            // handler is installed), so a slow start on a loaded machine cannot turn
                            // the interrupt into a kill
};

// How the child ended. For run_in_child, the exit code says what the body threw (ChildOutcome).
struct ChildResult {
  enum class End { exited, signalled, timed_out };
  End end = End::exited;
  int code = 0;     // the exit status, or the signal
  std::string out;  // stdout and stderr, interleaved
  double seconds = 0;
  std::string describe() const;  // "exit 1", "killed by signal 11 (Segmentation fault)", "timed out after 20 s"
};

// What run_in_child's body did: returned, or threw one of these (checked most derived first).
enum class ChildOutcome : int {
  returned = 0,
  sg_error = 10,          // sg::Error
  arm_error = 11,         // sg::ArmError
  invalid_argument = 12,  // std::invalid_argument
  bad_alloc = 13,         // std::bad_alloc
  other_exception = 14,   // any other std::exception
  unknown = 15,           // anything else
};
const char* outcome_name(ChildOutcome o);

// Runs `body` in a child; the message of what it throws is written to the captured output as
// "<class>: <what()>" and the child exits with the ChildOutcome code.
ChildResult run_in_child(const std::function<void()>& body, const ChildLimits& limits = {});

// Environment changes for run_program: a value sets the variable, nullopt unsets it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// Runs `argv[0]` with `argv` in a child, in `cwd` when given, with CUDA_VISIBLE_DEVICES="" (so the
// program takes its no-GPU path on every machine), STEPGRAPH_ARMS and every VT_* variable unset,
// and then `env` applied.
ChildResult run_program(const std::vector<std::string>& argv, const EnvChanges& env = {},
                        const ChildLimits& limits = {}, const std::filesystem::path& cwd = {});

// run_program for the GPU tests' runs of stepgraph: the GPU visible (CUDA_VISIBLE_DEVICES as the
// test itself sees it), no address-space limit (the CUDA driver maps large ranges), `seconds` of
// wall clock, and SIGINT after `sigint_after` seconds when that is > 0.
ChildResult run_program_on_gpu(const std::vector<std::string>& argv, unsigned seconds = 300, double sigint_after = 0);

// Bytes that must never reach a terminal from a message: control characters other than newline,
// tab and carriage return, DEL, and every byte >= 0x80. Returns the first offset, or npos.
size_t find_unprintable(const std::string& s);

}  // namespace sg::test
