// The bad-input suite, part 2: the `stepgraph` program run as a subprocess (tests/support/child.h:
// a time limit, an 8 GiB address-space limit, CUDA_VISIBLE_DEVICES="" so that every machine takes
// the no-GPU path, STEPGRAPH_ARMS and VT_* cleared) with bad options, bad checkpoints and a bad
// environment. Each case asserts the exit code, fragments of the output, that no source location
// appears (user-facing errors are plain sentences) and that the output is printable. Part 1 (files
// read in-process): test_bad_input.cpp.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/bad_input.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;

size_t bad_input_file_cases();  // test_bad_input.cpp

namespace {

constexpr int kCli11Invalid = 105;  // CLI11's exit code for an option value its check refuses

void huge_head_checkpoint(const fs::path& d) {
  copy_checkpoint(d);
  write_text(d / "config.json", huge_head_config().dump());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<CliCase> option_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::vector<std::string> args, int code, std::vector<std::string> fragments) {
    return add_cli_case(v, std::move(name), std::move(args), code, std::move(fragments));
  };
  add("generate --max-new past the limit", {"generate", "--cpu", "--max-new", "1000000"}, kCli11Invalid,
      {"--max-new", "262144"});
  add("generate --max-new negative", {"generate", "--cpu", "--max-new", "-1"}, -1, {"--max-new"});
  add("generate --seed -1", {"generate", "--cpu", "--seed", "-1"}, -1, {"--seed"});
  add("generate --seed past 2^64", {"generate", "--cpu", "--seed", "18446744073709551616"}, -1, {"--seed"});
  // CLI11 reads integers with strtoll base 0: "010" would be seed 8 and "0100" 64 tokens.
  add("generate --seed 010 (a leading zero)", {"generate", "--cpu", "--seed", "010"}, kCli11Invalid,
      {"--seed: '010' is not a plain decimal integer"});
  add("plan --context 0100 (a leading zero)", {"plan", "--preset", "tiny", "--context", "0100"}, kCli11Invalid,
      {"--context: '0100' is not a plain decimal integer"});
  add("plan --max-seqs=8.0", {"plan", "--preset", "tiny", "--max-seqs=8.0"}, kCli11Invalid,
      {"--max-seqs: '8.0' is not a plain decimal integer"});
  add("kernels --shape with an empty entry", {"kernels", "--shape", "4b-decode-b32,,tiny-decode-b1"}, kCli11Invalid,
      {"--shape: '4b-decode-b32,,tiny-decode-b1' has an empty entry in its list"});
  add("kernels --op with a trailing comma", {"kernels", "--op", "postconv,"}, kCli11Invalid,
      {"--op: 'postconv,' has an empty entry in its list"});
  add("kernels --shape with a leading zero", {"kernels", "--shape", "4b-decode-b032"}, 1,
      {"unknown shape '4b-decode-b032'"});
  add("kernels --conv-update-channels 2,0x4", {"kernels", "--conv-update-channels", "2,0x4"}, kCli11Invalid,
      {"--conv-update-channels: '0x4' is not a plain decimal integer"});
  add("generate --tokens with a trailing comma", {"generate", "--cpu", "--tokens", "1,2,"}, 1,
      {"--tokens: empty entry in '1,2,'"});
  add("generate --tokens with an empty entry", {"generate", "--cpu", "--tokens", "1,,2"}, 1,
      {"--tokens: empty entry in '1,,2'"});
  add("generate --tokens blank", {"generate", "--cpu", "--tokens", " "}, 1, {"--tokens: no token ids given"});
  // An empty value is refused by name before parsing (the commands read an empty path as "not
  // given": `--json ""` wrote nothing, `bench --cpu --csv ""` slipped past the CPU path's refusal).
  add("generate --tokens empty", {"generate", "--cpu", "--tokens", ""}, kCli11Invalid, {"--tokens: an empty value"});
  add("plan --json empty", {"plan", "--preset", "tiny", "--json", ""}, kCli11Invalid, {"--json: an empty value"});
  add("plan --json= empty", {"plan", "--preset", "tiny", "--json="}, kCli11Invalid, {"--json: an empty value"});
  add("bench --cpu --csv empty", {"bench", "--cpu", "--csv", ""}, kCli11Invalid, {"--csv: an empty value"});
  add("bench --cpu --lt-choices empty", {"bench", "--cpu", "--lt-choices", ""}, kCli11Invalid,
      {"--lt-choices: an empty value"});
  add("serve --trace empty", {"serve", "--cpu", "--preset", "tiny", "--trace", ""}, kCli11Invalid,
      {"--trace: an empty value"});
  // Length-only prompts that can never fit the context: each rejected, without its ids made (the
  // 4000 x 2^24 ids, 268 GB, were made before the first step and ran out of memory).
  add("serve: a trace of huge prompts is rejected, not made",
      {"serve", "--cpu", "--preset", "tiny", "--context", "64", "--trace", "{dir}/huge.jsonl"}, 1,
      {"every request was rejected (4000 of 4000", "request 3999 (line 4000): prompt of 16777216 tokens",
       "more than the context of 64 tokens per slot"})
      ->setup = [](const fs::path& d) {
    std::string lines;
    for (int i = 0; i < 4000; ++i) lines += "{\"prompt_len\": 16777216, \"max_new\": 1}\n";
    write_text(d / "huge.jsonl", lines);
  };
  add("generate --arm empty", {"generate", "--cpu", "--arm", ""}, kCli11Invalid, {"--arm: an empty value"});
  // ... except selection A, where empty is the defaults: ab goes on to look for a GPU.
  add("ab --a empty (the defaults)", {"ab", "--a", "", "--b", "gemm=mixed"}, 1, {"needs a GPU"});
  add("ab --b empty (A against itself)", {"ab", "--b", ""}, 1, {"needs a GPU"});
  add("an empty value with --help (the help)", {"plan", "--json", "", "--help"}, 0, {"--device-gib"});
  // Every value of an option that takes several is checked, not only the first.
  add("kernels --conv-update-channels 2 010", {"kernels", "--conv-update-channels", "2", "010"}, kCli11Invalid,
      {"--conv-update-channels: '010' is not a plain decimal integer"});
  add("kernels --shape with an empty second value", {"kernels", "--shape", "4b-decode-b1", ""}, kCli11Invalid,
      {"--shape: an empty value"});
  add("generate past the preset's context length", {"generate", "--cpu", "--preset", "tiny", "--max-new", "262144"}, 1,
      {"take 262147 positions, past the 262144 of model 'tiny' (the preset's context length)"});
  add("generate --tokens not a number", {"generate", "--cpu", "--tokens", "1,two"}, 1,
      {"--tokens: 'two' is not a token id"});
  add("generate --tokens negative", {"generate", "--cpu", "--tokens", "-5"}, 1, {"--tokens: '-5' is not a token id"});
  add("generate --tokens with an escape sequence", {"generate", "--cpu", "--tokens", "1,\x1b[2J"}, 1,
      {"--tokens: '\\x1b[2J' is not a token id"});
  add("generate --tokens outside the vocabulary", {"generate", "--cpu", "--tokens", "1,256"}, 1,
      {"--tokens: token id 256 is outside the vocabulary [0, 256) of model 'tiny'"});
  add("generate --tokens past int64", {"generate", "--cpu", "--tokens", "99999999999999999999"}, 1,
      {"is not a token id"});
  add("generate --arm with an unknown op", {"generate", "--arm", "nope=x"}, 1, {"unknown op \"nope\"", "conv.fwd"});
  add("generate --cpu --arm", {"generate", "--cpu", "--arm", "conv.fwd=k4"}, 1,
      {"generate: kernel arms were selected (conv.fwd (--arm))", "cannot apply"});
  add("generate --cpu --attn-prefill", {"generate", "--cpu", "--attn-prefill", "mma"}, 1, {"--attn-prefill"});
  add("generate --cpu --attn-decode", {"generate", "--cpu", "--attn-decode", "simt"}, 1,
      {"--attn-decode", "cannot apply"});
  add("generate --cpu --gemm", {"generate", "--cpu", "--gemm", "cublas"}, 1, {"--gemm", "cannot apply"});
  add("generate --cpu --pdl", {"generate", "--cpu", "--pdl", "off"}, 1,
      {"generate: --pdl chooses GPU kernels and how they launch", "so it cannot apply. Drop it,"});
  add("generate --cpu --mix-round and --gemm", {"generate", "--cpu", "--mix-round", "gemm", "--gemm", "lt"}, 1,
      {"generate: --gemm, --mix-round choose GPU kernels", "so they cannot apply. Drop them,"});
  add("generate --swiglu with an unknown value", {"generate", "--cpu", "--swiglu", "fused"}, kCli11Invalid,
      {"--swiglu"});
  add("generate --cpu --check-nodes", {"generate", "--cpu", "--check-nodes"}, 1,
      {"--check-nodes and --fault-after check the GPU step's kernel nodes", "cannot apply"});
  add("generate --cpu --tp 3 (tiny: 2 key heads)", {"generate", "--cpu", "--tp", "3"}, 1,
      {"tensor parallel over 3 ranks", "GDN key heads 2"});
  add("generate --tp 2 without --cpu", {"generate", "--tp", "2"}, 1, {"--tp 2", "add --cpu"});
  add("generate --cpu --tp 0", {"generate", "--cpu", "--tp", "0"}, kCli11Invalid, {"--tp"});
  auto* tp2 = add("generate --cpu --tp 2 gives the tokens of --tp 1",
                  {"generate", "--cpu", "--tp", "2", "--tokens", "5,17,200,3", "--max-new", "8"}, 0,
                  {"tensor parallel over 2 CPU ranks", "generated (8 tokens"});
  tp2->after = [](const fs::path& d, const std::string& out) {
    const ChildResult one =
        run_program({SG_STEPGRAPH_BIN, "generate", "--cpu", "--tokens", "5,17,200,3", "--max-new", "8"}, {}, {}, d);
    REQUIRE(one.code == 0);
    auto tokens = [](const std::string& text) {  // the list after "generated (8 tokens, greedy, X s): "
      const size_t at = text.find("generated (");
      const size_t colon = text.find("): ", at);
      return at == std::string::npos || colon == std::string::npos
                 ? std::string()
                 : text.substr(colon + 3, text.find('\n', colon) - colon - 3);
    };
    INFO("--tp 1: " << one.out);
    CHECK_FALSE(tokens(out).empty());
    CHECK(tokens(out) == tokens(one.out));
  };
  add("plan --tp 3 (4B: 16 key heads)", {"plan", "--tp", "3"}, 1, {"tensor parallel over 3 ranks", "GDN key heads 16"});
  add("plan --max-seqs 0", {"plan", "--max-seqs", "0"}, kCli11Invalid, {"--max-seqs"});
  add("plan --weights a missing folder", {"plan", "--weights", "no/such/folder"}, kCli11Invalid, {"--weights"});
  add("plan --preset unknown", {"plan", "--preset", "nope"}, 1, {"unknown preset 'nope'"});
  add("plan --slots below --max-seqs", {"plan", "--slots", "4"}, 1,
      {"--slots 4 is fewer than --max-seqs 32", "no step could hold more than 4 rows"});
  add("plan --prefill-tokens past --max-seqs x --context",
      {"plan", "--max-seqs", "2", "--context", "100", "--prefill-tokens", "201"}, 1,
      {"--prefill-tokens 201 is more than --max-seqs x --context = 2 x 100 = 200"});
  add("plan --json - (not standard output)", {"plan", "--json", "-"}, 1,
      {"--json -: the results go to a file, not to standard output"});
  add("plan --json into a missing folder", {"plan", "--json", "no/such/folder/p.json"}, 1,
      {"--json no/such/folder/p.json: cannot write this file"});
  auto* plan27 = add(
      "plan of the 27B at 64 slots of 32768 tokens over two ranks (runs)",
      {"plan", "--preset", "qwen3.5-27b", "--slots", "64", "--context", "32768", "--tp", "2", "--json", "{dir}/p.json"},
      0, {"rank 1 of 2: 99.0 GiB", "fits in 139.8 GiB on every rank"});
  plan27->after = [](const fs::path& d, const std::string&) {
    const json j = json::parse(read_file(d / "p.json"));
    REQUIRE(j.at("ranks").size() == 2);
    CHECK(j.at("fits") == true);
    CHECK(j.at("ranks")[0].at("categories").at("kv cache") == j.at("ranks")[1].at("categories").at("kv cache"));
  };
  add("plan of the 27B at 64 slots of 32768 tokens on one GPU (runs)",
      {"plan", "--preset", "qwen3.5-27b", "--slots", "64", "--context", "32768"}, 0,
      {"total: 194.7 GiB", "does not fit in 139.8 GiB"});
  add("generate --fault-after without a GPU", {"generate", "--fault-after", "1:conv.update"}, 1,
      {"--check-nodes and --fault-after", "cannot apply"});
  add("generate --fault-after without a colon", {"generate", "--fault-after", "conv.update"}, 1,
      {"--fault-after: 'conv.update' is not LAYER:OP"});
  add("generate --fault-after below layer -1", {"generate", "--fault-after=-2:conv.update"}, 1,
      {"--fault-after: '-2:conv.update' is not LAYER:OP"});
  add("generate --fault-after without an op", {"generate", "--fault-after", "1:"}, 1,
      {"--fault-after: '1:' is not LAYER:OP"});
  add("generate --fault-after with a layer that is not a number", {"generate", "--fault-after", "x1:swiglu"}, 1,
      {"--fault-after: 'x1:swiglu' is not LAYER:OP"});
  add("generate --preset unknown", {"generate", "--cpu", "--preset", "nope"}, 1,
      {"unknown preset 'nope' (valid: qwen3.5-4b"});
  add("generate --cpu of the 27B preset does not fit", {"generate", "--cpu", "--preset", "qwen3.5-27b"}, 1,
      {"the CPU reference model of 'qwen3.5-27b' needs", "of host memory", "is available"});
  add("kernels --op unknown", {"kernels", "--op", "nope"}, kCli11Invalid,
      {"--op", "conv.update", "postconv", "gdn.decode"});
  add("kernels --shape with an overflowing number", {"kernels", "--shape", "4b-decode-b99999999999"}, 1,
      {"unknown shape '4b-decode-b99999999999'"});
  add("kernels without a GPU", {"kernels", "--shape", "tiny-decode-b4"}, 1, {"needs a GPU", "was found"});
  add("kernels --op with the settings' ops, without a GPU",  // the ops parse: the refusal is the GPU's
      {"kernels", "--op", "delta_rule.prefill,attention.prefill,gemm"}, 1, {"needs a GPU"});
  add("bench --cpu --csv", {"bench", "--cpu", "--csv", "x.csv"}, 1, {"--csv (per-node statistics"});
  add("bench --cpu --trace", {"bench", "--cpu", "--trace", "t.json"}, 1,
      {"--trace (the trace is of graph replays on a GPU)"});
  add("bench --cpu --dot", {"bench", "--cpu", "--dot", "g.dot"}, 1,
      {"--dot (the graphs are CUDA graphs captured on a GPU)"});
  add("bench --cpu --attn-decode", {"bench", "--cpu", "--attn-decode", "mma"}, 1, {"--attn-decode (chooses a GPU"});
  add("bench --cpu --gemm", {"bench", "--cpu", "--gemm", "skinny"}, 1, {"--gemm (chooses a GPU projection kernel)"});
  add("bench --cpu --marginal", {"bench", "--cpu", "--marginal"}, 1, {"--marginal (disables nodes"});
  add("bench --cpu --lt-choices", {"bench", "--cpu", "--lt-choices", "lt.json"}, 1,
      {"--lt-choices (cuBLASLt's algorithm choices on a GPU)"});
  add("bench --lt-choices into a missing folder", {"bench", "--lt-choices", "no/such/folder/lt.json"}, 1,
      {"--lt-choices no/such/folder/lt.json: cannot write this file"});
  add("bench --cpu --pdl", {"bench", "--cpu", "--pdl", "on"}, 1, {"--pdl (how GPU kernels are launched)"});
  add("bench --cpu --swiglu", {"bench", "--cpu", "--swiglu", "gemm"}, 1,
      {"--swiglu (where GPU kernels compute the MLP activation)"});
  add("bench --swiglu unknown", {"bench", "--cpu", "--swiglu", "fused"}, kCli11Invalid, {"--swiglu"});
  add("ab --b with an unknown swiglu", {"ab", "--b", "swiglu=fused"}, 1,
      {"unknown value \"fused\" for swiglu", "auto, gemm, kernel"});
  add("bench --cpu --gated-norm", {"bench", "--cpu", "--gated-norm", "delta"}, 1,
      {"--gated-norm (where GPU kernels compute the GDN gated norm)"});
  add("bench --gated-norm unknown", {"bench", "--cpu", "--gated-norm", "fused"}, kCli11Invalid, {"--gated-norm"});
  add("ab --b with an unknown gated-norm", {"ab", "--b", "gated-norm=gemm"}, 1,
      {"unknown value \"gemm\" for gated-norm", "auto, delta, kernel"});
  add("bench --cpu --mix-round", {"bench", "--cpu", "--mix-round", "norm"}, 1,
      {"--mix-round (where the GPU step rounds its projections' output)"});
  add("bench --mix-round unknown", {"bench", "--cpu", "--mix-round", "f32"}, kCli11Invalid, {"--mix-round"});
  add("ab --b with an unknown mix-round", {"ab", "--b", "mix-round=kernel"}, 1,
      {"unknown value \"kernel\" for mix-round", "auto, gemm, norm, partials, residual"});
  add("bench --ssm-state unknown", {"bench", "--cpu", "--ssm-state", "f16"}, kCli11Invalid, {"--ssm-state"});
  add("ab --b with an unknown ssm-state", {"ab", "--b", "ssm-state=f16"}, 1,
      {"unknown value \"f16\" for ssm-state", "f32, bf16"});
  add("bench --cpu --workload gdn-layer --ssm-state bf16",
      {"bench", "--cpu", "--workload", "gdn-layer", "--ssm-state", "bf16"}, 1,
      {"--ssm-state bf16 (the gdn-layer workload keeps an f32 state; use --workload model)"});
  add("generate --chunked with --delta-prefill", {"generate", "--cpu", "--chunked", "--delta-prefill", "scan"}, 108,
      {"--chunked excludes --delta-prefill"});
  add("plan --device-gib nan", {"plan", "--device-gib", "nan"}, kCli11Invalid,
      {"--device-gib: 'nan' is not a decimal number"});
  add("inspect --key bogus without a GPU (the key first)", {"inspect", "--key", "bogus"}, 1,
      {"--key bogus: expected decode, decode-N (1 <= N <= --max-seqs 32) or prefill"});
  add("soak --prompt + --period past the cache's limit without a GPU", {"soak", "--prompt", "262144", "--period", "1"},
      1, {"--prompt 262144 and --period 1: the cache holds --prompt + --period tokens per slot, at most 262144"});
  add("kernels --shape given twice", {"kernels", "--shape", "4b-decode-b32,4b-decode-b32"}, 1,
      {"--shape: '4b-decode-b32' is given twice"});
  add("kernels --op given twice", {"kernels", "--op", "gemm,postconv,gemm"}, 1, {"--op: 'gemm' is given twice"});
  add("plan --delta-prefill wgmma-t with f32", {"plan", "--dtype", "f32", "--delta-prefill", "wgmma-t"}, 1,
      {"(wgmma-t) is built for bf16 activations with Dk = Dv = 128, not f32", "use --delta-prefill mma or chunked"});
  add("plan --delta-prefill wgmma-t on the tiny preset", {"plan", "--preset", "tiny", "--delta-prefill", "wgmma-t"}, 1,
      {"not bf16 with Dk=32 Dv=32"});
  add("plan --weights with --preset", {"plan", "--weights", base_fixture().string(), "--preset", "tiny"}, 108,
      {"excludes"});
  add("generate --weights with --seed (runs, says the seed is not used)",
      {"generate", "--cpu", "--weights", base_fixture().string(), "--seed", "7", "--max-new", "1"}, 0,
      {"note: --seed 7 ignored: --weights gives the weights"});
  // Refused on either path, before the device is probed.
  add("bench --workload gdn-layer --phase prefill", {"bench", "--workload", "gdn-layer", "--phase", "prefill"}, 1,
      {"bench --workload gdn-layer cannot apply:", "--phase prefill (the gdn-layer workload is decode only)"});
  add("bench --workload gdn-layer with model settings",
      {"bench", "--workload", "gdn-layer", "--context", "99", "--gemm", "cublas", "--marginal"}, 1,
      {"--context (the gdn-layer workload reads no KV cache)", "--gemm (a setting of the whole model's step",
       "--marginal (per op family"});
  add("bench --workload gdn-layer --max-seqs 4096 on the CPU (capped, runs)",
      {"bench", "--cpu", "--workload", "gdn-layer", "--max-seqs", "4096"}, 0,
      {"(--max-seqs 4096 capped at 32 on the CPU reference)"});
  add("generate --ssm-state unknown", {"generate", "--cpu", "--ssm-state", "f16"}, kCli11Invalid, {"--ssm-state"});
  add("bench --cpu --arms tune", {"bench", "--cpu", "--arms", "tune"}, 1,
      {"--arms tune (times the GPU kernels' arms)"});
  add("bench --arms unknown", {"bench", "--cpu", "--arms", "best"}, kCli11Invalid, {"--arms"});
  add("ab --b with an unknown arms mode", {"ab", "--b", "arms=best"}, 1,
      {"unknown value \"best\" for arms", "fixed, tune"});
  add("bench --gemm unknown", {"bench", "--cpu", "--gemm", "cutlass"}, kCli11Invalid, {"--gemm"});
  add("inspect without a GPU", {"inspect"}, 1, {"inspect times captured CUDA graphs", "none to run"});
  add("inspect --by unknown", {"inspect", "--by", "kernel"}, kCli11Invalid, {"--by"});
  add("inspect --format unknown", {"inspect", "--format", "xml"}, kCli11Invalid, {"--format"});
  add("capture without a GPU", {"capture", "--phase", "decode"}, 1,
      {"capture: capturing CUDA graphs needs a GPU", "was found"});
  add("capture --phase unknown", {"capture", "--phase", "mixed"}, kCli11Invalid, {"--phase"});
  add("capture --lt-choices into a missing folder", {"capture", "--lt-choices", "no/such/folder/lt.json"}, 1,
      {"--lt-choices no/such/folder/lt.json: cannot write this file"});
  add("capture --json into a missing folder", {"capture", "--json", "no/such/folder/c.json"}, 1,
      {"--json no/such/folder/c.json: cannot write this file"});
  add("ab without a GPU", {"ab", "--a", "postconv=fast", "--b", "postconv=token_tile"}, 1,
      {"ab: timing CUDA graphs needs a GPU", "was found"});
  add("ab without --b", {"ab"}, -1, {"--b is required"});
  add("ab --b with an unknown key", {"ab", "--b", "postcnv=fast"}, 1,
      {"--b \"postcnv=fast\": unknown key \"postcnv\" (valid keys: conv.fwd",
       "gemm, pdl, swiglu, gated-norm, mix-round, ssm-state, arms)"});
  add("ab --a with an unknown arm", {"ab", "--a", "conv.fwd=k5", "--b", "conv.fwd=k4"}, 1,
      {"unknown arm \"k5\" for conv.fwd (valid arms of conv.fwd: tiled, register, k4, k4x2)"});
  add("ab --b with an unknown setting value", {"ab", "--b", "attn-decode=wmma"}, 1,
      {"unknown value \"wmma\" for attn-decode (valid values of attn-decode: auto, simt, mma)"});
  add("ab --reps below 3", {"ab", "--b", "gemm=skinny", "--reps", "2"}, kCli11Invalid, {"--reps"});
  add("ab --phase both", {"ab", "--b", "gemm=skinny", "--phase", "both"}, kCli11Invalid, {"--phase"});
  add("ab --svg into a missing folder", {"ab", "--b", "gemm=skinny", "--svg", "no/such/folder/ab.svg"}, 1,
      {"--svg no/such/folder/ab.svg: cannot write this file"});
  add("ab --lt-choices into a missing folder", {"ab", "--b", "gemm=lt", "--lt-choices", "no/such/folder/lt.json"}, 1,
      {"--lt-choices no/such/folder/lt.json: cannot write this file"});
  add("bench --node-replays 0 --csv", {"bench", "--node-replays", "0", "--csv", "x.csv"}, 1,
      {"bench --node-replays 0 turns per-node timing off, so it cannot go with:", "--csv (per-node statistics)"});
  add("bench --node-replays 0 --trace on the gdn-layer workload",
      {"bench", "--workload", "gdn-layer", "--node-replays", "0", "--trace", "t.json"}, 1,
      {"--workload gdn-layer (its result is the per-node table)", "--trace (the timed replays"});
  add("bench --node-replays negative", {"bench", "--node-replays", "-1"}, kCli11Invalid, {"--node-replays"});
  add("bench --cpu --fault-after", {"bench", "--cpu", "--fault-after", "1:conv.update"}, 1,
      {"bench: this run is the CPU reference model",
       "--fault-after (a fault drill in the GPU step's captured graphs)"});
  add("bench --fault-after on the gdn-layer workload, past its one layer",
      {"bench", "--workload", "gdn-layer", "--fault-after", "1:conv.update"}, 1,
      {"--fault-after 1:conv.update: the gdn-layer workload's step is one GDN layer, labelled layer 0"});
  add("bench --fault-after on the gdn-layer workload's CPU path",
      {"bench", "--workload", "gdn-layer", "--cpu", "--fault-after", "0:conv.update@3"}, 1,
      {"bench: this run is the CPU reference model",
       "--fault-after (a fault drill in the GPU step's captured graphs)"});
  add("bench --fault-after with --arms tune", {"bench", "--arms", "tune", "--fault-after", "1:conv.update"}, 1,
      {"bench --fault-after drills the captured graphs, so it cannot go with:", "--arms tune (the arms are timed"});
  add("bench --fault-after with run 0", {"bench", "--fault-after", "1:conv.update@0"}, 1,
      {"--fault-after: '1:conv.update@0' is not LAYER:OP or LAYER:OP@RUN", "@RUN, from 1, faults on that run"});
  add("bench --fault-after with an empty run", {"bench", "--fault-after", "1:conv.update@"}, 1,
      {"--fault-after: '1:conv.update@' is not LAYER:OP or LAYER:OP@RUN"});
  add("bench --fault-after with a run that is not a number", {"bench", "--fault-after", "1:conv.update@5x"}, 1,
      {"--fault-after: '1:conv.update@5x' is not LAYER:OP or LAYER:OP@RUN"});
  add("bench --fault-after with a negative run", {"bench", "--fault-after", "1:conv.update@-3"}, 1,
      {"--fault-after: '1:conv.update@-3' is not LAYER:OP or LAYER:OP@RUN"});
  add("bench --fault-after with a run past 2^64", {"bench", "--fault-after", "1:conv.update@18446744073709551616"}, 1,
      {"is not LAYER:OP or LAYER:OP@RUN"});
  add("soak --fault-after with a run but no op", {"soak", "--preset", "tiny", "--fault-after", "1:@20"}, 1,
      {"--fault-after: '1:@20' is not LAYER:OP or LAYER:OP@RUN"});
  add("ab --fault-after with two runs", {"ab", "--b", "conv.update=grid", "--fault-after", "4:conv.update@2@3"}, 1,
      {"--fault-after: '4:conv.update@2@3' is not LAYER:OP or LAYER:OP@RUN"});
  add("generate --fault-after with a run, without a GPU", {"generate", "--fault-after", "1:conv.update@7"}, 1,
      {"--check-nodes and --fault-after", "cannot apply"});
  add("bench --fault-after without a colon", {"bench", "--fault-after", "conv.update"}, 1,
      {"--fault-after: 'conv.update' is not LAYER:OP"});
  add("inspect --fault-after without an op", {"inspect", "--fault-after", "1:"}, 1,
      {"--fault-after: '1:' is not LAYER:OP"});
  add("inspect --fault-after with --arms tune", {"inspect", "--arms", "tune", "--fault-after", "4:conv.update"}, 1,
      {"inspect --fault-after drills the captured graphs, so it cannot go with:", "--arms tune"});
  add("inspect --fault-after without a GPU", {"inspect", "--fault-after", "4:conv.update"}, 1,
      {"inspect times captured CUDA graphs", "none to run"});
  add("soak --fault-after with a layer that is not a number",
      {"soak", "--preset", "tiny", "--fault-after", "x1:swiglu"}, 1, {"--fault-after: 'x1:swiglu' is not LAYER:OP"});
  add("soak --fault-after without a GPU", {"soak", "--preset", "tiny", "--fault-after", "4:conv.update"}, 1,
      {"soak replays captured CUDA graphs, so it needs a GPU"});
  add("soak --fault-after past the model's layers", {"soak", "--preset", "tiny", "--fault-after", "6:conv.update"}, 1,
      {"--fault-after 6:conv.update: layer 6 is outside model 'tiny' (layers 0 to 5, or -1 for the nodes outside"});
  add("bench --fault-after past the model's layers", {"bench", "--preset", "tiny", "--fault-after", "9:swiglu"}, 1,
      {"--fault-after 9:swiglu: layer 9 is outside model 'tiny' (layers 0 to 5"});
  add("inspect --fault-after past the model's layers", {"inspect", "--fault-after", "32:conv.update"}, 1,
      {"--fault-after 32:conv.update: layer 32 is outside model 'qwen3.5-4b' (layers 0 to 31"});
  add("ab --fault-after without a colon", {"ab", "--b", "conv.update=grid", "--fault-after", "conv.update"}, 1,
      {"--fault-after: 'conv.update' is not LAYER:OP"});
  add("ab --fault-after past the model's layers",
      {"ab", "--preset", "tiny", "--b", "conv.update=grid", "--fault-after", "6:conv.update"}, 1,
      {"--fault-after 6:conv.update: layer 6 is outside model 'tiny'"});
  add("ab --fault-after with --arms tune",
      {"ab", "--arms", "tune", "--b", "postconv=fast", "--fault-after", "4:swiglu"}, 1,
      {"ab --fault-after drills both sides' captured graphs, so it cannot go with:",
       "--arms tune (the arms are timed on graphs of their own at capture"});
  add("ab --fault-after with a side's arms=tune", {"ab", "--b", "arms=tune", "--fault-after", "4:conv.update"}, 1,
      {"ab --fault-after drills both sides' captured graphs", "--b arms=tune (the arms are timed"});
  add("ab --fault-after without a GPU", {"ab", "--b", "conv.update=grid", "--fault-after", "4:conv.update"}, 1,
      {"ab: timing CUDA graphs needs a GPU", "was found"});
  add("bench --cpu --replays", {"bench", "--cpu", "--replays", "5"}, 1, {"--replays (a count of CUDA graph replays)"});
  add("bench --cpu --preset 27b", {"bench", "--cpu", "--preset", "qwen3.5-27b"}, 1,
      {"--preset qwen3.5-27b (the CPU reference runs the 'tiny' preset only)"});
  add("bench --cpu --arm", {"bench", "--cpu", "--arm", "postconv=split"}, 1,
      {"bench: kernel arms were selected (postconv (--arm))"});
  add("bench --cpu --json into a missing folder", {"bench", "--cpu", "--json", "no/such/folder/r.json"}, 1,
      {"--json no/such/folder/r.json: cannot write this file: No such file or directory"})
      ->absent = {"prefill", "decode step"};  // refused before the run
  add("bench --cpu --json into a folder", {"bench", "--cpu", "--json", "{dir}"}, 1, {"cannot write this file"});
  add("bench --max-seqs 0", {"bench", "--cpu", "--max-seqs", "0"}, kCli11Invalid, {"--max-seqs"});
  auto* json_ok = add("bench --cpu --json writes the CPU run", {"bench", "--cpu", "--json", "r.json"}, 0,
                      {"wrote r.json", "delta-rule prefill: scan (the CPU reference's form for --delta-prefill auto)"});
  json_ok->seconds = 120;
  json_ok->after = [](const fs::path& d, const std::string&) {
    const json j = json::parse(read_file(d / "r.json"));
    CHECK(j.at("implementation") == "cpu-reference");
    CHECK(j.at("workload") == "model");
    CHECK(j.at("delta_prefill") == "scan");
  };
  auto* wgmma_cpu = add("bench --cpu --delta-prefill wgmma runs the reference's chunked form",
                        {"bench", "--cpu", "--delta-prefill", "wgmma", "--json", "w.json"}, 0,
                        {"delta-rule prefill: chunked (the CPU reference's form for --delta-prefill wgmma)"});
  wgmma_cpu->seconds = 120;
  wgmma_cpu->after = [](const fs::path& d, const std::string&) {
    CHECK(json::parse(read_file(d / "w.json")).at("delta_prefill") == "chunked");
  };
  add("bench --history with --phase decode", {"bench", "--history", "64", "--phase", "decode"}, 1,
      {"bench --history applies to the prefill step; --phase decode runs none"});
  add("bench --history on the gdn-layer workload", {"bench", "--history", "64", "--workload", "gdn-layer"}, 1,
      {"bench --history applies to the whole model's prefill step; --workload gdn-layer runs none"});
  add("bench --history negative", {"bench", "--cpu", "--history", "-1"}, kCli11Invalid, {"--history"});
  auto* hist_cpu = add("bench --cpu --history prefills the history first, capped at 64",
                       {"bench", "--cpu", "--history", "100", "--json", "h.json"}, 0,
                       {"prefill 8 x 64 tokens after 64 of history: "});
  hist_cpu->seconds = 120;
  hist_cpu->after = [](const fs::path& d, const std::string&) {
    const json j = json::parse(read_file(d / "h.json"));
    CHECK(j.at("history") == 64);
    CHECK(j.at("context") == 64);
  };
  add("plan --delta-prefill wgmma-t counts its chunk records", {"plan", "--delta-prefill", "wgmma-t"}, 0,
      {"gdn.delta_workspace", "343.15 MB"});
  // auto resolves to wgmma-t on the plan's device (an H200) for the bf16 4B: the same records; the
  // one-kernel form and f32 steps have none.
  add("plan (auto) counts wgmma-t's chunk records", {"plan"}, 0, {"gdn.delta_workspace", "343.15 MB"});
  add("plan --delta-prefill wgmma has no chunk records", {"plan", "--delta-prefill", "wgmma"}, 0, {"total: 14.6 GiB"})
      ->absent = {"gdn.delta_workspace"};
  add("plan --dtype f32 has no chunk records", {"plan", "--dtype", "f32"}, 0, {"fits in 139.8 GiB"})->absent = {
      "gdn.delta_workspace"};
  add("plan --delta-prefill nope", {"plan", "--delta-prefill", "nope"}, kCli11Invalid, {"--delta-prefill"});
  auto* no_gpu = add("bench without a GPU says so", {"bench", "--workload", "gdn-layer", "--max-seqs", "2"}, 0,
                     {"stepgraph bench: no ", "was found"});
  no_gpu->seconds = 120;
  add("drift without --b", {"drift"}, -1, {"--b is required"});
  add("drift --b with an unknown key", {"drift", "--b", "postcnv=fast"}, 1, {"unknown key \"postcnv\""});
  add("drift --b arms=tune", {"drift", "--b", "arms=tune"}, 1,
      {"drift: arms=tune times arms at capture; the arms are byte-identical, so compare settings"});
  add("drift: --prompt + --max-new past the preset's positions (before the GPU)",
      {"drift", "--b", "ssm-state=bf16", "--prompt", "65536", "--max-new", "262144"}, 1,
      {"drift: the 65536-token prompt and --max-new 262144 take 327680 positions, past the 262144 of model "
       "'qwen3.5-4b'"});
  add("drift --json into a missing folder", {"drift", "--b", "ssm-state=bf16", "--json", "no/such/folder/d.json"}, 1,
      {"--json no/such/folder/d.json: cannot write this file"});
  add("drift without a GPU", {"drift", "--preset", "tiny", "--b", "ssm-state=bf16"}, 1,
      {"drift runs the model's captured graphs, so it needs a GPU"});
  add("drift --max-new under the default window (runs on: one row)",
      {"drift", "--b", "ssm-state=bf16", "--max-new", "100"}, 1,
      {"drift runs the model's captured graphs, so it needs a GPU"});
  add("drift --window past --max-new", {"drift", "--b", "ssm-state=bf16", "--max-new", "100", "--window", "256"}, 1,
      {"drift: --window 256 is more than the 100 positions compared (--max-new)"});
  add("drift --max-new 0", {"drift", "--b", "ssm-state=bf16", "--max-new", "0"}, kCli11Invalid, {"--max-new"});
  auto* gen_bf16 = add("generate --cpu with a bf16 SSM state",
                       {"generate", "--cpu", "--ssm-state", "bf16", "--max-new", "3"}, 0, {"GDN state bf16"});
  gen_bf16->seconds = 120;
  add("an unknown command", {"nope"}, 109, {"stepgraph: unknown command 'nope' (the commands: bench, kernels,"});
  add("no command at all", {}, -1, {"A subcommand is required"});
  return v;
}

