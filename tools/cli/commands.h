// commands.h: the subcommands of `stepgraph`. Each registers its options on a CLI11 app and
// returns the action to run once parsing succeeded.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace sg::cli {

using Action = std::function<int()>;

// Options every command that runs kernels shares.
struct ArmOptions {
  std::vector<std::string> arms;  // --arm op=arm (repeatable)
};
void add_arm_options(CLI::App* app, ArmOptions& o);

void register_ab(CLI::App& app, Action& action);
void register_arms(CLI::App& app, Action& action);
void register_bench(CLI::App& app, Action& action);
void register_capture(CLI::App& app, Action& action);
void register_diff(CLI::App& app, Action& action);
void register_drift(CLI::App& app, Action& action);
void register_generate(CLI::App& app, Action& action);
void register_info(CLI::App& app, Action& action);
void register_inspect(CLI::App& app, Action& action);
void register_kernels(CLI::App& app, Action& action);
void register_plan(CLI::App& app, Action& action);
void register_serve(CLI::App& app, Action& action);
void register_soak(CLI::App& app, Action& action);

}  // namespace sg::cli
