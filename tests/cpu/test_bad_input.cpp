// The bad-input suite, part 1: files read in-process (config.json, safetensors headers and data,
// model.safetensors.index.json, checkpoint weights). Each case writes one bad input into its own
// folder and reads it through the real entry point in a forked child with a time limit and an
// address-space limit (tests/support/child.h); it must end in the expected error class with a
// message naming the file and the problem, short and printable, never in a crash, a hang or a
// runaway allocation. Part 2 (the command line and the environment): test_bad_input_cli.cpp.
#include <fmt/format.h>

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/hf_config.h"
#include "models/reference_model.h"
#include "models/safetensors.h"
#include "tests/support/bad_input.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;

namespace {

constexpr auto kError = ChildOutcome::sg_error;
constexpr auto kInvalid = ChildOutcome::invalid_argument;
const std::string kEsc = "\x1b";

void load_config(const fs::path& d) { load_hf_config(d / "config.json"); }
void open_checkpoint(const fs::path& d) { Checkpoint::open(d); }
void open_file(const fs::path& d) { SafetensorsFile::open(d / "m.safetensors"); }
void load_checkpoint_weights(const fs::path& d) {
  load_weights(Checkpoint::open(d), load_hf_config(d / "config.json"));
}

// Writes config.json: the fixture's config with `edit` applied.
std::function<void(const fs::path&)> config_with(std::function<void(json&)> edit) {
  return [edit](const fs::path& d) {
    json c = base_config();
    edit(c);
    write_text(d / "config.json", c.dump(1));
  };
}
std::function<void(const fs::path&)> config_text(std::string text) {
  return [text](const fs::path& d) { write_text(d / "config.json", text); };
}
// The fixture's config with `"key": <raw JSON text>`, spliced in as text (for values too deep or
// malformed to build with nlohmann::json).
std::function<void(const fs::path&)> config_raw_value(const std::string& key, std::string raw) {
  return [key, raw](const fs::path& d) {
    json c = base_config();
    c.erase(key);
    std::string text = c.dump();
    text.insert(1, "\"" + key + "\": " + raw + ",");
    write_text(d / "config.json", text);
  };
}

// A safetensors file m.safetensors holding `header` and `data` bytes.
std::function<void(const fs::path&)> st_file(std::string header, std::vector<uint8_t> data = std::vector<uint8_t>(16)) {
  return [header, data](const fs::path& d) { write_bytes(d / "m.safetensors", image(header, data)); };
}
const std::string kEntry = R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})";

std::function<void(const fs::path&)> index_text(std::string text) {
  return [text](const fs::path& d) { write_text(d / "model.safetensors.index.json", text); };
}

