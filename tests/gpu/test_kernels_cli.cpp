// `stepgraph kernels` on the GPU (the program as a subprocess, the GPU visible): the forms of the
// delta-rule prefill and attention prefill settings on a small prefill shape of the 4B's
// dimensions, each timed and compared with the first form (scan, simt) within the setting's
// tolerance, with its TFLOP/s; the arms of gdn.prefill on the same shape keep the reference arm's
// bytes.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/step_settings.h"
#include "tests/gpu/cli_fixture.h"
#include "tests/support/catch.h"

using namespace sg::test;

TEST_CASE("kernels: the prefill forms of the delta rule and attention against the first form, gdn.prefill's bytes",
          "[gpu][cli][delta_rule_wgmma_t]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_kernels.json";
  // Two sequences of 130 tokens: three chunks each, the last of 2 tokens.
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "kernels",
                                         "--shape",        "4b-prefill-2x130",
                                         "--op",           "delta_rule.prefill,gdn.prefill,attention.prefill",
                                         "--reps",         "1",
                                         "--launches",     "2",
                                         "--json",         json.string()};
  std::string out;
  const nlohmann::json j = run_for_json(argv, json, &out);
  std::map<std::string, nlohmann::json> forms;
  int gdn_arms = 0;
  for (const auto& row : j.at("results")) {
    if (row.at("op") == "gdn.prefill") {
      ++gdn_arms;
      CHECK(row.at("bytes_match_reference") == true);
      CHECK_FALSE(row.contains("setting"));
      continue;
    }
    REQUIRE((row.at("op") == "delta_rule.prefill" || row.at("op") == "attention.prefill"));
    forms[row.at("op").get<std::string>() + " " + row.at("arm").get<std::string>()] = row;
    CHECK(row.at("setting") == true);
    CHECK(row.at("within_tolerance") == true);
    CHECK(row.at("median_us").get<double>() > 0);
    CHECK(row.at("flops").get<double>() > 0);
    CHECK(row.at("tflops").get<double>() > 0);
  }
  CHECK(gdn_arms >= 2);
  // The scan first (the reference: no error against itself), then every form an H200 runs.
  REQUIRE(j.at("results").size() > 0);
  for (const char* first : {"delta_rule.prefill scan", "attention.prefill simt"}) {
    CAPTURE(first);
    REQUIRE(forms.count(first) == 1);
    CHECK(forms[first].at("out_error") == 0.0);
    CHECK(forms[first].at("state_error") == 0.0);
  }
  for (const char* form : {"chunked", "mma", "wgmma", "wgmma-t"}) {
    CAPTURE(form);
    const std::string key = std::string("delta_rule.prefill ") + form;
    REQUIRE(forms.count(key) == 1);
    CHECK(forms[key].at("out_error").get<double>() <= 8e-3);
    CHECK(forms[key].at("state_error").get<double>() <= 1.1e-4);
  }
  for (const char* form : {"mma", "wgmma"}) {
    CAPTURE(form);
    const std::string key = std::string("attention.prefill ") + form;
    REQUIRE(forms.count(key) == 1);
    CHECK(forms[key].at("out_error").get<double>() > 0);  // other arithmetic: not the bytes of simt
    CHECK(forms[key].at("out_error").get<double>() <= 3.2e-2);
    CHECK(forms[key].at("state_error") == 0.0);  // attention keeps no state
  }
  CHECK(out.find("err out ") != std::string::npos);
  CHECK(out.find("TFLOP/s (") != std::string::npos);
  // Each op's clocks under the table (and each row's in the JSON), or why they were not sampled.
  if (out.find("clocks: not sampled (") == std::string::npos) {
    CHECK(out.find("  delta_rule.prefill clocks: SM ") != std::string::npos);
    for (const auto& row : j.at("results")) {
      CHECK(row.at("clocks").at("samples").get<int>() >= 1);  // one at the start of each timed burst at least
      CHECK(row.at("clocks").at("sm_mhz").at("median").get<int>() > 0);
    }
  } else {
    for (const auto& row : j.at("results")) CHECK(row.at("clocks").is_null());
  }
}

