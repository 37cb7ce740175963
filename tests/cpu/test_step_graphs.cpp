// CPU tests of the step-graph runner (graphs/step_graphs.h) with fake device hooks: key order,
// warm-up then capture largest first, manifests and names, replay or eager with fallback counting,
// progress lines, and the errors for keys that have no graph. No CUDA call is made.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "graphs/manifest.h"
#include "graphs/staged_upload.h"
#include "graphs/step_graphs.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"

using namespace sg;

namespace {

// A runner over fake hooks that writes every event into `log`.
struct FakeRunner {
  std::vector<std::string> log;
  std::vector<std::string> progress;
  StepGraphs graphs;

  explicit FakeRunner(bool show_progress = false) : graphs(device(show_progress), launch()) {}

  GraphDevice device(bool show_progress) {
    GraphDevice d;
    d.sync = [this] { log.push_back("sync"); };
    d.capture = [this](const std::string& name, const std::string& arms,
                       const std::function<void(NodeRecorder&)>& body) {
      log.push_back("capture " + name);
      NodeRecorder rec;
      body(rec);
      CapturedStep c;
      c.manifest.graph = name;
      c.manifest.arms = arms;
      return c;
    };
    d.replay = [this](const CapturedGraph&) { log.push_back("replay"); };
    if (show_progress) {
      d.progress = [this](int done, int total, const std::string& name) {
        progress.push_back(capture_progress_line(done, total, name));
      };
    }
    return d;
  }

  StepGraphs::LaunchFn launch() {
    return [this](const GraphKey& key, NodeRecorder* rec) {
      log.push_back(std::string(rec ? "record " : "eager ") + describe(key));
    };
  }

  void capture(const std::vector<GraphKey>& keys) {
    graphs.capture_all(
        keys, [this](const GraphKey& key) { log.push_back("warmup " + describe(key)); },
        [](const GraphKey& key) { return "g " + describe(key); }, "arms: test");
  }
};

}  // namespace

TEST_CASE("graph keys order by kind, then tokens, and describe themselves", "[graphs][runner]") {
  CHECK(GraphKey::decode(32) < GraphKey::prefill(16));
  CHECK(GraphKey::prefill(1024) < GraphKey::mixed(16));
  CHECK(GraphKey::decode(4) < GraphKey::decode(8));
  CHECK(GraphKey::decode(8) == GraphKey{GraphKind::decode, 8});
  CHECK(GraphKey::decode(8) != GraphKey::prefill(8));
  CHECK(describe(GraphKey::decode(32)) == "decode 32");
  CHECK(describe(GraphKey::prefill(1024)) == "prefill 1024");
  CHECK(describe(GraphKey::mixed(48)) == "mixed 48");
}

TEST_CASE("capture_all warms every key up in ascending order, then captures largest first", "[graphs][runner]") {
  FakeRunner r;
  // Any order, a repeat: the runner sorts and drops it.
  r.capture(
      {GraphKey::prefill(32), GraphKey::decode(2), GraphKey::decode(1), GraphKey::prefill(16), GraphKey::decode(2)});
  const std::vector<std::string> want = {"warmup decode 1",      "eager decode 1",     "warmup decode 2",
                                         "eager decode 2",       "warmup prefill 16",  "eager prefill 16",
                                         "warmup prefill 32",    "eager prefill 32",   "sync",
                                         "capture g prefill 32", "record prefill 32",  "capture g prefill 16",
                                         "record prefill 16",    "capture g decode 2", "record decode 2",
                                         "capture g decode 1",   "record decode 1"};
  CHECK(r.log == want);
  CHECK(r.graphs.captured() ==
        std::vector<GraphKey>{GraphKey::decode(1), GraphKey::decode(2), GraphKey::prefill(16), GraphKey::prefill(32)});
  CHECK(r.graphs.has(GraphKey::prefill(16)));
  CHECK_FALSE(r.graphs.has(GraphKey::decode(16)));
  CHECK(r.graphs.manifest(GraphKey::decode(2)).graph == "g decode 2");
  CHECK(r.graphs.manifest(GraphKey::prefill(32)).arms == "arms: test");
  CHECK(r.graphs.eager_fallbacks() == 0);  // warm-up launches are not fallbacks
}