std::vector<FileCase> config_cases() {
  std::vector<FileCase> v;
  auto add = [&](std::string name, std::function<void(const fs::path&)> setup, std::vector<std::string> fragments,
                 ChildOutcome expect = kError) {
    fragments.push_back("{dir}/config.json");
    v.push_back({std::move(name), std::move(setup), load_config, expect, std::move(fragments)});
  };
  add("config: top-level arrays nested 100000 deep", config_text(nested_arrays(100000)), {"nests deeper than 64"});
  add("config: objects nested 100000 deep", config_text(nested_objects(100000)), {"nests deeper than 64"});
  add("config: hidden_size nested 100000 deep", config_raw_value("hidden_size", nested_arrays(100000)),
      {"nests deeper than 64"});
  add("config: 100000 open brackets, never closed", config_text(std::string(100000, '[')), {"nests deeper than 64"});
  add("config: 65 levels (one past the limit)", config_raw_value("hidden_size", nested_arrays(64)),
      {"nests deeper than 64"});
  add("config: 63 levels parse, shown short", config_raw_value("hidden_size", nested_arrays(62)),
      {"key 'hidden_size': must be an integer, got [[[[", "..."});
  add("config: a FIFO", [](const fs::path& d) { make_fifo(d / "config.json"); }, {"not a regular file (it is a FIFO)"});
  add("config: a link to /dev/zero", [](const fs::path& d) { link_to(d / "config.json", "/dev/zero"); },
      {"not a regular file (it is a character device)"});
  add("config: a directory", [](const fs::path& d) { fs::create_directory(d / "config.json"); },
      {"not a regular file (it is a directory)"});
  add("config: missing", [](const fs::path&) {}, {"cannot open: No such file or directory"});
  add("config: 65 MiB", [](const fs::path& d) { sparse_file(d / "config.json", (uint64_t{65} << 20)); },
      {"68157440 bytes, more than the 67108864 byte limit"});
  add("config: empty file", config_text(""), {"not valid JSON"});
  add("config: binary bytes", config_text(std::string("\0\xff\x1b[2J\x07", 6)), {"not valid JSON"});
  add("config: a NUL byte, then garbage",
      [](const fs::path& d) {
        write_text(d / "config.json", base_config().dump() + std::string("\0{\"this is\": garbage", 21));
      },
      {"not valid JSON: a NUL byte at byte"});
  add("config: hidden_size given twice", config_text(R"({"hidden_size": 40, "hidden_size": 4096})"),
      {"key 'hidden_size' appears twice"});
  add("config: text_config.head_dim given twice", config_text(R"({"text_config": {"head_dim": 24, "head_dim": 256}})"),
      {"key 'text_config.head_dim' appears twice"});
  add("config: escape sequence in hidden_act", config_with([](json& c) { c["hidden_act"] = kEsc + "[2Jgelu"; }),
      {"key 'hidden_act': '\\x1b[2Jgelu' is not supported"});
  add("config: escape sequence in rope_type",
      config_with([](json& c) { c["rope_parameters"]["rope_type"] = kEsc + "]0;title\x07"; }),
      {"key 'rope_parameters.rope_type': '\\x1b]0;title\\x07' is not supported"});
  add("config: raw control byte inside a string", config_raw_value("hidden_act", "\"si" + kEsc + "lu\""),
      {"not valid JSON"});
  add("config: invalid UTF-8 inside a string", config_raw_value("hidden_act", "\"s\xff\xfe\""), {"not valid JSON"});
  add("config: 10 MB string value", config_with([](json& c) { c["hidden_act"] = std::string(10'000'000, 'x'); }),
      {"key 'hidden_act': 'xxxx", "... (10000000 bytes)"});
  add("config: layer_types with a million entries",
      config_with([](json& c) { c["layer_types"] = std::vector<std::string>(1'000'000, "linear_attention"); }),
      {"key 'layer_types': has 1000000 entries but num_hidden_layers is 4"});
  add("config: hidden_size an object of 100000 keys", config_with([](json& c) {
        json o = json::object();
        for (int i = 0; i < 100000; ++i) o[fmt::format("k{}", i)] = i;
        c["hidden_size"] = o;
      }),
      {"key 'hidden_size': must be an integer, got {", "..."});
  // An object of 100,000 objects: read in linear time (nlohmann's callback parser, used before,
  // took time quadratic in the objects of one object: 40,000 took 13 s, so this case would pass
  // its time limit).
  add("config: layer_types an object of 100000 empty objects",
      config_raw_value("layer_types",
                       [] {
                         std::string o = "{";
                         for (int i = 0; i < 100000; ++i) o += fmt::format("{}\"k{}\":{{}}", i ? "," : "", i);
                         return o + "}";
                       }()),
      {"key 'layer_types'"});
  v.back().seconds = 60;  // the old parser: about 80 s
  add("config: not an object", config_text(R"([1, 2, 3])"), {"must be a JSON object, got [1,2,3]"});
  add("config: huge GDN head sizes fail the memory check", config_with([](json& c) { c = huge_head_config(); }),
      {"needs", "of host memory", "SSM state"});
  v.back().run = [](const fs::path& d) {
    const Qwen35Config cfg = load_hf_config(d / "config.json");
    ReferenceModel model(cfg, synthetic_weights(cfg, 1), 1, 16);  // must refuse before allocating
  };
  v.back().fragments.pop_back();  // the error names the model, not the file
  return v;
}

