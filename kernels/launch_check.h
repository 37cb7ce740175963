// launch_check.h: a launcher's checks of its params, each naming the field and the rule, so that a
// refused launch says why (the model's error names the node and this reason; the C interface's
// sg_last_error too). A launcher builds one LaunchCheck, runs its requirements in order and
// returns cudaErrorInvalidValue when !ok(); the first failed requirement is kept as the calling
// thread's launch refusal until take_launch_refusal() reads it or the next LaunchCheck starts.
// Pure C++ (no CUDA).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace sg {

class LaunchCheck {
 public:
  explicit LaunchCheck(std::string_view op);  // clears this thread's previous refusal

  // Refused unless ok: "<op>: <rule>" (a rule names the field, e.g. "splits > 1 needs a workspace").
  LaunchCheck& require(bool ok, std::string_view rule);
  // Refused when p is null: "<op>: <field> is null".
  LaunchCheck& not_null(const void* p, std::string_view field);
  // Refused unless lo <= v <= hi: "<op>: <field> = v, must be lo..hi" (">= lo" when hi is INT64_MAX).
  LaunchCheck& in_range(int64_t v, int64_t lo, int64_t hi, std::string_view field);

  bool ok() const { return ok_; }

 private:
  void refuse(std::string reason);
  std::string_view op_;
  bool ok_ = true;
};

// A refusal outside a LaunchCheck's sequence (a launcher's inner dispatch that finds no kernel for
// its params): "<op>: <rule>" becomes the thread's refusal, as LaunchCheck(op).require(false, rule).
void refuse_launch(std::string_view op, std::string_view rule);

// The calling thread's last refusal ("" when none), cleared by the call.
std::string take_launch_refusal();

}  // namespace sg
