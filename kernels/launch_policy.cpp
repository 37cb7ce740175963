// launch_policy.cpp: the calling thread's launch choice (launch_policy.h).
#include "kernels/launch_policy.h"

namespace sg {
namespace {
thread_local bool t_pdl = false;
}  // namespace

bool pdl_enabled() { return t_pdl; }

PdlScope::PdlScope(bool on) : previous_(t_pdl) { t_pdl = on; }

PdlScope::~PdlScope() { t_pdl = previous_; }

}  // namespace sg
