// child.cpp: run_in_child and run_program (see child.h).
#include "tests/support/child.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/error.h"
#include "kernels/arms.h"

#if defined(__SANITIZE_ADDRESS__)
#define SG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SG_TEST_ASAN 1
#endif
#endif

extern char** environ;

namespace sg::test {
namespace {

uint64_t virtual_size() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages = 0;
  const int n = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  return n == 1 ? pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// True when process `pid` has a handler for SIGINT (bit SIGINT - 1 of the SigCgt mask in
// /proc/PID/status); true as well where that cannot be read (no /proc), so the caller falls back
// to its time alone.
bool catches_sigint(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return true;
  char line[256];
  bool caught = true;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "SigCgt:", 7) == 0) {
      const unsigned long long mask = std::strtoull(line + 7, nullptr, 16);
      caught = (mask >> (SIGINT - 1)) & 1u;
      break;
    }
  }
  std::fclose(f);
  return caught;
}

void limit_address_space(uint64_t bytes) {
#ifndef SG_TEST_ASAN
  struct rlimit rl {};
  rl.rlim_cur = rl.rlim_max = bytes;
  ::setrlimit(RLIMIT_AS, &rl);
#else
  (void)bytes;
#endif
}

// Forks; the child redirects stdout and stderr to a temporary file, arms the alarm and runs
// `child` (which never returns); the parent waits at most limits.seconds + 5 s.
ChildResult fork_and_wait(const std::function<void()>& child, const ChildLimits& limits) {
  std::fflush(stdout);
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  if (!capture) throw std::runtime_error("run_in_child: tmpfile failed");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fclose(capture);
    throw std::runtime_error("run_in_child: fork failed");
  }
  if (pid == 0) {
    // The test framework's handlers for fatal signals must not run in the child: a crash there
    // is the result, seen by the parent.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM, SIGTERM, SIGINT}) ::signal(sig, SIG_DFL);
    ::dup2(::fileno(capture), 1);
    ::dup2(::fileno(capture), 2);
    ::alarm(limits.seconds);
    child();
    ::_exit(127);  // not reached
  }
  ChildResult r;
  int status = 0;
  bool killed = false, interrupted = false;
  const auto deadline = t0 + std::chrono::seconds(limits.seconds + 5);
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (limits.sigint_after > 0 && !interrupted &&
        std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(limits.sigint_after) &&
        catches_sigint(pid)) {
      ::kill(pid, SIGINT);
      interrupted = true;
    }
    if (std::chrono::steady_clock::now() > deadline && !killed) {
      ::kill(pid, SIGKILL);  // the child blocked SIGALRM
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) {
    r.end = ChildResult::End::exited;
    r.code = WEXITSTATUS(status);
  } else {
    r.code = WIFSIGNALED(status) ? WTERMSIG(status) : -1;
    r.end = killed || r.code == SIGALRM ? ChildResult::End::timed_out : ChildResult::End::signalled;
  }
  std::fflush(capture);
  std::rewind(capture);
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, capture)) > 0) r.out.append(buf, n);
  std::fclose(capture);
  return r;
}

}  // namespace

std::string ChildResult::describe() const {
  switch (end) {
    case End::exited: return "exit " + std::to_string(code);
    case End::signalled: return "killed by signal " + std::to_string(code) + " (" + ::strsignal(code) + ")";
    case End::timed_out: return "timed out after " + std::to_string(seconds) + " s";
  }
  return "?";
}

const char* outcome_name(ChildOutcome o) {
  switch (o) {
    case ChildOutcome::returned: return "returned";
    case ChildOutcome::sg_error: return "sg::Error";
    case ChildOutcome::arm_error: return "sg::ArmError";
    case ChildOutcome::invalid_argument: return "std::invalid_argument";
    case ChildOutcome::bad_alloc: return "std::bad_alloc";
    case ChildOutcome::other_exception: return "std::exception";
    case ChildOutcome::unknown: return "unknown";
  }
  return "?";
}

ChildResult run_in_child(const std::function<void()>& body, const ChildLimits& limits) {
  const uint64_t base = virtual_size();
  return fork_and_wait(
      [&] {
        limit_address_space(base + limits.address_space);
        ChildOutcome o = ChildOutcome::returned;
        try {
          body();
        } catch (const Error& e) {
          o = ChildOutcome::sg_error;
          std::fprintf(stderr, "%s: %s\n", outcome_name(o), e.what());
        } catch (const ArmError& e) {
          o = ChildOutcome::arm_error;
          std::fprintf(stderr, "%s: %s\n", outcome_name(o), e.what());
        } catch (const std::invalid_argument& e) {
          o = ChildOutcome::invalid_argument;
          std::fprintf(stderr, "%s: %s\n", outcome_name(o), e.what());
        } catch (const std::bad_alloc& e) {
          o = ChildOutcome::bad_alloc;
          std::fprintf(stderr, "%s: %s\n", outcome_name(o), e.what());
        } catch (const std::exception& e) {
          o = ChildOutcome::other_exception;
          std::fprintf(stderr, "%s: %s\n", outcome_name(o), e.what());
        } catch (...) {
          o = ChildOutcome::unknown;
          std::fprintf(stderr, "unknown exception\n");
        }
        std::fflush(stdout);
        std::fflush(stderr);
        ::_exit(static_cast<int>(o));
      },
      limits);
}

ChildResult run_program(const std::vector<std::string>& argv, const EnvChanges& env, const ChildLimits& limits,
                        const std::filesystem::path& cwd) {
  return fork_and_wait(
      [&] {
        limit_address_space(limits.address_space);
        if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
        std::vector<std::string> drop;
        for (char** e = environ; *e; ++e) {
          const std::string kv = *e;
          const std::string name = kv.substr(0, kv.find('='));
          if (name == "STEPGRAPH_ARMS" || name.rfind("VT_", 0) == 0) drop.push_back(name);
        }
        for (const auto& name : drop) ::unsetenv(name.c_str());
        ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
        for (const auto& [name, value] : env) {
          if (value) {
            ::setenv(name.c_str(), value->c_str(), 1);
          } else {
            ::unsetenv(name.c_str());
          }
        }
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        std::fprintf(stderr, "execv %s: %s\n", args[0], std::strerror(errno));
        ::_exit(127);
      },
      limits);
}

ChildResult run_program_on_gpu(const std::vector<std::string>& argv, unsigned seconds, double sigint_after) {
  ChildLimits l;
  l.seconds = seconds;
  l.address_space = ~uint64_t{0};
  l.sigint_after = sigint_after;
  return run_program(argv, {{"CUDA_VISIBLE_DEVICES", std::nullopt}}, l);
}

size_t find_unprintable(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c >= 0x7f) return i;
  }
  return std::string::npos;
}

}  // namespace sg::test
