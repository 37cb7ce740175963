// `stepgraph soak` run as a subprocess without a GPU (tests/support/bad_input.h: a time limit,
// CUDA_VISIBLE_DEVICES="", no arms in the environment): the refusal without a GPU, and option
// errors found before it (values out of range, an unknown preset or arm, an unwritable --json,
// an option soak does not have).
#include <string>
#include <vector>

#include "tests/support/bad_input.h"

using namespace sg;
using namespace sg::test;

namespace {

constexpr int kCli11Invalid = 105;

std::vector<CliCase> soak_cases() {
  std::vector<CliCase> v;
  auto add = [&](std::string name, std::vector<std::string> args, int code, std::vector<std::string> fragments) {
    return add_cli_case(v, std::move(name), std::move(args), code, std::move(fragments));
  };
  add("soak without a GPU", {"soak", "--preset", "tiny", "--replays", "10"}, 1,
      {"soak replays captured CUDA graphs, so it needs a GPU", "was found"});
  add("soak without a GPU and with every option",
      {"soak",
       "--preset",
       "tiny",
       "--max-seqs",
       "4",
       "--replays",
       "100",
       "--period",
       "10",
       "--check-every",
       "5",
       "--device-tolerance-mib",
       "0",
       "--host-tolerance-mib",
       "1",
       "--dtype",
       "f32",
       "--seed",
       "3",
       "--attn-decode",
       "simt",
       "--gemm",
       "cublas",
       "--prompt",
       "6",
       "--delta-prefill",
       "scan",
       "--attn-prefill",
       "simt",
       "--json",
       "{dir}/soak.json"},
      1, {"needs a GPU"});
  add("soak --replays 0", {"soak", "--replays", "0"}, kCli11Invalid, {"--replays"});
  add("soak --period 0", {"soak", "--period", "0"}, kCli11Invalid, {"--period"});
  add("soak --period past the context length", {"soak", "--period", "262145"}, kCli11Invalid, {"--period"});
  add("soak --check-every 0", {"soak", "--check-every", "0"}, kCli11Invalid, {"--check-every"});
  add("soak --max-seqs 0", {"soak", "--max-seqs", "0"}, kCli11Invalid, {"--max-seqs"});
  add("soak --device-tolerance-mib -1", {"soak", "--device-tolerance-mib", "-1"}, -1, {"--device-tolerance-mib"});
  add("soak --seed -1", {"soak", "--seed", "-1"}, -1, {"--seed"});
  add("soak --preset unknown", {"soak", "--preset", "nope"}, 1, {"unknown preset 'nope'"});
  add("soak --arm with an unknown op", {"soak", "--preset", "tiny", "--arm", "nope=x"}, 1, {"unknown op \"nope\""});
  add("soak --json into a missing folder", {"soak", "--preset", "tiny", "--json", "{dir}/missing/soak.json"}, 1,
      {"--json {dir}/missing/soak.json: cannot write this file"});
  add("soak --cpu (the soak has no CPU path)", {"soak", "--cpu"}, -1, {"--cpu"});
  add("soak --prompt -1", {"soak", "--prompt", "-1"}, -1, {"--prompt"});
  add("soak --prompt past the context length", {"soak", "--prompt", "262145"}, kCli11Invalid, {"--prompt"});
  add("soak --delta-prefill without --prompt", {"soak", "--preset", "tiny", "--delta-prefill", "scan"}, 1,
      {"--delta-prefill and --attn-prefill choose the kernels of the prompt's prefill", "give --prompt N"});
  add("soak --attn-prefill without --prompt", {"soak", "--preset", "tiny", "--attn-prefill", "auto"}, 1,
      {"this soak has none"});
  add("soak --gemm wgmma-large (every setting of bench is accepted)",
      {"soak", "--preset", "tiny", "--gemm", "wgmma-large"}, 1, {"needs a GPU"});
  add("soak with bench's other step settings",
      {"soak", "--preset", "tiny", "--pdl", "off", "--swiglu", "kernel", "--gated-norm", "kernel", "--mix-round",
       "gemm"},
      1, {"needs a GPU"});
  add("soak --pdl with an unknown value", {"soak", "--pdl", "maybe"}, kCli11Invalid, {"--pdl"});
  add("soak --swiglu with an unknown value", {"soak", "--swiglu", "fused"}, kCli11Invalid, {"--swiglu"});
  add("soak --gated-norm with an unknown value", {"soak", "--gated-norm", "both"}, kCli11Invalid, {"--gated-norm"});
  add("soak --mix-round with an unknown value", {"soak", "--mix-round", "late"}, kCli11Invalid, {"--mix-round"});
  add("soak --gemm with an unknown value", {"soak", "--gemm", "wgmma-small"}, kCli11Invalid, {"--gemm"});
  add("soak --attn-prefill with an unknown value", {"soak", "--attn-prefill", "wmma"}, kCli11Invalid,
      {"--attn-prefill"});
  return v;
}

}  // namespace

TEST_CASE("soak: the command without a GPU and its option errors", "[soak][cli]") {
  for (const CliCase& c : soak_cases()) check_cli_case(c);
}
