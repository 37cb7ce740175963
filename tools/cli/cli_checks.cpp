// cli_checks.cpp: option checks shared by the commands (see cli_checks.h).
#include "tools/cli/cli_checks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>

#include "engine/env.h"
#include "engine/error.h"
#include "engine/text.h"

namespace sg::cli {

void write_output_file(const std::string& path, std::string_view option, const std::string& text, std::FILE* log) {
  std::ofstream f(path);
  if (f) f << text;
  f.close();
  if (!f) throw Error(fmt::format("{} {}: cannot write the results to this file", option, printable(path, 4096)));
  fmt::print(log, "wrote {}\n", printable(path, 4096));
}

ResolvedArms resolve_cli_arms(const std::vector<std::string>& cli_arms) {
  ResolvedArms r = resolve_arms(cli_arms, read_env);
  const auto flags = seed_flag_names();
  for (std::string_view prefix : {"VT_CONV", "VT_GDN"}) {
    for (const std::string& name : env_names_with_prefix(prefix)) {
      if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
      r.warnings.push_back(
          fmt::format("{} is set but is not a flag stepgraph reads, so it changes nothing (the "
                      "flags: {})",
                      printable(name, 80), fmt::join(flags, ", ")));
    }
  }
  return r;
}

void reject_arms_on_cpu(const ResolvedArms& r, std::string_view command) {
  for (const auto& w : r.warnings) fmt::print(stderr, "warning: {}\n", w);
  std::vector<std::string> sources;
  for (size_t i = 0; i < kNumOps; ++i) {
    const std::string& s = r.source[i];
    if (s == "default") continue;
    const std::string item = fmt::format("{} ({})", op_name(static_cast<Op>(i)), printable(s));
    sources.push_back(item);
  }
  if (sources.empty()) return;
  std::string list;
  for (const auto& s : sources) list += (list.empty() ? "" : ", ") + s;
  throw Error(
      fmt::format("{}: kernel arms were selected ({}), but this run is the CPU reference model, which runs no "
                  "CUDA kernels, so they cannot apply. Drop --arm and unset STEPGRAPH_ARMS and the VT_* "
                  "flags, or run on a machine with a GPU.",
                  command, list));
}

void check_writable(const std::string& path, std::string_view option) {
  if (path.empty()) return;
  if (path == "-") {  // read by many tools as standard output; here it would be a file named '-'
    throw Error(
        fmt::format("{} -: the results go to a file, not to standard output: give a file name (/dev/stdout "
                    "writes them to the terminal)",
                    option));
  }
  const std::string shown = printable(path, 4096);
  // O_NONBLOCK: a FIFO without a reader fails at once instead of waiting for one.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
  if (fd >= 0) {  // created here: remove it again, the run writes it at the end
    ::close(fd);
    ::unlink(path.c_str());
    return;
  }
  if (errno == EEXIST) fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    throw Error(fmt::format("{} {}: cannot write this file: {} (checked before the run, so that no result is lost)",
                            option, shown, std::strerror(errno)));
  }
  ::close(fd);
}

