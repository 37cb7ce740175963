// cli_checks.h: the checks the commands apply to their options before anything runs, so that every
// option is either honoured or rejected with a message naming it, on every path (GPU or CPU
// reference), and nothing is lost at the end of a run:
//   - kernel arms from --arm, STEPGRAPH_ARMS and the VT_* flags are resolved (a bad name is an
//     error listing the valid ones) and, where only the CPU reference runs, refused by name;
//   - output files are checked to be writable before the run;
//   - prompts (--tokens) and seeds (--seed) are parsed strictly;
//   - long generations report progress on stderr.
// User-facing errors are sg::Error with a plain sentence (no source location).
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"
#include "models/qwen35_config.h"

namespace sg::cli {

// The most tokens `generate --max-new` takes: the context length of the Qwen3.5 models.
inline constexpr int kMaxNewTokens = kQwen35ContextLength;

// resolve_arms(cli_arms, read_env): throws ArmError for an unknown op or arm (listing the valid ones).
// Its warnings also name each set VT_CONV* / VT_GDN* variable that is not one of the seed's flags (a
// misspelt flag would otherwise be ignored without a word), with the flags it reads.
ResolvedArms resolve_cli_arms(const std::vector<std::string>& cli_arms);

// For a run of the CPU reference, where no kernel arm can apply: prints the selection's warnings on
// stderr, then throws sg::Error naming every source that selected an arm (--arm, STEPGRAPH_ARMS, a
// VT_* flag). `command`: "bench", "generate", "serve".
void reject_arms_on_cpu(const ResolvedArms& r, std::string_view command);

// Throws sg::Error naming `option` and `path` when `path` cannot be opened for writing (a missing
// folder, no permission, a directory, a FIFO without a reader); a file this check creates is
// removed again, an existing one is left as it is. "" passes.
void check_writable(const std::string& path, std::string_view option);

// Writes `text` to `path` (the value of `option`) and prints "wrote PATH" on `log`; throws sg::Error
// "OPTION PATH: cannot write the results to this file" when it cannot.
void write_output_file(const std::string& path, std::string_view option, const std::string& text,
                       std::FILE* log = stdout);

// "1,2,3" -> {1, 2, 3}; blanks around ids are allowed. Throws sg::Error for an empty list, an
// empty entry ("1,,2", "1,2,"), or an entry that is not a non-negative decimal integer.
std::vector<int64_t> parse_token_list(const std::string& text);

// Throws sg::Error when a token id is outside [0, vocab): "--tokens: token id 300 is outside the
// vocabulary [0, 256) of model 'tiny'".
void check_token_range(const std::vector<int64_t>& tokens, int64_t vocab, const std::string& model);

// Throws sg::Error when `prompt` tokens plus `max_new` are past the model's positions
// (Qwen35Config::max_positions, 0: not known, no check; `source` says where the limit comes from):
// "generate: the 3-token prompt and --max-new 2 take 5 positions, past the 4 of model 'x'
// (max_position_embeddings in x/config.json): ..." (`command` first: "generate", "drift").
void check_positions(std::string_view command, int64_t prompt, int64_t max_new, int64_t max_positions,
                     const std::string& model, const std::string& source);

// A fault drill (--fault-after LAYER:OP of generate, bench, inspect, soak and ab): the node after
// which the GPU step launches a kernel that faults (ModelStepOptions::fault_layer, fault_op).
struct FaultDrill {
  int layer = -1;
  std::string op;    // empty: no drill
  uint64_t run = 1;  // the node's run that faults (from 1; ModelStepOptions::fault_run)
  std::string text;  // the option's value, for messages
  bool on() const { return !op.empty(); }
};

// "" -> no drill; "LAYER:OP" (LAYER an integer >= -1, OP a node's op name) -> the drill on the
// node's first run; "LAYER:OP@RUN" (RUN an integer >= 1) -> on its run RUN. Throws sg::Error for
// anything else: "--fault-after: 'x' is not LAYER:OP or LAYER:OP@RUN (...)".
FaultDrill parse_fault_after(const std::string& text);

// "a kernel that faults after layer 4 conv.update" (", on the node's run 500" with @RUN).
std::string describe_drill(const FaultDrill& drill);

// After a run that ended without a fault: throws sg::Error when a drill is on and its node ran
// fewer than drill.run times (`runs`; `ran` says where, e.g. "in this run's captured graphs"):
// "--fault-after 1:conv.update@500: the node ran 212 times in ..., so its run 500 never came ...".
void check_fault_fired(const FaultDrill& drill, uint64_t runs, std::string_view ran);

// Throws sg::Error when a drill's layer is not one of the model's (nor -1, the nodes outside the
// layers): "--fault-after 9:conv.update: layer 9 is outside model 'tiny' (layers 0 to 5, or -1 ...)".
void check_fault_layer(const FaultDrill& drill, int layers, const std::string& model);

// Adds --fault-after to `cmd`; `where` says which steps the drill's kernel runs in (help text).
void add_fault_after_option(CLI::App* cmd, std::string& value, const std::string& where);

// Throws sg::Error when a drill is on but `matched` is false (no node of `searched`, e.g. "the
// captured graphs", is the drill's): the error names the node and how to list the nodes.
void check_fault_matched(const FaultDrill& drill, bool matched, std::string_view searched, const std::string& model);

// A CLI11 check for an unsigned 64-bit decimal integer: "-1", "1e3", "0x10" or a value past
// 2^64 - 1 are refused (CLI11 would wrap "-1" to 2^64 - 1).
CLI::Validator unsigned_integer_check();

// Before CLI11 parses, the values given on the command line to the subcommand's options: none may
// be empty (CLI11 stores "" as given, and the commands read an empty path or list as "not given",
// so `--json ""` was ignored), except the selections --a and --b (ab, drift: empty is the
// defaults); each value of an option taking several is checked; and every value of an integer option (CLI11 type INT or
// UINT) must be a plain decimal integer, an optional sign then digits with no leading zero ("-1", "0", "100"; each
// entry of a comma-separated list). CLI11 reads integers with strtoll base 0, so "0100" would be 64 and "0x10" 16, and
// "08" was refused as out of range. A value of a number option (CLI11 type FLOAT) must be decimal digits with an
// optional sign, point and exponent ("1.5", "-0", "1e3"): strtod would also read "0x10", "inf" and "nan", and CLI11
// called a word "not in range". Throws CLI::ValidationError naming the option; where no subcommand is found, CLI11's
// parse reports it.
void check_option_values(CLI::App& app, int argc, const char* const* argv);

// Reports the progress of a long loop on stderr, at most every `every` and only once the loop has
// run that long: "generate: 120 / 100000 tokens, 31.5 tokens/s".
class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit = "tokens",
           std::chrono::milliseconds every = std::chrono::milliseconds(2000));
  void update(int64_t done);
  void finish();  // a last line with the total time, when progress was shown at all

 private:
  std::string label_;
  int64_t total_;
  std::string unit_;
  std::chrono::milliseconds every_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t done_ = 0;
  bool shown_ = false;
};

}  // namespace sg::cli
