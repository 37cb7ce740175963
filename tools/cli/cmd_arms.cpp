// cmd_arms.cpp: `stepgraph arms`: the ops, their arms, defaults, and what the current command line
// and environment resolve to (with one warning per unrecognised seed flag value).
#include <fmt/format.h>

#include "kernels/arms.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"

namespace sg::cli {

void add_arm_options(CLI::App* app, ArmOptions& o) {
  app->add_option("--arm", o.arms,
                  "Select a kernel arm: op=arm (repeatable; overrides STEPGRAPH_ARMS and the seed's VT_* flags). "
                  "`stepgraph arms` lists them.")
      ->type_name("OP=ARM");
}

void register_arms(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("arms",
                                 "List kernel ops and arms, and show which arms the command line and "
                                 "environment (STEPGRAPH_ARMS, VT_* seed flags) select.");
  static ArmOptions o;
  add_arm_options(cmd, o);
  cmd->callback([&action] {
    action = [] {
      fmt::print("ops and arms (every arm of an op is byte-identical to its reference arm):\n{}\n", format_arm_table());
      ResolvedArms r = resolve_cli_arms(o.arms);
      for (const auto& w : r.warnings) fmt::print(stderr, "warning: {}\n", w);
      fmt::print("resolved selection: {}\n", r.arms.describe());
      for (const auto& info : all_ops()) {
        fmt::print("  {:<12} = {:<11} ({})\n", info.name, info.arms[r.arms.index(info.op)],
                   r.source[static_cast<size_t>(info.op)]);
      }
      return 0;
    };
  });
}

}  // namespace sg::cli
