// CPU tests of the guards that every file and string read from outside goes through:
// printable() (engine/text.h), RegularFile / read_regular_file (engine/files.h), the host memory
// check (engine/host_memory.h), parse_json / json_excerpt (models/json_read.h) and the memory the
// CPU reference model needs (models/reference_memory.h). The bad inputs themselves, end to end, are
// in test_bad_input*.cpp.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/files.h"
#include "engine/host_memory.h"
#include "engine/text.h"
#include "models/json_read.h"
#include "models/qwen35_config.h"
#include "models/reference_memory.h"
#include "models/reference_model.h"
#include "tests/support/catch.h"
#include "tests/support/safetensors_fixtures.h"
#include "tests/support/temp_dir.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;

TEST_CASE("count_of writes a count with its noun, plural unless 1", "[guards]") {
  CHECK(count_of(1, "slot") == "1 slot");
  CHECK(count_of(0, "slot") == "0 slots");
  CHECK(count_of(2, "request") == "2 requests");
  CHECK(count_of(-1, "token") == "-1 tokens");
}

TEST_CASE("printable escapes control bytes, DEL, non-ASCII and backslashes, and cuts long text", "[guards]") {
  CHECK(printable("model.layers.0.mlp") == "model.layers.0.mlp");
  CHECK(printable("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(printable(std::string("\0\x07\x7f\x9b\xff", 5)) == "\\x00\\x07\\x7f\\x9b\\xff");
  CHECK(printable("C:\\x") == "C:\\\\x");
  CHECK(printable("\n\t") == "\\x0a\\x09");
  CHECK(printable(std::string(300, 'a'), 10) == "aaaaaaaaaa... (300 bytes)");
  CHECK(printable("") == "");
}

TEST_CASE("parse_json: the depth limit is exact, duplicates are named with their path", "[guards][json]") {
  const std::string d64 = std::string(64, '[') + std::string(64, ']');
  const std::string d65 = std::string(65, '[') + std::string(65, ']');
  CHECK_NOTHROW(parse_json(d64, "x"));
  expect_error([&] { parse_json(d65, "x"); }, {"x: the file nests deeper than 64 levels"});
  JsonReadOptions o;
  o.max_depth = 3;
  o.what = "header";
  CHECK_NOTHROW(parse_json(R"({"a": {"b": [1]}})", "h", o));
  expect_error([&] { parse_json(R"({"a": {"b": [[1]]}})", "h", o); }, {"h: the header nests deeper than 3 levels"});
  expect_error([&] { parse_json(R"({"a": 1, "b": {"c": 1, "c": 2}})", "f"); },
               {"f: key 'b.c' appears twice in one object of the file"});
  // The same key in two different objects is fine.
  CHECK_NOTHROW(parse_json(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})", "f"));
  expect_error([&] { parse_json("{\"a\": \"\x1b\"}", "f"); }, {"f: the file is not valid JSON", "<U+001B>"});
  // A NUL byte ended nlohmann's input: whatever followed it was ignored.
  using namespace std::string_literals;
  expect_error([&] { parse_json("{\"a\": 1}\0{\"garbage\": "s, "f"); },
               {"f: the file is not valid JSON: a NUL byte at byte 8"});
  expect_error([&] { parse_json("\0"s, "f"); }, {"f: the file is not valid JSON: a NUL byte at byte 0"});
}

TEST_CASE("json_excerpt is short and printable whatever the value", "[guards][json]") {
  CHECK(json_excerpt(json(42)) == "42");
  CHECK(json_excerpt(json("a\x1b")) == "\"a\\x1b\"");
  CHECK(json_excerpt(json{{"k", {1, 2}}}) == "{\"k\":[1,2]}");
  json big = json::array();
  for (int i = 0; i < 1'000'000; ++i) big.push_back(i);
  const std::string e = json_excerpt(big);
  CHECK(e.size() <= 60);
  CHECK(e.substr(0, 6) == "[0,1,2");
  CHECK(e.substr(e.size() - 3) == "...");
  json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  CHECK(json_excerpt(deep) == "[[[[[...]]]]]");
}

TEST_CASE("read_regular_file refuses what is not a regular file and what is too large", "[guards][files]") {
  TempDir dir;
  const auto f = dir.path / "a.json";
  write_text(f, "{\"x\": 1}");
  CHECK(read_regular_file(f) == "{\"x\": 1}");
  CHECK(read_json_file(f)["x"] == 1);
  expect_error([&] { read_regular_file(f, 3); }, {f.string(), "8 bytes, more than the 3 byte limit"});
  expect_error([&] { read_regular_file(dir.path); }, {dir.path.string(), "(it is a directory)"});
  expect_error([&] { read_regular_file("/dev/null"); }, {"/dev/null: not a regular file (it is a character device)"});
  const auto fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  expect_error([&] { RegularFile r(fifo); }, {fifo.string(), "(it is a FIFO)"});
  expect_error([&] { read_regular_file(dir.path / "none"); }, {"cannot open: No such file or directory"});
  // A file whose size the kernel reports as 0 (/proc) is read to its end, within the limit.
  const std::string status = read_regular_file("/proc/self/status");
  CHECK(status.rfind("Name:", 0) == 0);
  CHECK(status.find("\nPid:") != std::string::npos);
  expect_error([&] { read_regular_file("/proc/self/status", 16); }, {"/proc/self/status: more than the 16 byte limit"});
  write_text(dir.path / "empty", "");
  CHECK(read_regular_file(dir.path / "empty").empty());
}

TEST_CASE("check_host_memory states the need, the detail and what is available", "[guards][memory]") {
  HostMemory have;
  have.available = uint64_t{3} << 30;
  have.source = "a test";
  CHECK_NOTHROW(check_host_memory(have.available, "x", "y", have));
  expect_error([&] { check_host_memory(have.available + 1, "the thing", "parts", have); },
               {"the thing needs 3.00 GiB (3221225473 bytes) of host memory (parts) but only 3.00 GiB "
                "(3221225472 bytes) is available (a test)"});
  const HostMemory now = available_host_memory();
  CHECK(now.available > 0);
  CHECK_FALSE(now.source.empty());
}

TEST_CASE("reference_memory counts the CPU model's weights, states and caches", "[guards][memory]") {
  const Qwen35Config c = preset("tiny");
  uint64_t weights = 0;
  for (const auto& [name, shape] : expected_weights(c)) {
    uint64_t n = 4;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    weights += n;
  }
  const ReferenceMemory m = reference_memory(c, 3, 100, 10);
  CHECK(m.weights == weights);
  const GdnDims& g = c.gdn;
  CHECK(m.ssm_state == uint64_t{4} * c.num_linear_attention() * 3 * g.Hv * g.Dk * g.Dv);
  CHECK(m.conv_state == uint64_t{4} * c.num_linear_attention() * 3 * g.C() * (g.K - 1));
  CHECK(m.kv_cache == uint64_t{4} * c.num_full_attention() * 3 * 2 * 100 * c.Hkv * c.D);
  CHECK(m.activations > 0);
  CHECK(m.total() == m.weights + m.states() + m.activations);
  // Sizes past 2^64 saturate instead of wrapping to something small.
  const ReferenceMemory huge = reference_memory(c, INT64_MAX, INT64_MAX, INT64_MAX);
  CHECK(huge.kv_cache == UINT64_MAX);
  CHECK(huge.total() == UINT64_MAX);
}