TEST_CASE("the mixed kind is captured before prefill and decode, each largest first", "[graphs][runner]") {
  FakeRunner r;
  r.capture({GraphKey::decode(8), GraphKey::mixed(64), GraphKey::prefill(64), GraphKey::mixed(128)});
  std::vector<std::string> captures;
  for (const auto& line : r.log) {
    if (line.rfind("capture ", 0) == 0) captures.push_back(line.substr(8));
  }
  CHECK(captures == std::vector<std::string>{"g mixed 128", "g mixed 64", "g prefill 64", "g decode 8"});
}

TEST_CASE("run replays a captured key and launches the rest eagerly, counting fallbacks", "[graphs][runner]") {
  FakeRunner r;
  r.capture({GraphKey::decode(1), GraphKey::decode(4)});
  r.log.clear();
  CHECK(r.graphs.run(GraphKey::decode(4), RunMode::graph));
  CHECK_FALSE(r.graphs.run(GraphKey::decode(4), RunMode::eager));  // eager by choice: not a fallback
  CHECK(r.graphs.eager_fallbacks() == 0);
  CHECK_FALSE(r.graphs.run(GraphKey::decode(5), RunMode::graph));   // no graph for 5: a fallback
  CHECK_FALSE(r.graphs.run(GraphKey::prefill(4), RunMode::graph));  // the kind is part of the key
  CHECK_FALSE(r.graphs.run(GraphKey::decode(5), RunMode::eager));
  CHECK(r.graphs.eager_fallbacks() == 2);
  CHECK(r.log ==
        std::vector<std::string>{"replay", "eager decode 4", "eager decode 5", "eager prefill 4", "eager decode 5"});
  r.graphs.replay(GraphKey::decode(1));
  CHECK(r.log.back() == "replay");
}

TEST_CASE("capturing again replaces a key's graph and manifest", "[graphs][runner]") {
  FakeRunner r;
  r.capture({GraphKey::decode(2)});
  r.graphs.capture_all(
      {GraphKey::decode(2), GraphKey::decode(8)}, nullptr, [](const GraphKey& key) { return "again " + describe(key); },
      "arms: 2");
  CHECK(r.graphs.manifest(GraphKey::decode(2)).graph == "again decode 2");
  CHECK(r.graphs.manifest(GraphKey::decode(2)).arms == "arms: 2");
  CHECK(r.graphs.captured().size() == 2);
}

TEST_CASE("a key without a graph is an error naming it and the captured keys", "[graphs][runner]") {
  FakeRunner r;
  CHECK_THROWS_WITH(r.graphs.manifest(GraphKey::decode(3)), "no graph captured for decode 3 (captured: none)");
  r.capture({GraphKey::decode(1), GraphKey::decode(2), GraphKey::prefill(16)});
  CHECK_THROWS_WITH(r.graphs.graph(GraphKey::prefill(48)),
                    "no graph captured for prefill 48 (captured: decode 1, decode 2, prefill 16)");
  CHECK_THROWS_WITH(r.graphs.replay(GraphKey::decode(16)),
                    "no graph captured for decode 16 (captured: decode 1, decode 2, prefill 16)");
  CHECK_THROWS_WITH(r.graphs.manifest(GraphKey::mixed(16)),
                    "no graph captured for mixed 16 (captured: decode 1, decode 2, prefill 16)");
}

TEST_CASE("progress: one line per captured graph, in capture order", "[graphs][runner]") {
  CHECK(capture_progress_line(0, 4, "x") == "capturing graphs [--------------------] 0/4 x");
  CHECK(capture_progress_line(1, 4, "model-decode b=8") ==
        "capturing graphs [#####---------------] 1/4 model-decode b=8");
  CHECK(capture_progress_line(4, 4, "y") == "capturing graphs [####################] 4/4 y");
  CHECK(capture_progress_line(3, 12, "z") == "capturing graphs [#####---------------]  3/12 z");
  CHECK(capture_progress_line(0, 0, "") == "capturing graphs [####################] 0/0 ");
  CHECK(progress_line("marginal costs", 2, 19, "mlp.gate_up") ==
        "marginal costs [##------------------]  2/19 mlp.gate_up");

  FakeRunner r(/*show_progress=*/true);
  r.capture({GraphKey::decode(1), GraphKey::decode(2), GraphKey::decode(4)});
  CHECK(r.progress == std::vector<std::string>{"capturing graphs [######--------------] 1/3 g decode 4",
                                               "capturing graphs [#############-------] 2/3 g decode 2",
                                               "capturing graphs [####################] 3/3 g decode 1"});
}

