// CPU tests of the node-timing logic that needs no GPU: kernel-name shortening, demangling, and
// the aggregation of CUPTI kernel records into per-node statistics.
#include "engine/error.h"
#include "graphs/manifest.h"
#include "graphs/node_timer.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("kernel names are shortened to the kernel and its template arguments", "[graphs][manifest]") {
  CHECK(short_kernel_name("void sg::(anonymous namespace)::conv_update_fast_kernel(sg::ConvUpdateParams)") ==
        "conv_update_fast_kernel");
  CHECK(short_kernel_name(
            "void sg::(anonymous namespace)::delta_rule_decode_kernel<128, 2>(sg::DeltaRuleDecodeParams)") ==
        "delta_rule_decode_kernel<128, 2>");
  CHECK(short_kernel_name("void a::b<c::d>(int)") == "b<c::d>");
  CHECK(short_kernel_name("plain") == "plain");
  CHECK(demangle("_Z3fooi") == "foo(int)");
  CHECK(demangle("not_mangled") == "not_mangled");
  CHECK(demangle(nullptr) == "?");
}

TEST_CASE("kernel records aggregate per manifest node, unmatched ones are counted", "[graphs][manifest]") {
  Manifest m;
  m.graph = "g";
  for (int i = 0; i < 2; ++i) {
    ManifestNode n;
    n.index = i;
    n.cupti_id = 100 + static_cast<uint64_t>(i);
    n.label.op = std::string(1, i == 0 ? 'a' : 'b');  // (a char* assign trips GCC 12's false -Wrestrict)
    n.label.bytes = 4e6;                              // 4 MB
    m.nodes.push_back(n);
  }
  std::vector<KernelRecord> recs;
  // node 100: 1, 2, 3, 10 us; node 101: 4 us twice; one after another with gaps (no overlap); one
  // record of another graph's node and one of id 0, overlapping the others (ignored).
  uint64_t t = 1000;
  for (double us : {1.0, 2.0, 3.0, 10.0}) {
    recs.push_back({1, 100, t, t + static_cast<uint64_t>(us * 1000), "k"});
    t += 20000;
  }
  for (int i = 0; i < 2; ++i, t += 20000) recs.push_back({1, 101, t, t + 4000, "k"});
  recs.push_back({1, 999, 0, 500000, "k"});
  recs.push_back({0, 0, 0, 500000, "k"});
  int unmatched = -1;
  auto st = aggregate(m, recs, &unmatched);
  REQUIRE(st.size() == 2);
  CHECK(unmatched == 2);
  CHECK(st[0].calls == 4);
  CHECK(st[0].median_us == Approx(2.5));
  CHECK(st[0].mean_us == Approx(4.0));
  CHECK(st[0].min_us == Approx(1.0));
  CHECK(st[0].max_us == Approx(10.0));
  CHECK(st[0].gbps == Approx(4e6 / 2.5e3));  // bytes / (median us * 1e3) = GB/s
  CHECK(st[1].calls == 2);
  CHECK(st[1].median_us == Approx(4.0));
  CHECK(st[0].share + st[1].share == Approx(1.0));
  CHECK(st[1].share == Approx(4.0 / 6.5));
  CHECK(st[0].span_median_us == Approx(2.5));  // no overlap: own time = duration
  auto table = format_node_table(st, 4300.0);
  CHECK(table.find("median_us") != std::string::npos);
  CHECK(table.find("%floor") != std::string::npos);
  CHECK(table.find("waves") != std::string::npos);
}

TEST_CASE("a node's waves: its blocks over the device's resident block slots", "[graphs][manifest]") {
  CHECK(grid_waves({80, 1, 1}, 1, 132) == Approx(80.0 / 132));  // one partial wave on 61% of the SMs
  CHECK(grid_waves({64, 32, 1}, 8, 132) == Approx(2048.0 / 1056));
  CHECK(grid_waves({4, 30, 2}, 2, 132) == Approx(240.0 / 264));
  CHECK(grid_waves({80, 1, 1}, 0, 132) == 0.0);  // the driver could not say
  CHECK(grid_waves({80, 1, 1}, 2, 0) == 0.0);
  std::vector<NodeStats> st(2);
  st[0].node.grid = {80, 1, 1};
  st[0].node.waves = grid_waves(st[0].node.grid, 1, 132);
  st[1].node.grid = {64, 1, 1};  // waves unknown: printed as "-"
  const std::string table = format_node_table(st, 4300.0);
  const size_t l1 = table.find('\n') + 1, l2 = table.find('\n', l1) + 1;
  CHECK(table.substr(l1, l2 - l1).find(" 0.61 ") != std::string::npos);
  CHECK(table.substr(l2).find(" - ") != std::string::npos);
}

