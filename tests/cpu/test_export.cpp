// CPU tests of the exports: CSV of node statistics, the Chrome trace of replays, the DOT drawing.
#include <nlohmann/json.hpp>

#include "graphs/export.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {
Manifest two_nodes() {
  Manifest m;
  m.graph = "gdn-decode b=4";
  m.arms = "conv.update=fast";
  for (int i = 0; i < 2; ++i) {
    ManifestNode n;
    n.index = i;
    n.cupti_id = 10 + static_cast<uint64_t>(i);
    n.label = {0, i == 0 ? "conv.update" : "postconv", i == 0 ? "fast" : "token,tile", 1e6};
    n.kernel = i == 0 ? "void sg::(anonymous namespace)::conv_update_fast_kernel(sg::ConvUpdateParams)" : "k\"q";
    n.grid = {64, 4, 1};
    n.block = {128, 1, 1};
    n.blocks_per_sm = i == 0 ? 4 : 0;
    n.waves = grid_waves(n.grid, n.blocks_per_sm, 132);
    m.nodes.push_back(n);
  }
  m.edges = {{0, 1}};
  return m;
}
}  // namespace

TEST_CASE("CSV export has a header and one quoted-where-needed row per node", "[graphs][export]") {
  Manifest m = two_nodes();
  std::vector<KernelRecord> recs = {{1, 10, 0, 2000, "a"}, {1, 11, 3000, 4000, "b"}};
  auto st = aggregate(m, recs);
  auto csv = to_csv(st);
  CHECK(csv.rfind("node,layer,op,arm,kernel,grid,block,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
  CHECK(csv.find("\"token,tile\"") != std::string::npos);
  CHECK(csv.find("\"k\"\"q\"") != std::string::npos);
  CHECK(csv.find(",64x4x1,128x1x1,") != std::string::npos);
  CHECK(csv.find(",2.000,2.000,2.000,") != std::string::npos);  // node 0: 2 us
  CHECK(csv.find(",gbps,blocks_per_sm,waves\n") != std::string::npos);
  CHECK(csv.find(",4,0.485\n") != std::string::npos);  // node 0: 256 blocks over 4 x 132 slots
  CHECK(csv.find(",0,0.000\n") != std::string::npos);  // node 1: not known
}

TEST_CASE("Chrome trace has one complete event per matched record, in time order", "[graphs][export]") {
  Manifest m = two_nodes();
  std::vector<KernelRecord> recs = {{1, 11, 5000, 6500, "b"}, {1, 10, 1000, 3000, "a"}, {1, 99, 0, 10, "other"}};
  auto j = to_chrome_trace(m, recs);
  auto& ev = j["traceEvents"];
  REQUIRE(ev.size() == 2);
  CHECK(ev[0]["name"] == "conv_update_fast_kernel");
  CHECK(ev[0]["ph"] == "X");
  CHECK(ev[0]["ts"].get<double>() == 0.0);
  CHECK(ev[0]["dur"].get<double>() == 2.0);
  CHECK(ev[1]["ts"].get<double>() == 4.0);
  CHECK(ev[1]["args"]["op"] == "postconv");
  CHECK(j["otherData"]["graph"] == "gdn-decode b=4");
}

TEST_CASE("DOT export draws labelled nodes and the dependency edges", "[graphs][export]") {
  auto dot = to_dot(two_nodes());
  CHECK(dot.rfind("digraph \"gdn-decode b=4\"", 0) == 0);
  CHECK(dot.find("n0 [label=\"L0 conv.update [fast]\\nconv_update_fast_kernel\\n64x4x1 x 128x1x1\"]") !=
        std::string::npos);
  CHECK(dot.find("k\\\"q") != std::string::npos);  // quotes escaped
  CHECK(dot.find("n0 -> n1;") != std::string::npos);
  CHECK(dot.back() == '\n');
}

TEST_CASE("export paths get the graph key before the extension", "[graphs][export]") {
  CHECK(with_key("out/trace.json", 32) == "out/trace-b32.json");
  CHECK(with_key("trace", 4) == "trace-b4");
  CHECK(with_key("a.b/trace", 1) == "a.b/trace-b1");
}