TEST_CASE("a stop hook ends the capture loop before its next key, and what was captured stays", "[graphs][runner]") {
  FakeRunner r;
  int asked = 0;
  r.graphs.set_stop([&] { return ++asked > 2; });  // two captures, then stop (a Ctrl-C, say)
  r.capture({GraphKey::decode(1), GraphKey::decode(2), GraphKey::decode(4), GraphKey::decode(8)});
  CHECK(asked == 3);
  CHECK(r.graphs.captured() == std::vector<GraphKey>{GraphKey::decode(4), GraphKey::decode(8)});  // largest first
  CHECK(std::count(r.log.begin(), r.log.end(), "capture g decode 2") == 0);
  CHECK(r.graphs.run(GraphKey::decode(2), RunMode::graph) == false);  // the rest run eagerly
  CHECK(r.graphs.eager_fallbacks() == 1);
  r.graphs.set_stop({});
  r.capture({GraphKey::decode(1), GraphKey::decode(2)});
  CHECK(r.graphs.captured().size() == 4);
}

TEST_CASE("the stream's hooks show progress only when stderr is a terminal", "[graphs][runner]") {
  // Building the hooks makes no CUDA call; ctest runs tests with stderr on a pipe.
  const GraphDevice d = GraphDevice::on_stream(nullptr);
  CHECK(static_cast<bool>(d.sync));
  CHECK(static_cast<bool>(d.capture));
  CHECK(static_cast<bool>(d.replay));
  CHECK(static_cast<bool>(d.progress) == (isatty(fileno(stderr)) != 0));
}

TEST_CASE("the runner needs every device hook and a launch callback", "[graphs][runner]") {
  const GraphDevice full = FakeRunner{}.device(false);
  const StepGraphs::LaunchFn launch = [](const GraphKey&, NodeRecorder*) {};
  const std::string msg = "step graphs: the device hooks and the launch callback must all be set";
  CHECK_NOTHROW(StepGraphs(full, launch));  // every hook and the callback: accepted
  GraphDevice d = full;                     // each hook missing alone
  d.sync = nullptr;
  test::expect_error([&] { StepGraphs g(d, launch); }, {msg});
  d = full;
  d.capture = nullptr;
  test::expect_error([&] { StepGraphs g(d, launch); }, {msg});
  d = full;
  d.replay = nullptr;
  test::expect_error([&] { StepGraphs g(d, launch); }, {msg});
  test::expect_error([&] { StepGraphs g(full, StepGraphs::LaunchFn{}); }, {msg});  // no callback
  test::expect_error([&] { StepGraphs g(GraphDevice{}, launch); }, {msg});         // no hooks
}

TEST_CASE("a staged upload larger than its buffers is an error before any copy", "[graphs][runner]") {
  StagedUpload none;  // no buffers (and so no CUDA call)
  CHECK(none.capacity() == 0);
  bool filled = false;
  CHECK_THROWS_AS(none.upload(nullptr, nullptr, 16, [&](std::span<std::byte>) { filled = true; }), Error);
  CHECK_FALSE(filled);
}

TEST_CASE("NodeCheckScope makes its checks this thread's and restores the ones before", "[graphs][faults]") {
  CHECK(node_checks() == nullptr);  // none outside a scope: launched() checks nothing more
  NodeChecks outer, inner;
  outer.sync_each = true;
  {
    const NodeCheckScope a(&outer);
    CHECK(node_checks() == &outer);
    {
      const NodeCheckScope b(&inner);
      CHECK(node_checks() == &inner);
      const NodeCheckScope none(nullptr);  // a step without checks inside another's scope
      CHECK(node_checks() == nullptr);
    }
    CHECK(node_checks() == &outer);
    NodeChecks* other = &inner;
    std::thread([&] { other = node_checks(); }).join();
    CHECK(other == nullptr);  // another thread has its own (none)
  }
  CHECK(node_checks() == nullptr);
}