TEST_CASE("overlapping kernels (PDL) count their overlap once: own time from the previous end", "[graphs][manifest]") {
  Manifest m;
  for (int i = 0; i < 3; ++i) {
    ManifestNode n;
    n.index = i;
    n.cupti_id = 10 + static_cast<uint64_t>(i);
    n.label.op = std::string(1, static_cast<char>('a' + i));
    m.nodes.push_back(n);
  }
  std::vector<KernelRecord> recs;
  // Two replays 100 us apart (records out of order). Node a runs 0..10 us; b starts at 2 us, waits,
  // ends at 15; c starts at 12 and ends at 14, inside b (own time 0); a gap, then the next replay.
  for (uint64_t base : {100000ull, 0ull}) {
    recs.push_back({1, 12, base + 12000, base + 14000, "c"});
    recs.push_back({1, 10, base + 0, base + 10000, "a"});
    recs.push_back({1, 11, base + 2000, base + 15000, "b"});
  }
  const auto st = aggregate(m, recs);
  REQUIRE(st.size() == 3);
  CHECK(st[0].median_us == Approx(10.0));
  CHECK(st[1].median_us == Approx(5.0));  // 10 .. 15
  CHECK(st[1].span_median_us == Approx(13.0));
  CHECK(st[2].median_us == Approx(0.0));
  CHECK(st[2].span_median_us == Approx(2.0));
  CHECK(st[0].calls == 2);
  CHECK(st[0].median_us + st[1].median_us + st[2].median_us == Approx(15.0));  // the busy time of a replay
}