std::vector<int64_t> parse_token_list(const std::string& text) {
  const std::string shown = printable(text);
  std::vector<int64_t> out;
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    std::string_view item(text.data() + pos, (comma == std::string::npos ? text.size() : comma) - pos);
    const size_t b = item.find_first_not_of(" \t");
    if (b == std::string_view::npos) {
      if (text.find_first_not_of(" \t") == std::string::npos) throw Error("--tokens: no token ids given");
      throw Error(fmt::format("--tokens: empty entry in '{}' (a comma with no token id {})", shown,
                              comma == std::string::npos ? "after it" : "before it"));
    }
    item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < 0) {
      throw Error(fmt::format("--tokens: '{}' is not a token id (a non-negative integer)", printable(item)));
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void check_token_range(const std::vector<int64_t>& tokens, int64_t vocab, const std::string& model) {
  for (int64_t t : tokens) {
    if (t < 0 || t >= vocab) {
      throw Error(fmt::format("--tokens: token id {} is outside the vocabulary [0, {}) of model '{}'", t, vocab,
                              printable(model)));
    }
  }
}

void check_positions(std::string_view command, int64_t prompt, int64_t max_new, int64_t max_positions,
                     const std::string& model, const std::string& source) {
  if (max_positions <= 0 || prompt + max_new <= max_positions) return;
  throw Error(
      fmt::format("{}: the {}-token prompt and --max-new {} take {} positions, past the {} of model "
                  "'{}' ({}): positions past it were never trained",
                  command, prompt, max_new, prompt + max_new, max_positions, printable(model), source));
}

FaultDrill parse_fault_after(const std::string& text) {
  FaultDrill d;
  d.text = text;
  if (text.empty()) return d;
  auto bad = [&] {
    return Error(fmt::format(
        "--fault-after: '{}' is not LAYER:OP or LAYER:OP@RUN (a layer index, -1 for the nodes outside the layers, "
        "then an op name as `stepgraph inspect` shows it, e.g. 1:conv.update; @RUN, from 1, faults on that run of "
        "the node instead of its first, e.g. 1:conv.update@500)",
        printable(text)));
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0) throw bad();
  int layer = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + colon, layer);
  if (ec != std::errc() || p != text.data() + colon || layer < -1) throw bad();
  std::string op = text.substr(colon + 1);
  if (const size_t at = op.find('@'); at != std::string::npos) {
    const std::string run = op.substr(at + 1);
    op.resize(at);
    const auto [q, ec2] = std::from_chars(run.data(), run.data() + run.size(), d.run);
    if (run.empty() || ec2 != std::errc() || q != run.data() + run.size() || d.run < 1) throw bad();
  }
  if (op.empty() || op.find_first_of(" \t:@") != std::string::npos) throw bad();
  d.layer = layer;
  d.op = std::move(op);
  return d;
}

void check_fault_layer(const FaultDrill& drill, int layers, const std::string& model) {
  if (!drill.on() || drill.layer < layers) return;  // parse_fault_after refused layers below -1
  throw Error(fmt::format(
      "--fault-after {}: layer {} is outside model '{}' (layers 0 to {}, or -1 for the nodes outside the layers)",
      printable(drill.text), drill.layer, printable(model), layers - 1));
}

void add_fault_after_option(CLI::App* cmd, std::string& value, const std::string& where) {
  cmd->add_option("--fault-after", value,
                  fmt::format("GPU only, a fault drill: launch a kernel that faults (an illegal address) right after "
                              "the node LAYER:OP (e.g. 1:conv.update; layer -1 for the nodes outside the layers, "
                              "written --fault-after=-1:OP), {}; the run ends with the fault's report. It "
                              "faults on the node's first run, or with LAYER:OP@RUN on its run RUN (counted from 1 "
                              "over every graph that holds it; the runs before pass), e.g. to fault late in a run; "
                              "a RUN the node never reaches is an error that says how many times it ran",
                              where));
}

std::string describe_drill(const FaultDrill& drill) {
  return fmt::format("a kernel that faults after layer {} {}{}", drill.layer, printable(drill.op),
                     drill.run > 1 ? fmt::format(", on the node's run {}", drill.run) : std::string());
}

void check_fault_fired(const FaultDrill& drill, uint64_t runs, std::string_view ran) {
  if (!drill.on() || runs >= drill.run) return;
  throw Error(fmt::format("--fault-after {}: the node ran {} time{} {}, so its run {} never came and nothing faulted{}",
                          printable(drill.text), runs, runs == 1 ? "" : "s", ran, drill.run,
                          runs == 0 ? "" : fmt::format(" (a RUN from 1 to {} faults within the same run)", runs)));
}

void check_fault_matched(const FaultDrill& drill, bool matched, std::string_view searched, const std::string& model) {
  if (!drill.on() || matched) return;
  throw Error(
      fmt::format("--fault-after {}: no node of {} is layer {} op '{}' (`stepgraph inspect --preset {}` lists "
                  "the nodes)",
                  printable(drill.text), searched, drill.layer, printable(drill.op), printable(model)));
}

CLI::Validator unsigned_integer_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
          return fmt::format("'{}' is not an integer in [0, 18446744073709551615]", printable(s));
        }
        return {};
      },
      "UINT64");
}

