// bad_input.h: the case tables of the bad-input suite (tests/cpu/test_bad_input.cpp: files read
// in-process; test_bad_input_cli.cpp: the `stepgraph` program and its environment) and the
// helpers that build bad inputs: a copy of a small real checkpoint (tests/fixtures), poisoned
// weights, FIFOs, device links, deep JSON, sparse oversized files. Every case runs in a forked
// child (tests/support/child.h), so a crash, a hang or a runaway allocation fails that case only.
// Header-only.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "tests/support/catch.h"
#include "tests/support/child.h"
#include "tests/support/safetensors_fixtures.h"
#include "tests/support/temp_dir.h"

namespace sg::test {

namespace fs = std::filesystem;

// The fixture every checkpoint case starts from: 4 layers, hidden 40, vocab 500, F32 weights.
inline fs::path base_fixture() { return fs::path(SG_TEST_SOURCE_DIR) / "tests/fixtures/h40-attn-first-v500"; }

inline nlohmann::json base_config() {
  std::ifstream in(base_fixture() / "config.json");
  return nlohmann::json::parse(in);
}

// A config whose GDN head sizes make the recurrent state enormous while the weights stay small (the
// crafted-checkpoint attack: megabytes of weights, hundreds of GB of state).
inline nlohmann::json huge_head_config() {
  nlohmann::json c = base_config();
  c["hidden_size"] = 8;
  c["linear_num_key_heads"] = 1;
  c["linear_num_value_heads"] = 1;
  c["linear_key_head_dim"] = 131072;
  c["linear_value_head_dim"] = 131072;
  return c;
}

// Copies the fixture's config.json and model.safetensors into `dir`.
inline void copy_checkpoint(const fs::path& dir) {
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(base_fixture() / f, dir / f, fs::copy_options::overwrite_existing);
  }
}

// The fixture's checkpoint in `dir`, with `value` written over element `index` of F32 tensor `name`.
inline void poisoned_checkpoint(const fs::path& dir, const std::string& name, float value, size_t index = 0) {
  copy_checkpoint(dir);
  const SafetensorsFile f = SafetensorsFile::open(base_fixture() / "model.safetensors");
  std::vector<SafetensorsTensor> tensors;
  for (const std::string& n : f.names()) {
    const TensorInfo& t = f.info(n);
    const auto b = f.bytes(n);
    std::vector<uint8_t> bytes(b.begin(), b.end());
    if (n == name) std::memcpy(bytes.data() + 4 * index, &value, 4);
    tensors.emplace_back(n, t.dtype.value(), t.shape, std::move(bytes));
  }
  write_safetensors(dir / "model.safetensors", tensors);
}

// The fixture's checkpoint in `dir`, plus an F32 tensor `name` of `shape` (zeros).
inline void extended_checkpoint(const fs::path& dir, const std::string& name, const std::vector<int64_t>& shape) {
  copy_checkpoint(dir);
  const SafetensorsFile f = SafetensorsFile::open(base_fixture() / "model.safetensors");
  std::vector<SafetensorsTensor> tensors;
  for (const std::string& n : f.names()) {
    const auto b = f.bytes(n);
    tensors.emplace_back(n, f.info(n).dtype.value(), f.info(n).shape, std::vector<uint8_t>(b.begin(), b.end()));
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  tensors.emplace_back(name, DType::f32, shape, std::vector<uint8_t>(4 * static_cast<size_t>(numel)));
  write_safetensors(dir / "model.safetensors", tensors);
}

inline void make_fifo(const fs::path& p) {
  fs::remove(p);
  REQUIRE(::mkfifo(p.c_str(), 0644) == 0);
}

inline void link_to(const fs::path& p, const fs::path& target) {
  fs::remove(p);
  fs::create_symlink(target, p);
}

// A file of `bytes` zero bytes that takes no disk space.
inline void sparse_file(const fs::path& p, uint64_t bytes) {
  { std::ofstream out(p, std::ios::binary | std::ios::trunc); }
  REQUIRE(::truncate(p.c_str(), static_cast<off_t>(bytes)) == 0);
}

inline std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}
inline std::string nested_arrays(size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}
inline std::string nested_objects(size_t depth) { return repeat("{\"a\":", depth) + "1" + std::string(depth, '}'); }