TEST_CASE("kernels: the projections' GEMM forms against cublas on a decode shape", "[gpu][cli][gemm]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_kernels_gemm.json";
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "kernels", "--shape", "4b-decode-b8",
                                         "--op",           "gemm",    "--reps",  "1",
                                         "--launches",     "4",       "--json",  json.string()};
  std::string out;
  const nlohmann::json j = run_for_json(argv, json, &out);
  std::map<std::string, int> forms;  // "op arm" -> rows
  for (const auto& row : j.at("results")) {
    const std::string op = row.at("op"), arm = row.at("arm");
    ++forms[op + " " + arm];
    CHECK(row.at("setting") == true);
    CHECK(row.at("within_tolerance") == true);
    CHECK(row.at("out_error").get<double>() <= 1e-2);
    CHECK(row.at("tflops").get<double>() > 0);
    if (arm == "cublas") CHECK(row.at("out_error") == 0.0);  // the reference row
  }
  for (const char* op :
       {"gdn.in_proj", "gdn.out_proj", "attn.qkv_proj", "attn.o_proj", "mlp.gate_up", "mlp.down", "lm_head"}) {
    for (const char* arm : {"cublas", "lt", "skinny"}) {
      CAPTURE(op, arm);
      CHECK(forms[std::string(op) + " " + arm] == 1);
    }
  }
}

TEST_CASE("kernels: the prefill projections through cublas and wgmma, gate_up with its SwiGLU both ways",
          "[gpu][cli][gemm][gemm_wgmma]") {
  const std::filesystem::path json = std::filesystem::temp_directory_path() / "sg_test_kernels_gemm_prefill.json";
  const std::vector<std::string> argv = {SG_STEPGRAPH_BIN, "kernels", "--shape", "tiny-prefill-3x100",
                                         "--op",           "gemm",    "--reps",  "1",
                                         "--launches",     "4",       "--json",  json.string()};
  std::string out;
  const nlohmann::json j = run_for_json(argv, json, &out);
  std::map<std::string, int> forms;  // "op arm" -> rows
  for (const auto& row : j.at("results")) {
    const std::string op = row.at("op"), arm = row.at("arm");
    ++forms[op + " " + arm];
    CHECK(row.at("within_tolerance") == true);
    CHECK(row.at("out_error").get<double>() <= 1e-2);
  }
  for (const char* op : {"gdn.in_proj", "gdn.out_proj", "attn.qkv_proj", "attn.o_proj", "mlp.gate_up", "mlp.down"}) {
    CAPTURE(op);
    CHECK(forms[std::string(op) + " cublas"] == 1);
    CHECK(forms[std::string(op) + " lt"] == 0);  // decode forms only: these run at every token (300)
    CHECK(forms[std::string(op) + " skinny"] == 0);
  }
  // The LM head at one row a sequence (3), as the step runs it: the decode forms, no wgmma.
  CHECK(forms["lm_head cublas"] == 1);
  CHECK(forms["lm_head lt"] == 1);
  CHECK(forms["lm_head wgmma"] == 0);
  const sg::DeviceLimits d = sg::DeviceLimits::current();
  CHECK(forms["lm_head skinny"] == (d.cc_major == 9 && d.cc_minor == 0 ? 1 : 0));
  if (sg::sm90a_device(d.cc_major, d.cc_minor)) {
    for (const char* op : {"gdn.in_proj", "gdn.out_proj", "attn.qkv_proj", "attn.o_proj", "mlp.gate_up", "mlp.down"}) {
      CAPTURE(op);
      CHECK(forms[std::string(op) + " wgmma"] == 1);
    }
    CHECK(forms["mlp.gate_up+swiglu cublas+swiglu"] == 1);
    CHECK(forms["mlp.gate_up+swiglu wgmma+swiglu"] == 1);
  } else {
    CHECK(out.find("wgmma: not run") != std::string::npos);
  }
}