std::vector<CliCase> checkpoint_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::function<void(const fs::path&)> setup, std::vector<std::string> fragments) {
    CliCase c;
    c.name = std::move(name);
    c.setup = std::move(setup);
    c.args = {"generate", "--cpu", "--weights", "{dir}", "--max-new", "2"};
    c.exit_code = 1;
    c.fragments = std::move(fragments);
    v.push_back(std::move(c));
  };
  add("generate: config.json is a FIFO",
      [](const fs::path& d) {
        copy_checkpoint(d);
        make_fifo(d / "config.json");
      },
      {"{dir}/config.json: not a regular file (it is a FIFO)"});
  add("generate: model.safetensors is a FIFO",
      [](const fs::path& d) {
        copy_checkpoint(d);
        make_fifo(d / "model.safetensors");
      },
      {"{dir}/model.safetensors: not a regular file (it is a FIFO)"});
  add("generate: config.json links to /dev/zero",
      [](const fs::path& d) {
        copy_checkpoint(d);
        link_to(d / "config.json", "/dev/zero");
      },
      {"(it is a character device)"});
  add("generate: config.json nested 100000 deep",
      [](const fs::path& d) {
        copy_checkpoint(d);
        write_text(d / "config.json", nested_arrays(100000));
      },
      {"{dir}/config.json: the file nests deeper than 64 levels"});
  add("generate: huge GDN head sizes are refused before allocating", huge_head_checkpoint,
      {"needs", "of host memory", "SSM state", "is available"});
  add("generate: a NaN weight",
      [](const fs::path& d) { poisoned_checkpoint(d, "model.layers.1.linear_attn.A_log", std::nanf(""), 1); },
      {"model.layers.1.linear_attn.A_log (in {dir}/model.safetensors) has 1 non-finite value"});
  // The fixture's checkpoint with config.json's max_position_embeddings set to n (the run's prompt
  // is 3 tokens, --max-new 2: 5 positions).
  auto max_positions = [](int n) {
    return [n](const fs::path& d) {
      copy_checkpoint(d);
      nlohmann::json c = base_config();
      c["max_position_embeddings"] = n;
      write_text(d / "config.json", c.dump());
    };
  };
  add("generate: prompt + --max-new past max_position_embeddings", max_positions(4),
      {"generate: the 3-token prompt and --max-new 2 take 5 positions, past the 4 of model",
       "(max_position_embeddings in {dir}/config.json)"});
  add("generate: prompt + --max-new at max_position_embeddings (runs)", max_positions(5), {"generated (2 tokens"});
  v.back().exit_code = 0;
  add("generate: max_position_embeddings not positive", max_positions(0),
      {"{dir}/config.json: key 'max_position_embeddings': must be positive, got 0"});
  add("generate: a tensor named twice",
      [](const fs::path& d) {
        copy_checkpoint(d);
        const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
        write_bytes(d / "model.safetensors", image("{\"model.norm.weight\":" + e + ",\"model.norm.weight\":" + e + "}",
                                                   std::vector<uint8_t>(4)));
      },
      {"tensor 'model.norm.weight' appears twice"});
  return v;
}

