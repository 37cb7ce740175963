// sigint.h: Ctrl-C for the long-running commands. While a SigintGuard lives, SIGINT only sets a
// flag (sigint_received()) that the command polls between units of work (a replay, a token), so
// it can stop, print what it measured so far and exit with 130. SA_RESETHAND: a second Ctrl-C
// ends the process as usual. The previous handler comes back when the guard ends.
#pragma once
#include <csignal>

namespace sg {

class SigintGuard {
 public:
  SigintGuard();  // clears the flag
  ~SigintGuard();
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction old_ {};
  bool installed_ = false;
};

// True once SIGINT arrived under a guard (until the next guard is made).
bool sigint_received();

// The exit code of a command that a Ctrl-C stopped (128 + SIGINT, as a shell reports it).
inline constexpr int kInterruptedExit = 130;

}  // namespace sg
