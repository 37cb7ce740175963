// main.cpp: the `stepgraph` command line.
#include <cstdio>
#include <exception>
#include <new>

#include "engine/error.h"
#include "engine/text.h"
#include "tools/cli/cli_checks.h"
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "stepgraph: runs the steps of a Qwen3.5-style hybrid model (Gated DeltaNet + gated attention),\n"
      "captures each step shape into a CUDA graph, replays it, and shows where the time inside every\n"
      "graph goes, node by node and kernel arm by kernel arm."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stepgraph 0.1.0");
  sg::cli::Action action;
  sg::cli::register_bench(app, action);
  sg::cli::register_kernels(app, action);
  sg::cli::register_arms(app, action);
  sg::cli::register_info(app, action);
  sg::cli::register_generate(app, action);
  sg::cli::register_inspect(app, action);
  sg::cli::register_capture(app, action);
  sg::cli::register_ab(app, action);
  sg::cli::register_serve(app, action);
  sg::cli::register_soak(app, action);
  sg::cli::register_diff(app, action);
  sg::cli::register_drift(app, action);
  sg::cli::register_plan(app, action);
  // An unknown command is named (CLI11 would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](CLI::App* c) { return c->check_name(argv[1]); }).empty()) {
    std::string names;
    for (const CLI::App* c : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + c->get_name();
    std::fprintf(stderr, "stepgraph: unknown command '%s' (the commands: %s; see stepgraph --help)\n",
                 sg::printable(argv[1], 60).c_str(), names.c_str());
    return static_cast<int>(CLI::ExitCodes::ExtrasError);
  }
  try {
    sg::cli::check_option_values(app, argc, argv);  // no empty values; "0100" is not octal
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return action();
  } catch (const std::bad_alloc&) {
    // Large host allocations are checked against the available memory first (engine/host_memory.h);
    // this is what is left when one was not.
    std::fprintf(stderr, "stepgraph: error: out of host memory (an allocation failed)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepgraph: error: %s\n", e.what());
    return 1;
  }
}