std::vector<CliCase> env_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::vector<std::string> args, EnvChanges env, int code,
                 std::vector<std::string> fragments) {
    CliCase c;
    c.name = std::move(name);
    c.args = std::move(args);
    c.env = std::move(env);
    c.exit_code = code;
    c.fragments = std::move(fragments);
    v.push_back(std::move(c));
    return &v.back();
  };
  add("arms: STEPGRAPH_ARMS=garbage", {"arms"}, {{"STEPGRAPH_ARMS", "garbage"}}, 1,
      {"STEPGRAPH_ARMS item \"garbage\" is not op=arm", "valid ops"});
  add("arms: an escape sequence in STEPGRAPH_ARMS", {"arms"}, {{"STEPGRAPH_ARMS", "conv.fwd=\x1b[2J"}}, 1,
      {"unknown arm \"\\x1b[2J\""});
  add("arms: VT_CONV_REG=yes warns", {"arms"}, {{"VT_CONV_REG", "yes"}}, 0,
      {"warning: VT_CONV_REG=\"yes\" is not 0 or 1"});
  add("arms: a misspelt VT_* flag warns", {"arms"}, {{"VT_CONV_REGG", "1"}}, 0,
      {"warning: VT_CONV_REGG is set but is not a flag stepgraph reads, so it changes nothing (the flags: "
       "VT_CONV_REG, "});
  add("generate --cpu: a misspelt VT_* flag warns and runs", {"generate", "--cpu", "--max-new", "2"},
      {{"VT_GDN_POSTCONV_SPLITT", "1"}}, 0, {"warning: VT_GDN_POSTCONV_SPLITT is set but is not a flag"});
  add("arms: non-ASCII bytes in a VT_* flag", {"arms"}, {{"VT_CONV_UPDATE_FAST", "\xc3\xa9\xc2\x9b"}}, 0,
      {"warning: VT_CONV_UPDATE_FAST=\"\\xc3\\xa9\\xc2\\x9b\" is not 0 or 1"});
  add("arms: a 100 kB STEPGRAPH_ARMS", {"arms"}, {{"STEPGRAPH_ARMS", std::string(100'000, 'x')}}, 1,
      {"STEPGRAPH_ARMS item \"xxxx", "(cut; 100000 bytes)"})
      ->after = [](const fs::path&, const std::string& out) { CHECK(out.size() < 2000); };
  add("generate: STEPGRAPH_ARMS=garbage", {"generate", "--cpu"}, {{"STEPGRAPH_ARMS", "garbage"}}, 1,
      {"STEPGRAPH_ARMS item \"garbage\""});
  add("generate: STEPGRAPH_ARMS with an unknown arm", {"generate"}, {{"STEPGRAPH_ARMS", "conv.fwd=nope"}}, 1,
      {"unknown arm \"nope\" for conv.fwd", "valid arms of conv.fwd"});
  add("generate --cpu: STEPGRAPH_ARMS cannot apply", {"generate", "--cpu"}, {{"STEPGRAPH_ARMS", "conv.update=grid"}}, 1,
      {"conv.update (STEPGRAPH_ARMS)", "cannot apply"});
  add("generate --cpu: a VT_* flag cannot apply", {"generate", "--cpu"}, {{"VT_GDN_POSTCONV_SPLIT", "1"}}, 1,
      {"postconv (VT_GDN_POSTCONV_SPLIT=1)", "cannot apply"});
  add("bench --cpu: STEPGRAPH_ARMS=garbage", {"bench", "--cpu"}, {{"STEPGRAPH_ARMS", "garbage"}}, 1,
      {"STEPGRAPH_ARMS item \"garbage\""});
  add("bench --cpu: STEPGRAPH_ARMS cannot apply", {"bench", "--cpu"}, {{"STEPGRAPH_ARMS", "conv.fwd=k4"}}, 1,
      {"bench: kernel arms were selected (conv.fwd (STEPGRAPH_ARMS))"});
  add("bench --cpu: VT_CONV_REG=0 cannot apply", {"bench", "--cpu"}, {{"VT_CONV_REG", "0"}}, 1,
      {"conv.fwd (VT_CONV_REG=0)"});
  add("bench --cpu: an empty STEPGRAPH_ARMS selects nothing",
      {"bench", "--cpu", "--workload", "gdn-layer", "--max-seqs", "2"}, {{"STEPGRAPH_ARMS", ""}}, 0, {"--cpu given"})
      ->seconds = 120;
  return v;
}

void run_table(const std::vector<CliCase>& cases) {
  for (const CliCase& c : cases) check_cli_case(c);
}

}  // namespace

TEST_CASE("bad input: command-line options", "[bad_input][cli]") { run_table(option_cases()); }

TEST_CASE("bad input: checkpoints given to generate", "[bad_input][cli]") { run_table(checkpoint_cases()); }

TEST_CASE("bad input: environment variables", "[bad_input][cli]") { run_table(env_cases()); }

TEST_CASE("bad input: the suite has at least 60 cases", "[bad_input]") {
  const size_t files = bad_input_file_cases();
  const size_t cli = option_cases().size() + checkpoint_cases().size();
  const size_t env = env_cases().size();
  INFO("files " << files << ", command line " << cli << ", environment " << env);
  CHECK(files + cli + env >= 60);
}