std::vector<FileCase> safetensors_cases() {
  std::vector<FileCase> v;
  auto add = [&](std::string name, std::function<void(const fs::path&)> setup, std::vector<std::string> fragments,
                 std::function<void(const fs::path&)> run = open_file, ChildOutcome expect = kError) {
    v.push_back({std::move(name), std::move(setup), std::move(run), expect, std::move(fragments)});
  };
  add("safetensors: one tensor named twice", st_file("{\"w\":" + kEntry + ",\"w\":" + kEntry + "}"),
      {"{dir}/m.safetensors", "tensor 'w' appears twice in one object of the header"});
  add("safetensors: a field given twice",
      st_file(R"({"w":{"dtype":"F32","dtype":"F16","shape":[4],"data_offsets":[0,16]}})"),
      {"{dir}/m.safetensors", "tensor 'w': key 'dtype' appears twice"});
  add("safetensors: bytes after the data section", st_file("{\"w\":" + kEntry + "}", std::vector<uint8_t>(20)),
      {"{dir}/m.safetensors",
       "4 bytes after the end of the tensor data (the last tensor, 'w', ends at byte 16 of the 20-byte data section)"});
  add("safetensors: no tensors, yet data bytes", st_file(R"({"__metadata__":{"format":"pt"}})"),
      {"{dir}/m.safetensors", "lists no tensors but 16 data bytes"});
  add(
      "safetensors: model.safetensors is a FIFO", [](const fs::path& d) { make_fifo(d / "model.safetensors"); },
      {"{dir}/model.safetensors: not a regular file (it is a FIFO)"}, open_checkpoint);
  add(
      "safetensors: a FIFO given as the checkpoint", [](const fs::path& d) { make_fifo(d / "m.safetensors"); },
      {"{dir}/m.safetensors: not a regular file (it is a FIFO)"},
      [](const fs::path& d) { Checkpoint::open(d / "m.safetensors"); });
  add(
      "safetensors: model.safetensors links to /dev/zero",
      [](const fs::path& d) { link_to(d / "model.safetensors", "/dev/zero"); },
      {"not a regular file (it is a character device)"}, open_checkpoint);
  add("safetensors: a header of 200000 tensors", st_file([] {
        std::string h = "{";
        for (int i = 0; i < 200000; ++i)
          h += fmt::format("{}\"w{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", i ? "," : "", i);
        return h + "}";
      }()),
      {"{dir}/m.safetensors", "16 bytes after the end of the tensor data"});
  v.back().seconds = 90;  // AddressSanitizer makes its 200,000 entries take tens of seconds (the old parser: minutes)
  add("safetensors: header nested 100000 deep", st_file("{\"w\":" + nested_arrays(100000) + "}"),
      {"{dir}/m.safetensors", "header nests deeper than 8"});
  add("safetensors: escape sequence in a tensor name",
      st_file("{\"w\\u001b[2J\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}"),
      {"tensor 'w\\x1b[2J': unknown dtype 'Q4'"});
  add("safetensors: escape sequence in a dtype",
      st_file(R"({"w":{"dtype":"\u001b[31mF32","shape":[4],"data_offsets":[0,16]}})"),
      {"tensor 'w': unknown dtype '\\x1b[31mF32'"});
  add("safetensors: invalid UTF-8 in a tensor name",
      st_file("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"), {"header is not valid JSON"});
  add("safetensors: a 1 MB dtype",
      st_file(R"({"w":{"dtype":")" + std::string(1'000'000, 'A') + R"(","shape":[4],"data_offsets":[0,16]}})"),
      {"unknown dtype 'AAAA", "... (1000000 bytes)"});
  add("safetensors: header length 2^63",
      [](const fs::path& d) {
        auto b = image("{}", {});
        const uint64_t n = uint64_t{1} << 63;
        std::memcpy(b.data(), &n, 8);
        write_bytes(d / "m.safetensors", b);
      },
      {"header length 9223372036854775808 exceeds"});
  add("safetensors: a shape whose size overflows",
      st_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})"),
      {"tensor 'w': shape", "too large"});
  add(
      "weights: a NaN", [](const fs::path& d) { poisoned_checkpoint(d, "model.norm.weight", std::nanf(""), 7); },
      {"model.norm.weight (in {dir}/model.safetensors) has 1 non-finite value (first: nan at index 7)"},
      load_checkpoint_weights, kInvalid);
  add(
      "weights: an infinity",
      [](const fs::path& d) {
        poisoned_checkpoint(d, "model.embed_tokens.weight", -std::numeric_limits<float>::infinity(), 123);
      },
      {"model.embed_tokens.weight", "1 non-finite value (first: -inf at index 123)"}, load_checkpoint_weights,
      kInvalid);
  // A tensor of another architecture: running without it would compute another model.
  add(
      "weights: an attention bias",
      [](const fs::path& d) { extended_checkpoint(d, "model.layers.0.self_attn.q_proj.bias", {160}); },
      {"model.layers.0.self_attn.q_proj.bias (F32 [160]) is not a tensor of this model", "another architecture"},
      load_checkpoint_weights, kInvalid);
  add(
      "weights: a layer past num_hidden_layers",
      [](const fs::path& d) { extended_checkpoint(d, "model.layers.4.input_layernorm.weight", {40}); },
      {"model.layers.4.input_layernorm.weight", "past num_hidden_layers = 4"}, load_checkpoint_weights, kInvalid);
  return v;
}

