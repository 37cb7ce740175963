// The cuBLASLt choices file (models/lt_choices.h): a document's choices go into the process's
// registry and come back out unchanged; a choice already made is kept; malformed documents, and
// documents of another cuBLASLt version or device model, are refused with the reason and add
// nothing; the file is read through the checked JSON reader.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/gemm_lt.h"
#include "models/lt_choices.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace sg;
using nlohmann::json;
using sg::test::expect_error;

namespace {

const std::string kDevice = "NVIDIA H200";

json choice(int64_t M, int64_t N, const std::string& algo_digit = "0") {
  std::string algo;
  for (int i = 0; i < 128; ++i) algo += (i % 16 == 15) ? algo_digit : "a";
  return {{"M", M},
          {"N", N},
          {"K", 2560},
          {"ldx", 2560},
          {"ldy", N},
          {"in", "bf16"},
          {"out", "bf16"},
          {"align_x", 256},
          {"align_w", 256},
          {"align_y", 256},
          {"workspace", 33554432},
          {"algo", algo},
          {"text", "lt algo=66 tile=12 stages=35 splitk=1 (heuristic #3 of 8)"}};
}

json document(json choices) {
  return {{"format", kLtChoicesFormat},
          {"cublaslt_version", lt_library_version()},
          {"device", kDevice},
          {"choices", std::move(choices)}};
}

}  // namespace

TEST_CASE("lt choices: a document's choices come back out unchanged, and a chosen shape keeps its choice",
          "[gemm][lt_choices]") {
  lt_clear_choices();
  const json doc = document({choice(32, 2560, "1"), choice(32, 12352, "2")});
  CHECK(add_lt_choices(doc, "f.json", 0, kDevice) == 2);
  const json back = lt_choices_json(0, kDevice);
  CHECK(back == doc);                                     // shape order: M, then N
  CHECK(lt_choices_json(1, kDevice)["choices"].empty());  // another device has none
  // The same shapes again, with other algorithms: the first choices stay.
  CHECK(add_lt_choices(document({choice(32, 2560, "7"), choice(32, 12352, "8")}), "g.json", 0, kDevice) == 0);
  CHECK(lt_choices_json(0, kDevice) == doc);
  // Another workspace size is another key.
  json other = choice(32, 2560, "9");
  other["workspace"] = 1024;
  CHECK(add_lt_choices(document({other}), "h.json", 0, kDevice) == 1);
  CHECK(lt_choices_json(0, kDevice)["choices"].size() == 3);
  lt_clear_choices();
  CHECK(lt_choices_json(0, kDevice)["choices"].empty());
}

TEST_CASE("lt choices: malformed documents and other versions or devices are refused, adding nothing",
          "[gemm][lt_choices]") {
  lt_clear_choices();
  const auto refused = [](const json& doc, const std::vector<std::string>& needles) {
    expect_error([&] { add_lt_choices(doc, "c.json", 0, kDevice); }, needles);
    CHECK(lt_choices_json(0, kDevice)["choices"].empty());
  };
  refused(json::array(), {"c.json", "must hold a JSON object"});
  json d = document({choice(32, 2560)});
  d["format"] = "something else";
  refused(d, {"c.json", "not a cuBLASLt choices file"});
  d = document({choice(32, 2560)});
  d["cublaslt_version"] = lt_library_version() + 1;
  refused(d, {"c.json", "written with cuBLASLt", "only valid for the version"});
  d = document({choice(32, 2560)});
  d["device"] = "NVIDIA H100";
  refused(d, {"c.json", "written on a NVIDIA H100", "this device is a NVIDIA H200"});
  d = document({choice(32, 2560)});
  d.erase("choices");
  refused(d, {"c.json", "\"choices\" must be an array"});
  // A bad second choice: the good first one is not added either.
  const auto bad_choice = [&](const std::string& key, const json& value, const std::vector<std::string>& needles) {
    json c = choice(32, 12352);
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    std::vector<std::string> n = {"c.json: choice 1"};
    n.insert(n.end(), needles.begin(), needles.end());
    refused(document({choice(32, 2560), c}), n);
  };
  bad_choice("M", nullptr, {"no \"M\""});
  bad_choice("M", "32", {"\"M\" must be an integer"});
  bad_choice("M", 0, {"\"M\" must be in [1, "});
  bad_choice("M", -5, {"\"M\" must be in [1, ", "not -5"});
  bad_choice("ldy", 100, {"\"ldy\" must be in [12352, "});
  bad_choice("workspace", -1, {"\"workspace\" must be in [0, "});
  bad_choice("align_x", uint64_t{1} << 32 | 256, {"\"align_x\" must be in [1, 256]"});
  bad_choice("in", "bf17", {"unknown dtype 'bf17'"});
  bad_choice("align_w", 48, {"power of two up to 256"});
  bad_choice("algo", "abc", {"128 hex digits", "not 3 characters"});
  bad_choice("algo", std::string(127, 'a') + "g", {"not a hex digit: 'g'"});
  bad_choice("text", 5, {"\"text\" must be a string"});
  bad_choice("text", "lt \x1b[2J algo", {"\"text\" must be printable ASCII", "\\x1b"});
  bad_choice("text", std::string(201, 'a'), {"at most 200 characters"});
  refused(document({choice(32, 2560), json::array()}), {"c.json: choice 1: must be an object"});
}

TEST_CASE("lt choices: files go through the checked JSON reader", "[gemm][lt_choices]") {
  lt_clear_choices();
  test::TempDir dir;
  const auto path = dir.path / "choices.json";
  {
    std::ofstream f(path);
    f << document({choice(8, 2560, "3")}).dump(1);
  }
  CHECK(load_lt_choices(path, 0, kDevice) == 1);
  CHECK(lt_choices_json(0, kDevice)["choices"][0]["M"] == 8);
  lt_clear_choices();
  {
    std::ofstream f(path);
    f << "{\"format\": 1, \"format\": 2}";
  }
  expect_error([&] { load_lt_choices(path, 0, kDevice); }, {"choices.json", "format"});
  expect_error([&] { load_lt_choices(dir.path / "missing.json", 0, kDevice); }, {"missing.json"});
  expect_error([&] { load_lt_choices(dir.path, 0, kDevice); }, {"directory"});
  CHECK(lt_choices_json(0, kDevice)["choices"].empty());
}
