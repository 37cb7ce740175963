// CPU tests of serving traces (models/serve_trace.h): the JSON Lines reader (good lines, and every
// bad line an error naming the file, the line and the field), the synthetic generator and its
// presets, prompt filling, the token hash; and the serving metrics (models/serve_metrics.h):
// percentiles, op families by arm, the progress line.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/serve_metrics.h"
#include "models/serve_trace.h"
#include "tests/support/catch.h"
#include "tests/support/temp_dir.h"

using namespace sg;

namespace {

// The message of the sg::Error that `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The error message of parsing `text` as trace "t.jsonl" ("" when it parses).
std::string trace_error(const std::string& text) {
  return error_of([&] { parse_trace_jsonl(text, "t.jsonl"); });
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("serve trace: JSON Lines with prompts, lengths, defaults and blank lines", "[serve][trace]") {
  const auto t = parse_trace_jsonl(
      "{\"prompt\": [1, 2, 3], \"max_new\": 4, \"arrival_ms\": 2.5}\n"
      "\n"
      "   \r\n"
      "{\"max_new\": 1, \"prompt_len\": 7}\n"
      "{\"prompt_len\": 2, \"max_new\": 3, \"arrival_ms\": 0}",  // no final newline
      "t.jsonl");
  REQUIRE(t.size() == 3);
  CHECK(t[0].prompt == std::vector<int32_t>{1, 2, 3});
  CHECK(t[0].prompt_len == 3);
  CHECK(t[0].max_new == 4);
  CHECK(t[0].arrival_ms == 2.5);
  CHECK(t[0].line == 1);
  CHECK(t[1].prompt.empty());
  CHECK(t[1].prompt_len == 7);
  CHECK(t[1].arrival_ms == 0);
  CHECK(t[1].line == 4);
  CHECK(t[2].line == 5);
}

TEST_CASE("serve trace: every bad line is an error naming the line and the field", "[serve][trace]") {
  const std::string ok = "{\"prompt_len\": 4, \"max_new\": 2}\n";
  struct Case {
    std::string text;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {ok + "{\"prompt_len\": 4, \"max_new\": \n", {"t.jsonl:2:", "not valid JSON"}},
      {ok + "[1, 2]\n", {"t.jsonl:2:", "expected one JSON object per line"}},
      {"{\"prompt_len\": 4}\n", {"t.jsonl:1: field 'max_new': missing"}},
      {"{\"max_new\": 4}\n", {"t.jsonl:1: field 'prompt': missing"}},
      {"{\"prompt_len\": 4, \"max_new\": -2}\n", {"t.jsonl:1: field 'max_new': -2 is negative (must be >= 1)"}},
      {"{\"prompt_len\": 0, \"max_new\": 2}\n", {"t.jsonl:1: field 'prompt_len': 0 is too small (must be >= 1)"}},
      {"{\"prompt_len\": -4, \"max_new\": 2}\n", {"field 'prompt_len': -4 is negative"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"arrival_ms\": -1}\n", {"t.jsonl:1: field 'arrival_ms': -1 is negative"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"arrival_ms\": \"soon\"}\n", {"field 'arrival_ms': must be a number"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"arrival_ms\": 1e300}\n",
       {"t.jsonl:1: field 'arrival_ms': 1e+300 is later than a day (86400000 ms"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"arrival_ms\": 86400000.5}\n",
       {"field 'arrival_ms': 86400000.5 is later"}},
      {"{\"prompt_len\": 4, \"max_new\": 1.5}\n", {"field 'max_new': must be an integer, got 1.5"}},
      {"{\"prompt_len\": 99999999999, \"max_new\": 1}\n", {"field 'prompt_len': 99999999999 is larger than 16777216"}},
      // Past 64 bits the parser holds a float: refused for its size, not as "not an integer".
      {"{\"prompt_len\": 4, \"max_new\": 99999999999999999999}\n", {"field 'max_new': 1e+20 is larger than 16777216"}},
      {"{\"prompt_len\": -99999999999999999999, \"max_new\": 1}\n", {"field 'prompt_len': -1e+20 is negative"}},
      {"{\"prompt\": [1, -3], \"max_new\": 1}\n", {"t.jsonl:1: field 'prompt[1]': -3 is negative"}},
      {"{\"prompt\": [], \"max_new\": 1}\n", {"field 'prompt': is empty"}},
      {"{\"prompt\": \"hello\", \"max_new\": 1}\n", {"field 'prompt': must be an array of token ids"}},
      {"{\"prompt\": [1], \"prompt_len\": 1, \"max_new\": 1}\n", {"field 'prompt_len': given together with 'prompt'"}},
      {ok + ok + "{\"prompt_len\": 4, \"max_new\": 2, \"max_tokens\": 9}\n",
       {"t.jsonl:3: unknown field 'max_tokens' (known: prompt, prompt_len, max_new, arrival_ms)"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"max_new\": 3}\n", {"t.jsonl:1:", "'max_new' appears twice"}},
      {"{\"prompt\": [[1]], \"max_new\": 1}\n", {"t.jsonl:1:", "nests deeper than 2 levels"}},
      {"\n  \n", {"t.jsonl: the trace holds no request"}},
      {"{\"prompt_len\": 4, \"max_new\": 2, \"\\u001b[2J\": 1}\n", {"unknown field '\\x1b[2J'"}},
  };
  for (const Case& c : cases) {
    const std::string e = trace_error(c.text);
    INFO("trace: " << c.text << "error: " << e);
    for (const auto& p : c.parts) CHECK(contains(e, p));
  }
}

TEST_CASE("serve trace: files are read through the regular-file guard", "[serve][trace]") {
  test::TempDir dir("sg_trace");
  const auto good = dir.path / "good.jsonl";
  std::ofstream(good) << "{\"prompt_len\": 3, \"max_new\": 2}\n";
  CHECK(read_trace_jsonl(good).size() == 1);
  auto message = [](const std::filesystem::path& p) { return error_of([&] { read_trace_jsonl(p); }); };
  CHECK(contains(message(dir.path / "missing.jsonl"), "missing.jsonl: cannot open"));
  const auto fifo = dir.path / "fifo.jsonl";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK(contains(message(fifo), "not a regular file (it is a FIFO)"));
  CHECK(contains(message(dir.path), "not a regular file"));
  const auto bad = dir.path / "bad.jsonl";
  std::ofstream(bad) << "{\"prompt_len\": 3, \"max_new\": 2}\n{\"prompt_len\": 3}\n";
  CHECK(contains(message(bad), "bad.jsonl:2: field 'max_new': missing"));
}

TEST_CASE("serve trace: synthetic traces and presets", "[serve][trace]") {
  SyntheticTraceOptions o;
  o.requests = 200;
  o.seed = 5;
  o.prompt_min = 3;
  o.prompt_max = 40;
  o.new_min = 2;
  o.new_max = 9;
  o.mean_gap_ms = 10;
  const auto a = synthetic_trace(o), b = synthetic_trace(o);
  REQUIRE(a.size() == 200);
  bool varied = false;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].prompt_len == b[i].prompt_len);
    CHECK(a[i].max_new == b[i].max_new);
    CHECK(a[i].arrival_ms == b[i].arrival_ms);
    CHECK((a[i].prompt_len >= 3 && a[i].prompt_len <= 40));
    CHECK((a[i].max_new >= 2 && a[i].max_new <= 9));
    if (i > 0) CHECK(a[i].arrival_ms >= a[i - 1].arrival_ms);
    varied = varied || a[i].prompt_len != a[0].prompt_len;
  }
  CHECK(varied);
  CHECK(a[0].arrival_ms == 0);
  // A mean gap of 10 ms over 199 gaps: the last arrival near 1990 ms.
  CHECK((a.back().arrival_ms > 1000 && a.back().arrival_ms < 3000));
  o.seed = 6;
  const auto c = synthetic_trace(o);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs = differs || a[i].prompt_len != c[i].prompt_len;
  CHECK(differs);

  const auto c32 = synthetic_trace(trace_preset("serve-c32", 0, 1));
  REQUIRE(c32.size() == 32);
  for (const auto& q : c32) {
    CHECK(q.prompt_len == 1024);
    CHECK(q.max_new == 128);
    CHECK(q.arrival_ms == 0);
  }
  CHECK(synthetic_trace(trace_preset("serve-c32", 5, 1)).size() == 5);
  const auto mixed = synthetic_trace(trace_preset("mixed", 0, 1));
  REQUIRE(mixed.size() == 64);
  for (const auto& q : mixed) CHECK((q.prompt_len >= 16 && q.prompt_len <= 2048 && q.max_new >= 8 && q.max_new <= 256));
  CHECK(mixed.back().arrival_ms > 0);
  CHECK(contains(error_of([] { trace_preset("serve-c64", 0, 1); }),
                 "unknown trace preset 'serve-c64' (valid: serve-c32, mixed)"));
}

TEST_CASE("serve trace: prompts made from the seed on demand, given ids checked against the vocabulary",
          "[serve][trace]") {
  auto t =
      parse_trace_jsonl("{\"prompt_len\": 50, \"max_new\": 1}\n{\"prompt\": [255, 0], \"max_new\": 1}\n", "t.jsonl");
  auto u = t;
  CHECK_THROWS_AS(prompt_tokens(t[0]), Error);  // a length only, not prepared
  prepare_prompts(t, 256, 9);
  prepare_prompts(u, 256, 9);
  CHECK(t[0].prompt.empty());  // keyed, not made
  CHECK(t[0].prompt_vocab == 256);
  const std::vector<int32_t> made = prompt_tokens(t[0]);
  REQUIRE(made.size() == 50);
  CHECK(made == prompt_tokens(u[0]));
  CHECK(made == prompt_tokens(t[0]));  // the same ids each time
  // The stream of (seed, index) before ids were made on demand: the first id of request 0, seed 9.
  uint64_t z = 9 * 0xD1B54A32D192ED03ull + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  CHECK(made[0] == static_cast<int32_t>((z ^ (z >> 31)) % 256));
  int distinct = 0;
  for (int32_t id : made) {
    CHECK((id >= 0 && id < 256));
    distinct += id != made[0];
  }
  CHECK(distinct > 0);
  CHECK(t[1].prompt_vocab == 0);
  CHECK(prompt_tokens(t[1]) == std::vector<int32_t>{255, 0});
  auto v = parse_trace_jsonl("{\"prompt_len\": 50, \"max_new\": 1}\n", "t.jsonl");
  prepare_prompts(v, 256, 10);
  CHECK(prompt_tokens(v[0]) != made);
  auto w =
      parse_trace_jsonl("{\"prompt_len\": 2, \"max_new\": 1}\n{\"prompt\": [3, 300], \"max_new\": 1}\n", "t.jsonl");
  CHECK(contains(error_of([&] { prepare_prompts(w, 256, 1); }),
                 "request 1 (line 2): prompt[1] = 300 is outside the vocabulary [0, 256)"));
}

TEST_CASE("serve metrics: nearest-rank percentiles, op families by arm, token hash, progress line",
          "[serve][metrics]") {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Percentiles p = percentiles(v);
  CHECK(p.count == 100);
  CHECK(p.p50 == 50);
  CHECK(p.p90 == 90);
  CHECK(p.p99 == 99);
  const Percentiles one = percentiles({7.0});
  CHECK((one.p50 == 7 && one.p99 == 7));
  CHECK(percentiles({}).count == 0);
  const Percentiles three = percentiles({3, 1, 2});
  CHECK((three.p50 == 2 && three.p90 == 3 && three.p99 == 3));

  CHECK(serve_op_family("conv.update", "fast") == "conv.update [fast]");
  CHECK(serve_op_family("postconv", "split") == "postconv [split]");
  CHECK(serve_op_family("gdn.decode", "fused") == "gdn.decode [fused]");
  CHECK(serve_op_family("mlp.gate_up", "cublas") == "mlp.gate_up");
  const auto f = family_times({{"conv.update", "fast", 10, 50.0},
                               {"conv.update", "grid", 2, 30.0},
                               {"conv.update", "fast", 10, 70.0},
                               {"mlp.down", "cublas", 4, 400.0},
                               {"mlp.down", "skinny splits=4", 1, 100.0}});
  REQUIRE(f.size() == 3);
  CHECK(f[0].family == "mlp.down");
  CHECK(f[0].calls == 5);
  CHECK(f[0].total_ms == Approx(0.5));
  CHECK(f[0].mean_us() == Approx(100.0));
  CHECK(f[1].family == "conv.update [fast]");
  CHECK(f[1].calls == 20);
  CHECK(f[1].mean_us() == Approx(6.0));
  CHECK(f[2].family == "conv.update [grid]");
  CHECK(contains(format_family_table(f), "conv.update [fast]"));

  CHECK(token_hash({}) == 0xcbf29ce484222325ull);
  const std::vector<int32_t> t1 = {1, 2}, t2 = {2, 1};
  CHECK(token_hash(t1) != token_hash(t2));
  CHECK(serve_progress_line(8, 32, 1500, 2100) == "serve [#####---------------] 8/32 requests, 1500 tokens out, 2.1 s");
  CHECK(serve_progress_line(32, 32, 4096, 0) == "serve [####################] 32/32 requests, 4096 tokens out, 0.0 s");
}