namespace {

bool is_integer_option(const CLI::Option* opt) {
  const std::string t = opt->get_type_name();  // "INT", "UINT", then ":" and the validators
  for (std::string_view name : {"INT", "UINT"}) {
    if (t.compare(0, name.size(), name) == 0 && (t.size() == name.size() || t[name.size()] == ':')) return true;
  }
  return false;
}

bool is_plain_decimal(std::string_view v) {
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) v.remove_prefix(1);
  if (v.empty() || (v.size() > 1 && v[0] == '0')) return false;
  return std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_float_option(const CLI::Option* opt) {
  const std::string t = opt->get_type_name();  // "FLOAT", then ":" and the validators
  return t.compare(0, 5, "FLOAT") == 0 && (t.size() == 5 || t[5] == ':');
}

// Digits with an optional sign, decimal point and exponent: what strtod reads as a decimal (it would
// also take 0x hex, inf, nan and leading blanks).
bool is_plain_number(std::string_view v) {
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) v.remove_prefix(1);
  size_t i = 0, digits = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  if (i < v.size() && v[i] == '.') {
    ++i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '-' || v[i] == '+')) ++i;
    const size_t e0 = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    if (i == e0) return false;
  }
  return i == v.size();
}

}  // namespace

void check_option_values(CLI::App& app, int argc, const char* const* argv) {
  int first = 1;
  while (first < argc && argv[first][0] == '-') ++first;
  if (first >= argc) return;
  for (int i = first + 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") return;  // the help, whatever else is given
  }
  CLI::App* sub = nullptr;
  try {
    sub = app.get_subcommand(argv[first]);
  } catch (const CLI::OptionNotFound&) {
    return;
  }
  std::map<std::string, const CLI::Option*> options;  // "--context", "-n" -> the option (those taking a value)
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag
    for (const auto& n : opt->get_lnames()) options["--" + n] = opt;
    for (const auto& n : opt->get_snames()) options["-" + n] = opt;
  }
  // An empty value (a path, a list, a name) would otherwise pass as "not given" and be ignored
  // (`--json ""` wrote nothing). The selections of ab and drift are the options where empty means
  // the defaults (--a as when it is left out, --b: the same as A).
  auto check = [](const std::string& name, const CLI::Option* opt, const std::string& value) {
    if (value.empty() && name != "--a" && name != "--b") {
      throw CLI::ValidationError(name, "an empty value (leave the option out, or give it a value)");
    }
    // CLI11 drops the empty entries of a list ("a,,b", "a,"): a slip that would go unseen.
    if (const char d = opt->get_delimiter(); d && !value.empty()) {
      const std::string twice(2, d);
      if (value.front() == d || value.back() == d || value.find(twice) != std::string::npos) {
        throw CLI::ValidationError(name, fmt::format("'{}' has an empty entry in its list", printable(value)));
      }
    }
    if (is_float_option(opt) && !is_plain_number(value)) {
      throw CLI::ValidationError(
          name, fmt::format("'{}' is not a decimal number (digits with an optional sign, point and exponent; no "
                            "0x, inf or nan)",
                            printable(value)));
    }
    if (!is_integer_option(opt)) return;
    const char delim = opt->get_delimiter();
    size_t start = 0;
    for (;;) {
      const size_t end = delim ? value.find(delim, start) : std::string::npos;
      const std::string entry = value.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!is_plain_decimal(entry)) {
        throw CLI::ValidationError(
            name, fmt::format("'{}' is not a plain decimal integer (no leading zero, 0x, fraction or exponent)",
                              printable(entry)));
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
  };
  for (int i = first + 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      const std::string name(arg.substr(0, eq));
      if (const auto it = options.find(name); it != options.end())
        check(name, it->second, std::string(arg.substr(eq + 1)));
      continue;
    }
    const auto it = options.find(std::string(arg));
    if (it == options.end()) continue;
    // The values that follow: one, or for an option taking several (--shape a b), every argument up
    // to the next that starts with '-' (as CLI11 reads them; a lone "" counts as a value).
    const int most = it->second->get_expected_max();
    for (int n = 0; n < most && i + 1 < argc; ++n) {
      const std::string_view v = argv[i + 1];
      if (v == "--" || (n > 0 && !v.empty() && v[0] == '-')) break;
      check(std::string(arg), it->second, std::string(v));
      ++i;
    }
  }
}

Progress::Progress(std::string label, int64_t total, std::string unit, std::chrono::milliseconds every)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      every_(every),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::update(int64_t done) {
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < every_) return;
  last_ = now;
  shown_ = true;
  const double secs = std::chrono::duration<double>(now - start_).count();
  fmt::print(stderr, "{}: {} / {} {}, {:.1f} {}/s\n", label_, done, total_, unit_, secs > 0 ? done / secs : 0.0, unit_);
}

void Progress::finish() {
  if (!shown_) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  fmt::print(stderr, "{}: {} / {} {} in {:.1f} s\n", label_, done_, total_, unit_, secs);
}

}  // namespace sg::cli
