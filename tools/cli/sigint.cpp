// sigint.cpp: see sigint.h.
#include "tools/cli/sigint.h"

namespace sg {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) { g_interrupted = 1; }

}  // namespace

SigintGuard::SigintGuard() {
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  installed_ = ::sigaction(SIGINT, &sa, &old_) == 0;
}

SigintGuard::~SigintGuard() {
  if (installed_) ::sigaction(SIGINT, &old_, nullptr);
}

bool sigint_received() { return g_interrupted != 0; }

}  // namespace sg
