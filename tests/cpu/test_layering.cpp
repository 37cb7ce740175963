// The include layering of the source tree: tools -> models -> graphs -> engine, each folder
// including only itself and the folders after it; kernels/ stands alone (it includes nothing but
// kernels/), and graphs/, models/ and tools/ may use it. Scans every #include line of the C++ and
// CUDA files under engine/, graphs/, kernels/, models/ and tools/.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/catch.h"

namespace fs = std::filesystem;

namespace {

// Lower layers first: a folder may include folders of its own rank or lower.
const std::map<std::string, int> kRank = {{"engine", 0}, {"graphs", 1}, {"models", 2}, {"tools", 3}};

// Edges the rules above forbid but the design keeps on purpose, each with its reason.
struct KnownEdge {
  std::string from_folder, include;
};
const std::vector<KnownEdge> kKnown = {
    // The DType enum and host bf16 rounding: one dtype definition shared by kernel params, the CPU
    // reference ops and engine tensors. Header only; it carries no code.
    {"engine", "kernels/numeric.h"},
};

// Why `include` (as written in a file under `from`) breaks the layering; empty when it does not.
// Includes outside the repository's folders (system and third-party headers) are not judged.
std::string violation(const std::string& from, const std::string& include) {
  const std::string to = include.substr(0, include.find('/'));
  if (to == include) return {};  // no folder: not a repository path
  for (const KnownEdge& k : kKnown) {
    if (k.from_folder == from && k.include == include) return {};
  }
  if (to == "tests") return "the sources never include tests/";
  if (from == "kernels") return (to == "kernels" || !kRank.count(to)) ? "" : "kernels/ includes only kernels/";
  if (to == "kernels") return from == "engine" ? "engine/ sits below kernels/ (only numeric.h is known)" : "";
  if (!kRank.count(to) || !kRank.count(from)) return {};
  return kRank.at(to) > kRank.at(from) ? from + "/ includes " + to + "/, a folder above it" : "";
}

bool is_source(const fs::path& p) {
  static const std::vector<std::string> exts = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"};
  for (const auto& e : exts) {
    if (p.extension() == e) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the layering rules: each folder includes itself and the folders below it", "[layering]") {
  CHECK(violation("tools", "models/model_step.h").empty());
  CHECK(violation("models", "graphs/step_graphs.h").empty());
  CHECK(violation("graphs", "engine/error.h").empty());
  CHECK(violation("graphs", "kernels/contracts.h").empty());
  CHECK(violation("models", "kernels/postconv.h").empty());
  CHECK(violation("kernels", "kernels/ref/conv_ref.h").empty());
  CHECK(violation("engine", "kernels/numeric.h").empty());  // the one known edge
  CHECK(violation("graphs", "fmt/format.h").empty());
  CHECK(violation("models", "cuda_runtime_api.h").empty());

  CHECK(violation("graphs", "models/model_step.h") == "graphs/ includes models/, a folder above it");
  CHECK(violation("engine", "graphs/graph.h") == "engine/ includes graphs/, a folder above it");
  CHECK(violation("models", "tools/cli/commands.h") == "models/ includes tools/, a folder above it");
  CHECK(violation("kernels", "engine/error.h") == "kernels/ includes only kernels/");
  CHECK(violation("kernels", "graphs/manifest.h") == "kernels/ includes only kernels/");
  CHECK_FALSE(violation("engine", "kernels/fill.h").empty());
  CHECK_FALSE(violation("tools", "tests/support/catch.h").empty());
}

TEST_CASE("no source file includes a folder above its own", "[layering]") {
  const fs::path root = fs::path(SG_TEST_SOURCE_DIR);
  const std::regex include_line(R"re(^\s*#\s*include\s*["<]([^">]+)[">])re");
  std::vector<std::string> found;
  int files = 0, includes = 0;
  for (const std::string folder : {"engine", "graphs", "kernels", "models", "tools"}) {
    REQUIRE(fs::is_directory(root / folder));
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        ++includes;
        const std::string why = violation(folder, m[1].str());
        if (!why.empty()) {
          found.push_back(fs::relative(entry.path(), root).string() + ":" + std::to_string(n) + ": #include \"" +
                          m[1].str() + "\": " + why);
        }
      }
    }
  }
  INFO("scanned " << files << " files, " << includes << " include lines");
  CHECK(files > 100);  // the scan found the tree
  std::string report;
  for (const auto& f : found) report += f + "\n";
  INFO(report);
  CHECK(found.empty());
}

// ctest names each Catch2 test after its TEST_CASE name, and catch_discover_tests splits names at
// ';' (a CMake list separator): a name with one would become two ctest entries that match nothing.
TEST_CASE("no test case name contains a semicolon", "[layering]") {
  const fs::path root = fs::path(SG_TEST_SOURCE_DIR) / "tests";
  REQUIRE(fs::is_directory(root));
  const std::regex name(R"re(TEST_CASE\s*\(\s*"([^"]*)")re");
  std::vector<std::string> bad;
  int seen = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, name)) continue;
      ++seen;
      if (m[1].str().find(';') != std::string::npos) bad.push_back(e.path().filename().string() + ": " + m[1].str());
    }
  }
  CHECK(seen > 100);  // the scan finds the suite's test cases
  for (const auto& b : bad) FAIL_CHECK("test case name with ';': " << b);
}

// Programmatic dependent launch (kernels/launch.cuh): a kernel launched with PDL may start before
// the previous kernel completes, so every kernel in kernels/ must wait (pdl_start or pdl_wait)
// before its work, and launches go through launch_kernel (a <<< >>> launch would silently drop
// the step's PDL choice). A kernel without its wait would race under PDL, and only sometimes.
TEST_CASE("every kernel waits for its predecessor and is launched through launch_kernel", "[layering][pdl]") {
  const fs::path root = fs::path(SG_TEST_SOURCE_DIR) / "kernels";
  REQUIRE(fs::is_directory(root));
  std::vector<std::string> bad;
  int kernels = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    const auto ext = e.path().extension();
    if (!e.is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream in(e.path());
    std::string text, line;
    while (std::getline(in, line)) {
      const size_t c = line.find("//");  // comments may name either
      text += (c == std::string::npos ? line : line.substr(0, c)) + "\n";
    }
    const std::string file = e.path().filename().string();
    if (text.find("<<<") != std::string::npos) bad.push_back(file + ": a <<< >>> launch");
    for (size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
      ++kernels;
      size_t open = text.find('{', at), close = open;
      for (int depth = 0; close < text.size(); ++close) {
        if (text[close] == '{') ++depth;
        if (text[close] == '}' && --depth == 0) break;
      }
      const std::string body = text.substr(open, close - open);
      if (body.find("pdl_start()") == std::string::npos && body.find("pdl_wait()") == std::string::npos) {
        const auto line_no = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
        bad.push_back(file + ":" + std::to_string(line_no) + ": a kernel without pdl_start() or pdl_wait()");
      }
    }
  }
  CHECK(kernels > 30);  // the scan finds the kernels
  for (const auto& b : bad) FAIL_CHECK(b);
}
