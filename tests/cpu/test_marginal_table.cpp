// CPU tests of the marginal costs' table (graphs/marginal.h format_marginal_table): its columns,
// and the node time and overlap beside each group where a node-time map is given.
#include <string>

#include "graphs/marginal.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {
MarginalReport report() {
  MarginalReport r;
  r.baseline_ms = 5.355;
  r.spread_ms = 0.024;
  r.groups = {{"mlp.gate_up", 32, 4.194, 1.161}, {"rmsnorm.input", 32, 5.339, 0.016}, {"postconv", 24, 5.368, -0.013}};
  return r;
}
}  // namespace

TEST_CASE("marginal table: group, nodes, step without, marginal cost and share", "[marginal]") {
  const std::string t = format_marginal_table(report());
  CHECK(t.find("step 5.355 ms with every node (spread 0.024 ms)") != std::string::npos);
  CHECK(t.find("mlp.gate_up                  32        4.194        1.161   21.7%\n") != std::string::npos);
  CHECK(t.find("postconv                     24        5.368       -0.013   -0.2%\n") != std::string::npos);
  CHECK(t.find("node ms") == std::string::npos);  // no node times given: no such columns
  CHECK(t.find("overlap") == std::string::npos);
}

TEST_CASE("marginal table: each group's node time and overlap beside its marginal cost", "[marginal]") {
  const std::string t = format_marginal_table(report(), {{"mlp.gate_up", 1251.8}, {"rmsnorm.input", 135.7}});
  CHECK(t.find("overlap = the group's node time less its marginal cost") != std::string::npos);
  CHECK(t.find("   node ms  overlap ms\n") != std::string::npos);
  // 1.2518 - 1.161 = 0.091 of gate_up's node time runs beside other nodes; the norm's is mostly hidden.
  CHECK(t.find("mlp.gate_up                  32        4.194        1.161   21.7%     1.252       0.091\n") !=
        std::string::npos);
  CHECK(t.find("rmsnorm.input                32        5.339        0.016    0.3%     0.136       0.120\n") !=
        std::string::npos);
  // A group the map lacks shows dashes, not a zero time.
  CHECK(t.find("postconv                     24        5.368       -0.013   -0.2%         -           -\n") !=
        std::string::npos);
}
