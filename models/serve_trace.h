// serve_trace.h: the requests of a serving run (`stepgraph serve`): each has a prompt (token ids,
// or only a length whose ids are made up from a seed), the number of tokens to generate and an
// arrival time. A trace is built in (a seeded synthetic generator and two presets) or read from a
// JSON Lines file, one request per line:
//   {"prompt": [1, 2, 3], "max_new": 16, "arrival_ms": 0}
//   {"prompt_len": 1024, "max_new": 128, "arrival_ms": 12.5}
// Exactly one of "prompt" (non-empty array of non-negative integer ids) and "prompt_len" (integer
// >= 1); "max_new" (integer >= 1) is required; "arrival_ms" (a number of milliseconds from the start
// of the run, 0 to kMaxTraceArrivalMs: the run waits for it on the wall clock) defaults to 0. Other keys, a line that
// is not one JSON object, a key given twice, nesting deeper than an object holding an array, and more than
// kMaxTraceRequests requests are errors; every error is an sg::Error naming the file, the line and the field. Blank
// lines are skipped. Lines need not be in arrival order (the scheduler admits in arrival order; ties in file order).
// Pure host code.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sg {

inline constexpr int kMaxTraceRequests = 1'000'000;
inline constexpr int kMaxTraceTokens = 1 << 24;           // the most prompt or new tokens of one request
inline constexpr double kMaxTraceArrivalMs = 86'400'000;  // a day: the latest arrival a trace may give

struct ServeRequest {
  std::vector<int32_t> prompt;  // the prompt's token ids as given; empty when only a length was given
  int prompt_len = 0;           // tokens in the prompt (prompt.size() when given)
  int max_new = 0;              // tokens to generate, >= 1 (the first comes from the prefill)
  double arrival_ms = 0;        // from the start of the run
  int line = 0;                 // its line in a JSON Lines file (0 when built in)
  // A length-only prompt after prepare_prompts: its ids are made on demand (prompt_tokens) from a
  // splitmix64 stream starting at prompt_stream, each in [0, prompt_vocab). 0: the ids are given.
  int prompt_vocab = 0;
  uint64_t prompt_stream = 0;
};

// A synthetic trace: `requests` requests, prompt and output lengths uniform in [min, max]
// (inclusive), arrivals a Poisson process with the given mean gap (0: every request arrives at 0).
// Deterministic for a seed (a counter-based splitmix64 stream, no std:: distributions).
struct SyntheticTraceOptions {
  int requests = 32;
  uint64_t seed = 1;
  int prompt_min = 1024, prompt_max = 1024;
  int new_min = 128, new_max = 128;
  double mean_gap_ms = 0;
};
std::vector<ServeRequest> synthetic_trace(const SyntheticTraceOptions& o);

// The built-in traces:
//   serve-c32: 32 requests of 1024 prompt tokens and 128 generated tokens, all arriving at 0.
//   mixed:     64 requests, prompts of 16..2048 tokens, 8..256 generated tokens, Poisson arrivals
//              with a mean gap of 20 ms.
// `requests` > 0 replaces the preset's count. Throws sg::Error for an unknown name (listing them).
std::vector<std::string> trace_preset_names();
SyntheticTraceOptions trace_preset(const std::string& name, int requests, uint64_t seed);

// The JSON Lines trace in `text`; errors start with "<origin>:<line>:".
std::vector<ServeRequest> parse_trace_jsonl(std::string_view text, const std::string& origin);
// The JSON Lines trace in a regular file of at most 64 MiB (engine/files.h).
std::vector<ServeRequest> read_trace_jsonl(const std::filesystem::path& path);

// Readies the prompts for the scheduler: checks every given id against the vocabulary (sg::Error
// naming the request and its line otherwise) and keys every length-only prompt to a splitmix64
// stream of (seed, request index) in [0, vocab), without making its ids: prompt_tokens makes them
// when the request is admitted, so a run holds the ids of the prompts being prefilled only (a
// million requests of 1024 tokens held 4 GB before the first step).
void prepare_prompts(std::vector<ServeRequest>& requests, int vocab, uint64_t seed);
// A request's prompt ids: as given, or made from its stream (prepare_prompts first; sg::Error for
// a length-only prompt that was not prepared).
std::vector<int32_t> prompt_tokens(const ServeRequest& q);

// FNV-1a (64-bit) over the tokens' little-endian bytes: the token hash of a request's output.
uint64_t token_hash(std::span<const int32_t> tokens, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace sg