// "{dir}" in `s` replaced by the case's folder.
inline std::string in_dir(std::string s, const fs::path& dir) {
  const std::string key = "{dir}";
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p)) {
    s.replace(p, key.size(), dir.string());
    p += dir.string().size();
  }
  return s;
}

// One bad file read in-process (in a child): `setup` writes it under the case's folder, `run` is
// the entry point that reads it and must throw `expect` with every fragment in its message.
struct FileCase {
  std::string name;
  std::function<void(const fs::path& dir)> setup;
  std::function<void(const fs::path& dir)> run;
  ChildOutcome expect = ChildOutcome::sg_error;
  std::vector<std::string> fragments;  // "{dir}" is replaced by the folder
  unsigned seconds = 20;
};

// One run of the `stepgraph` program: exit code (-1: any non-zero code), fragments of its output
// that must appear and ones that must not (by default: source locations).
struct CliCase {
  std::string name;
  std::function<void(const fs::path& dir)> setup;  // may be empty
  std::vector<std::string> args;                   // after the program name; "{dir}" replaced
  EnvChanges env;
  int exit_code = 1;
  std::vector<std::string> fragments;
  std::vector<std::string> absent;
  std::function<void(const fs::path& dir, const std::string& out)> after;  // extra checks (may be empty)
  unsigned seconds = 30;
};

// Appends a case to `v` and returns it, for setting its other fields (setup, after, seconds)
// before the next case is added.
inline CliCase* add_cli_case(std::vector<CliCase>& v, std::string name, std::vector<std::string> args, int exit_code,
                             std::vector<std::string> fragments) {
  CliCase c;
  c.name = std::move(name);
  c.args = std::move(args);
  c.exit_code = exit_code;
  c.fragments = std::move(fragments);
  v.push_back(std::move(c));
  return &v.back();
}

// What every case asserts besides its own fragments: it ended by itself (no signal, no timeout),
// and its output holds no byte that could drive a terminal.
inline void check_common(const ChildResult& r) {
  INFO("ended: " << r.describe() << " after " << r.seconds << " s");
  INFO("output: " << r.out.substr(0, 4000));
  REQUIRE(r.end == ChildResult::End::exited);
  const size_t bad = find_unprintable(r.out);
  INFO("unprintable byte at offset " << bad);
  CHECK(bad == std::string::npos);
}

inline void check_file_case(const FileCase& c) {
  INFO("case: " << c.name);
  TempDir dir("sg_bad_input");
  if (c.setup) c.setup(dir.path);
  ChildLimits limits;
  limits.seconds = c.seconds;
  const ChildResult r = run_in_child([&] { c.run(dir.path); }, limits);
  check_common(r);
  INFO("output: " << r.out.substr(0, 4000));
  CHECK(outcome_name(static_cast<ChildOutcome>(r.code)) == std::string(outcome_name(c.expect)));
  CHECK(r.out.size() < 3000);  // messages stay short, however large the bad value
  for (const auto& f : c.fragments) {
    const std::string want = in_dir(f, dir.path);
    INFO("expected fragment: " << want);
    CHECK(r.out.find(want) != std::string::npos);
  }
}

inline void check_cli_case(const CliCase& c) {
  INFO("case: " << c.name);
  TempDir dir("sg_bad_cli");
  if (c.setup) c.setup(dir.path);
  std::vector<std::string> argv = {SG_STEPGRAPH_BIN};
  for (const auto& a : c.args) argv.push_back(in_dir(a, dir.path));
  ChildLimits limits;
  limits.seconds = c.seconds;
  limits.address_space = uint64_t{8} << 30;
  const ChildResult r = run_program(argv, c.env, limits, dir.path);
  check_common(r);
  INFO("output: " << r.out.substr(0, 4000));
  if (c.exit_code < 0) {
    CHECK(r.code != 0);
  } else {
    CHECK(r.code == c.exit_code);
  }
  for (const auto& f : c.fragments) {
    const std::string want = in_dir(f, dir.path);
    INFO("expected fragment: " << want);
    CHECK(r.out.find(want) != std::string::npos);
  }
  std::vector<std::string> absent = c.absent;
  for (const char* loc : {".cpp:", ".h:", "in sg::", "std::source_location"}) absent.push_back(loc);
  for (const auto& f : absent) {
    INFO("fragment that must not appear: " << f);
    CHECK(r.out.find(f) == std::string::npos);
  }
  if (c.after) c.after(dir.path, r.out);
}

}  // namespace sg::test
