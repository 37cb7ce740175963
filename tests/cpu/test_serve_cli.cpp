// `stepgraph serve` run as a subprocess without a GPU (tests/support/bad_input.h: a time limit,
// CUDA_VISIBLE_DEVICES="", no arms in the environment): a small CPU reference run with --json,
// options the CPU reference cannot apply refused by name, bad trace files and a request too long
// for --context.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/bad_input.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;

namespace {

constexpr int kCli11Invalid = 105;

std::vector<CliCase> serve_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::vector<std::string> args, int code, std::vector<std::string> fragments) {
    return add_cli_case(v, std::move(name), std::move(args), code, std::move(fragments));
  };
  auto* run = add("serve --cpu --json: a small run of the serve-c32 shape",
                  {"serve", "--cpu", "--requests", "3", "--concurrency", "2", "--prefill-budget", "512", "--json"}, 0,
                  {"\"implementation\": \"cpu-reference\""});
  run->seconds = 300;
  run->after = [](const fs::path&, const std::string& out) {
    const json j = json::parse(out.substr(out.find('{')));
    CHECK(j.at("metrics").at("completed") == 3);
    CHECK(j.at("metrics").at("output_tokens") == 3 * 128);
    CHECK(j.at("metrics").at("steps").contains("prefill 512"));
    CHECK(j.at("metrics").at("steps").contains("decode 2"));
    CHECK(j.at("metrics").at("max_chunks") == 2);
    CHECK(j.at("requests").size() == 3);
    CHECK(j.at("context") == 1024 + 128 - 1);
  };
  auto* reject = add("serve --cpu: a request longer than --context is rejected, the others complete",
                     {"serve", "--cpu", "--trace", "{dir}/t.jsonl", "--context", "32"}, 0,
                     {"requests: 2 completed, 1 rejected, of 3", "rejected: request 1 (line 2): prompt of 40 tokens",
                      "can never run", "time to first token: p50", "scan delta-rule prefill",
                      // said before the caches are allocated: 32 slots x 32 tokens x 2 attention layers
                      // x K and V of 2 heads x 32 f32
                      "host memory: ", "KV cache 1.00 MiB (1048576 bytes)"});
  reject->setup = [](const fs::path& d) {
    write_text(d / "t.jsonl",
               "{\"prompt\": [1, 2, 3], \"max_new\": 4}\n{\"prompt_len\": 40, \"max_new\": 2}\n"
               "{\"prompt_len\": 20, \"max_new\": 5, \"arrival_ms\": 1}\n");
  };
  reject->seconds = 120;
  // Without --context the context is the longest request's: when its memory is refused, the error
  // names that request and --context (16 TiB of KV cache for 1024 slots: past any host).
  add("serve --cpu: a trace whose longest request sets a context too large for the host",
      {"serve", "--cpu", "--trace", "{dir}/t.jsonl", "--concurrency", "1024"}, 1,
      {"of host memory",
       "the context, 16777216 tokens a slot, is what the trace's longest request needs (request 1, "
       "line 2): pass --context to run the others and reject the longer ones"})
      ->setup = [](const fs::path& d) {
    write_text(d / "t.jsonl", "{\"prompt\": [1], \"max_new\": 2}\n{\"prompt_len\": 16777216, \"max_new\": 1}\n");
  };
  add("serve --cpu: every request rejected fails the run, the report still out",
      {"serve", "--cpu", "--requests", "2", "--context", "1"}, 1,
      {"requests: 0 completed, 2 rejected, of 2", "rejected: request 0: prompt of 1024 tokens",
       "serve: every request was rejected (2 of 2"});
  add("serve --cpu --preset qwen3.5-4b", {"serve", "--cpu", "--preset", "qwen3.5-4b"}, 1,
      {"serve: this run is the CPU reference model (--cpu given)",
       "--preset qwen3.5-4b (the CPU reference runs the "
       "'tiny' preset only)"});
  add("serve --cpu --eager --gemm", {"serve", "--cpu", "--eager", "--gemm", "cublas"}, 1,
      {"--eager (runs GPU steps", "--gemm (chooses a GPU projection kernel)"});
  add("serve --cpu with bench's other GPU step settings",
      {"serve", "--cpu", "--pdl", "off", "--swiglu", "kernel", "--gated-norm", "kernel", "--mix-round", "gemm"}, 1,
      {"--pdl (how GPU kernels are launched)", "--swiglu (where GPU kernels compute the MLP activation)",
       "--gated-norm (where GPU kernels compute the GDN gated norm)",
       "--mix-round (where GPU projections round their output)"});
  add("serve --mix-round with an unknown value", {"serve", "--cpu", "--mix-round", "late"}, kCli11Invalid,
      {"--mix-round"});
  add("serve --cpu --no-node-time", {"serve", "--cpu", "--no-node-time"}, 1, {"--no-node-time (graph-node times"});
  add("serve --cpu --arm", {"serve", "--cpu", "--arm", "conv.fwd=k4"}, 1,
      {"serve: kernel arms were selected (conv.fwd (--arm))"});
  add("serve --arm with an unknown op", {"serve", "--cpu", "--arm", "nope=x"}, 1, {"unknown op \"nope\""});
  add("serve --trace-preset unknown", {"serve", "--cpu", "--trace-preset", "serve-c64"}, kCli11Invalid,
      {"--trace-preset"});
  add("serve --trace and --trace-preset", {"serve", "--cpu", "--trace", "x.jsonl", "--trace-preset", "mixed"}, -1,
      {"excludes"});
  add("serve --trace missing", {"serve", "--cpu", "--trace", "{dir}/missing.jsonl"}, 1,
      {"{dir}/missing.jsonl: cannot open"});
  add("serve --trace with --requests", {"serve", "--cpu", "--trace", "{dir}/missing.jsonl", "--requests", "3"}, 1,
      {"--requests sizes a built-in trace"});
  add("serve --concurrency 0", {"serve", "--cpu", "--concurrency", "0"}, kCli11Invalid, {"--concurrency"});
  add("serve --preset unknown", {"serve", "--cpu", "--preset", "nope"}, 1, {"unknown preset 'nope'"});
  auto* fifo = add("serve --trace is a FIFO", {"serve", "--cpu", "--trace", "{dir}/t.jsonl"}, 1,
                   {"{dir}/t.jsonl: not a regular file (it is a FIFO)"});
  fifo->setup = [](const fs::path& d) { make_fifo(d / "t.jsonl"); };
  auto* bad = add("serve --trace with a bad line", {"serve", "--cpu", "--trace", "{dir}/t.jsonl"}, 1,
                  {"{dir}/t.jsonl:2: field 'max_new': -1 is negative (must be >= 1)"});
  bad->setup = [](const fs::path& d) {
    write_text(d / "t.jsonl", "{\"prompt_len\": 4, \"max_new\": 2}\n{\"prompt_len\": 4, \"max_new\": -1}\n");
  };
  auto* vocab = add("serve --trace with a token outside the vocabulary", {"serve", "--cpu", "--trace", "{dir}/t.jsonl"},
                    1, {"request 0 (line 1): prompt[1] = 256 is outside the vocabulary [0, 256)"});
  vocab->setup = [](const fs::path& d) { write_text(d / "t.jsonl", "{\"prompt\": [1, 256], \"max_new\": 2}\n"); };
  // A NUL byte ended the line's JSON, and the request after it was dropped without a word.
  auto* nul = add("serve --trace with a NUL byte inside a line", {"serve", "--cpu", "--trace", "{dir}/t.jsonl"}, 1,
                  {"{dir}/t.jsonl:1", "a NUL byte at byte 31"});
  nul->setup = [](const fs::path& d) {
    write_text(d / "t.jsonl",
               std::string("{\"prompt_len\": 4, \"max_new\": 2}\0{\"prompt_len\": 4, \"max_new\": 2}\n", 64));
  };
  return v;
}

}  // namespace

TEST_CASE("serve: the command on the CPU, its refusals and bad traces", "[serve][cli]") {
  for (const CliCase& c : serve_cases()) check_cli_case(c);
}
