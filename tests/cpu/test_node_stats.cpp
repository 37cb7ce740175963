// CPU tests of the node-timing logic that needs no GPU: kernel-name shortening, demangling, and
// the aggregation of CUPTI kernel records into per-node statistics.
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
  // node 100: 1, 2, 3, 10 us; node 101: 4 us twice; one record of another graph's node; one of id 0.
  for (double us : {1.0, 2.0, 3.0, 10.0}) recs.push_back({1, 100, 1000, 1000 + static_cast<uint64_t>(us * 1000), "k"});
  recs.push_back({1, 101, 0, 4000, "k"});
  recs.push_back({1, 101, 0, 4000, "k"});
  recs.push_back({1, 999, 0, 5000, "k"});
  recs.push_back({0, 0, 0, 5000, "k"});
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
  auto table = format_node_table(st, 4300.0);
  CHECK(table.find("median_us") != std::string::npos);
  CHECK(table.find("%floor") != std::string::npos);
}