TEST_CASE("a failed launch names its node, and labels are built only when needed", "[graphs][manifest]") {
  int built = 0;
  auto label = [&] {
    ++built;
    return NodeLabel{3, "postconv", "token_tile", 1e6};
  };
  launched(cudaSuccess, nullptr, nullptr, label);  // eager and fine: no label
  CHECK(built == 0);
  std::string message;
  try {
    launched(cudaErrorInvalidValue, nullptr, nullptr, label);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(built == 1);
  CHECK(message.find("layer 3 postconv (arm token_tile): the launch failed with cudaErrorInvalidValue") == 0);
  message.clear();
  try {
    launch_failed(cudaErrorInvalidConfiguration, NodeLabel{-1, "argmax", "chunks=9", 0});
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("argmax (arm chunks=9): the launch failed with cudaErrorInvalidConfiguration") == 0);
}

TEST_CASE("op families sum their nodes' times, bytes and FLOPs, and print the floor's fraction", "[graphs][manifest]") {
  auto node = [](const char* op, double us, double bytes, double flops) {
    NodeStats s;
    s.node.label.op = op;
    s.node.label.bytes = bytes;
    s.node.label.flops = flops;
    s.median_us = us;
    return s;
  };
  // gemm: two nodes of 4.3 MB and 395 GFLOP, 1000 us each; norm: bytes only; probe: neither.
  const std::vector<NodeStats> stats = {node("gemm", 1000, 4.3e6, 3.95e11), node("norm", 10, 3.44e7, 0),
                                        node("gemm", 1000, 4.3e6, 3.95e11), node("probe", 10, 0, 0)};
  const std::vector<FamilyRow> rows = op_families(stats);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].op == "gemm");  // the longest first; equal times by name
  CHECK(rows[0].nodes == 2);
  CHECK(rows[0].us == Approx(2000));
  CHECK(rows[0].bytes == Approx(8.6e6));
  CHECK(rows[0].flops == Approx(7.9e11));
  CHECK(rows[1].op == "norm");
  CHECK(rows[2].op == "probe");
  // gemm: 7.9e11 FLOP at 790 TFLOP/s = 1000 us (its 8.6 MB at 4.3 TB/s are 2 us); norm: 34.4 MB = 8 us.
  CHECK(rows[0].floor_us(4300.0, 790.0) == Approx(1000.0));
  CHECK(rows[1].floor_us(4300.0, 790.0) == Approx(8.0));
  CHECK(rows[2].floor_us(4300.0, 790.0) == 0.0);
  const std::string t = format_family_table(rows, 4300.0, 790.0);
  INFO(t);
  CHECK(t.find("TFLOP/s") != std::string::npos);
  CHECK(t.find("395.0") != std::string::npos);   // gemm: 7.9e11 FLOP in 2000 us
  CHECK(t.find("50%") != std::string::npos);     // gemm: 1000 us of floor in 2000
  CHECK(t.find("80%") != std::string::npos);     // norm: 8 us of floor in 10
  CHECK(t.find("3440.0") != std::string::npos);  // norm: 34.4 MB in 10 us = 3440 GB/s
  CHECK(t.find("over floor") != std::string::npos);
  const size_t all = t.find("(all)");
  REQUIRE(all != std::string::npos);
  const std::string all_line = t.substr(all, t.find('\n', all) - all);
  CHECK(all_line.find("2020.0") != std::string::npos);  // the summed time
  CHECK(all_line.find("1002.0") != std::string::npos);  // gemm 1000 + norm 2 us over their floors
  const size_t probe = t.find("probe");
  REQUIRE(probe != std::string::npos);
  const std::string probe_line = t.substr(probe, t.find('\n', probe) - probe);
  CHECK(probe_line.find('%') != std::string::npos);   // its share
  CHECK(probe_line.find(" -") != std::string::npos);  // no rate, no floor
  CHECK(op_families({}).empty());
  CHECK(probe_line.substr(probe_line.size() - 2) == " -");  // waves unknown

  // Waves: the family's smallest and largest over its nodes that have them.
  std::vector<NodeStats> waved = {node("proj", 10, 0, 0), node("proj", 10, 0, 0), node("proj", 10, 0, 0),
                                  node("state", 10, 0, 0)};
  waved[0].node.waves = 0.61, waved[1].node.waves = 1.94, waved[3].node.waves = 1.5;  // waved[2]: unknown
  const std::vector<FamilyRow> wr = op_families(waved);
  CHECK(wr[0].waves_min == Approx(0.61));
  CHECK(wr[0].waves_max == Approx(1.94));
  const std::string wt = format_family_table(wr, 4300.0, 790.0);
  CHECK(wt.find("0.61-1.94") != std::string::npos);
  CHECK(wt.find(" 1.50\n") != std::string::npos);

  // Work the labels cannot carry (a workload's KV bytes, causal FLOPs) goes to its family's row only.
  std::vector<FamilyRow> more = rows;
  add_family_work(more, FamilyWork{"probe", 4.3e6, 0});
  add_family_work(more, FamilyWork{"absent", 1e12, 1e15});  // no such family: nothing changes
  REQUIRE(more.size() == 3);
  CHECK(more[2].bytes == Approx(4.3e6));
  CHECK(more[2].floor_us(4300.0, 790.0) == Approx(1.0));
  CHECK(more[0].bytes == rows[0].bytes);
  CHECK(more[0].flops == rows[0].flops);
  CHECK(more[1].bytes == rows[1].bytes);
  const std::string u = format_family_table(more, 4300.0, 790.0, "probe's bytes added");
  INFO(u);
  CHECK(u.find("probe's bytes added)") != std::string::npos);
  const size_t p2 = u.find("probe");
  const std::string p2_line = u.substr(p2, u.find('\n', p2) - p2);
  CHECK(p2_line.find("430.0") != std::string::npos);                // 4.3 MB in 10 us
  CHECK(p2_line.find("10%") != std::string::npos);                  // 1 us of floor in 10
  CHECK(t.find("KV reads are not labelled") != std::string::npos);  // the default note
}
