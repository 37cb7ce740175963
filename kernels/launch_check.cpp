// launch_check.cpp: launchers' named refusals (launch_check.h).
#include "kernels/launch_check.h"

#include <cstdint>
#include <limits>
#include <utility>

namespace sg {
namespace {
thread_local std::string t_refusal;
}  // namespace

LaunchCheck::LaunchCheck(std::string_view op) : op_(op) { t_refusal.clear(); }

void LaunchCheck::refuse(std::string reason) {
  ok_ = false;
  t_refusal = std::string(op_) + ": " + std::move(reason);
}

LaunchCheck& LaunchCheck::require(bool ok, std::string_view rule) {
  if (ok_ && !ok) refuse(std::string(rule));
  return *this;
}

LaunchCheck& LaunchCheck::not_null(const void* p, std::string_view field) {
  if (ok_ && p == nullptr) refuse(std::string(field) + " is null");
  return *this;
}

LaunchCheck& LaunchCheck::in_range(int64_t v, int64_t lo, int64_t hi, std::string_view field) {
  if (ok_ && (v < lo || v > hi)) {
    const std::string bound = hi == std::numeric_limits<int64_t>::max()
                                  ? ">= " + std::to_string(lo)
                                  : std::to_string(lo) + ".." + std::to_string(hi);
    refuse(std::string(field) + " = " + std::to_string(v) + ", must be " + bound);
  }
  return *this;
}

void refuse_launch(std::string_view op, std::string_view rule) { LaunchCheck(op).require(false, rule); }

std::string take_launch_refusal() { return std::exchange(t_refusal, std::string()); }

}  // namespace sg