std::vector<FileCase> index_cases() {
  std::vector<FileCase> v;
  const std::string idx = "{dir}/model.safetensors.index.json";
  auto add = [&](std::string name, std::function<void(const fs::path&)> setup, std::vector<std::string> fragments) {
    v.push_back({std::move(name), std::move(setup), open_checkpoint, kError, std::move(fragments)});
  };
  add("index: nested 100000 deep", index_text(R"({"weight_map": )" + nested_arrays(100000) + "}"),
      {idx, "nests deeper than 64"});
  add("index: a FIFO", [](const fs::path& d) { make_fifo(d / "model.safetensors.index.json"); },
      {idx + ": not a regular file (it is a FIFO)"});
  add("index: a link to /dev/zero", [](const fs::path& d) { link_to(d / "model.safetensors.index.json", "/dev/zero"); },
      {idx + ": not a regular file (it is a character device)"});
  add("index: 65 MiB", [](const fs::path& d) { sparse_file(d / "model.safetensors.index.json", uint64_t{65} << 20); },
      {idx, "more than the 67108864 byte limit"});
  add("index: a tensor listed twice",
      index_text(R"({"weight_map": {"model.norm.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}})"),
      {idx, "tensor 'model.norm.weight' (in weight_map) appears twice"});
  add("index: escape sequence in a shard name",
      index_text(R"({"weight_map": {"model.norm.weight": "../\u001b[2Jx.safetensors"}})"),
      {idx, "shard '../\\x1b[2Jx.safetensors' is not a file name inside the checkpoint folder"});
  add("index: a shard that is a FIFO",
      [](const fs::path& d) {
        write_text(d / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "s1.safetensors"}})");
        make_fifo(d / "s1.safetensors");
      },
      {"{dir}/s1.safetensors: not a regular file (it is a FIFO)"});
  add("index: a missing shard", index_text(R"({"weight_map": {"model.norm.weight": "s1.safetensors"}})"),
      {idx, "its shard {dir}/s1.safetensors does not exist"});
  add("index: a shard name nested 60 deep, shown short",
      index_text(R"({"weight_map": {"model.norm.weight": )" + nested_arrays(60) + "}}"),
      {idx, "tensor 'model.norm.weight': shard is not a file name: [[[[", "..."});
  add("index: weight_map missing", index_text(R"({"metadata": {"total_size": 16}})"), {idx, "no 'weight_map' object"});
  std::string big(10'000'002, 'x');  // a 10 MB JSON string
  big.front() = big.back() = '"';
  add("index: a 10 MB string instead of an object", index_text(big), {idx, "not a JSON object"});
  return v;
}

void run_table(const std::vector<FileCase>& cases) {
  for (const FileCase& c : cases) check_file_case(c);
}

}  // namespace

size_t bad_input_file_cases() { return config_cases().size() + safetensors_cases().size() + index_cases().size(); }

TEST_CASE("bad input: config.json", "[bad_input]") { run_table(config_cases()); }

TEST_CASE("bad input: safetensors files and weights", "[bad_input]") { run_table(safetensors_cases()); }

TEST_CASE("bad input: model.safetensors.index.json", "[bad_input]") { run_table(index_cases()); }
