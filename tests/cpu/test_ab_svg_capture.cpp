// CPU tests of two writers of the command line: `stepgraph ab --svg` (tools/cli/ab_svg.h: well-formed
// XML, one bar per family per side, escaped names) and `stepgraph capture`'s table and JSON
// (tools/cli/capture_report.h), with the node counting of graphs/graph.h CaptureStats.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/graph.h"
#include "tests/support/catch.h"
#include "tools/cli/ab_compare.h"
#include "tools/cli/ab_svg.h"
#include "tools/cli/capture_report.h"

using namespace sg;
using namespace sg::cli;

namespace {

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + part.size())) ++n;
  return n;
}

// True when every tag of `xml` is closed in order (<a>...</a>, <a/>), quotes inside tags are
// balanced and no '&' starts anything but an entity: enough to tell a well-formed SVG text here.
bool well_formed(const std::string& xml, std::string* why) {
  std::vector<std::string> open;
  for (size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] == '&') {
      const size_t semi = xml.find(';', i);
      const std::string ent = semi == std::string::npos ? "" : xml.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        *why = "bad entity at " + std::to_string(i);
        return false;
      }
      continue;
    }
    if (xml[i] == '>') {
      *why = "a '>' outside a tag at " + std::to_string(i);
      return false;
    }
    if (xml[i] != '<') continue;
    size_t j = i + 1;
    bool quoted = false;
    for (; j < xml.size() && (quoted || xml[j] != '>'); ++j) {
      if (xml[j] == '"') quoted = !quoted;
      if (!quoted && xml[j] == '<') {
        *why = "a '<' inside a tag at " + std::to_string(j);
        return false;
      }
    }
    if (j == xml.size()) {
      *why = "an unclosed tag";
      return false;
    }
    const std::string tag = xml.substr(i + 1, j - i - 1);
    const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" \n/", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) {
        *why = "</" + name + "> does not close " + (open.empty() ? std::string("anything") : "<" + open.back() + ">");
        return false;
      }
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(name);
    }
    i = j;
  }
  if (!open.empty()) *why = "<" + open.back() + "> never closed";
  return open.empty();
}

AbReport report_with_families() {
  AbReport r;
  r.preset = "qwen3.5-4b";
  r.graph = "decode b=32 (context 1024)";
  r.a.selection = "(base)";
  r.b.selection = "postconv=token_tile";
  r.step = compare_row("step", {2.0, 2.1, 2.05}, {1.9, 1.95, 1.92});
  r.families = compare_families(
      {{"postconv", {40, 41, 42}}, {"conv.fwd", {30, 30, 30}}, {"gemm <qkv> & \"out\"", {100, 101, 99}}},
      {{"postconv", {30, 31, 32}}, {"gdn.prefill", {25, 25, 26}}, {"gemm <qkv> & \"out\"", {100, 100, 100}}});
  return r;
}

}  // namespace

TEST_CASE("ab svg: well-formed with one bar per family per side", "[ab][svg]") {
  const AbReport r = report_with_families();
  const std::string svg = ab_svg(r);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.size() >= 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  std::string why;
  const bool ok = well_formed(svg, &why);
  INFO(why);
  CHECK(ok);
  CHECK(count(svg, "class=\"bar-a\"") == r.families.size());
  CHECK(count(svg, "class=\"bar-b\"") == r.families.size());
  CHECK(r.families.size() == 4);
  // Names are escaped; a side without the family has an empty bar.
  CHECK(svg.find("gemm &lt;qkv&gt; &amp; &quot;out&quot;") != std::string::npos);
  CHECK(svg.find("<qkv>") == std::string::npos);
  CHECK(svg.find("width=\"0.0\"") != std::string::npos);
  CHECK(svg.find("postconv (faster)") != std::string::npos);
  CHECK(svg.find("gdn.prefill (only B)") != std::string::npos);
  CHECK(svg.find("B postconv=token_tile") != std::string::npos);
}

TEST_CASE("ab svg: the tag checker catches bad XML", "[ab][svg]") {
  std::string why;
  CHECK(well_formed("<svg><rect/><text>a &amp; b</text></svg>", &why));
  CHECK_FALSE(well_formed("<svg><text>a & b</text></svg>", &why));
  CHECK_FALSE(well_formed("<svg><text>a</svg>", &why));
  CHECK_FALSE(well_formed("<svg>", &why));
}

TEST_CASE("ab svg: no families still makes a valid chart", "[ab][svg]") {
  AbReport r;
  const std::string svg = ab_svg(r);
  std::string why;
  CHECK(well_formed(svg, &why));
  CHECK(count(svg, "class=\"bar-a\"") == 0);
  CHECK(xml_escape("a<b>&'\"") == "a&lt;b&gt;&amp;&apos;&quot;");
}

TEST_CASE("capture stats: kernel nodes and the others are counted apart", "[capture]") {
  const std::vector<cudaGraphNodeType> types = {cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemcpy,
                                                cudaGraphNodeTypeKernel, cudaGraphNodeTypeEmpty,
                                                cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemset};
  CaptureStats s;
  s.kernel_nodes = 99;  // replaced, not added to
  count_node_types(types, s);
  CHECK(s.kernel_nodes == 3);
  CHECK(s.other_nodes == 3);
  count_node_types({}, s);
  CHECK(s.kernel_nodes == 0);
  CHECK(s.other_nodes == 0);
}

TEST_CASE("capture report: rows, totals and the JSON shape", "[capture]") {
  std::vector<CaptureRow> rows = {
      {"decode 1", "model-decode tiny b=1", {100, 2, 1.5, 3.0, 2097152}},
      {"decode 32", "model-decode tiny b=32", {120, 4, 2.5, 5.0, 4194304}},
      {"prefill 16", "model-prefill tiny t=16", {90, 0, 1.0, 2.0, -1048576}},
  };
  const CaptureStats t = capture_totals(rows);
  CHECK(t.kernel_nodes == 310);
  CHECK(t.other_nodes == 6);
  CHECK(t.capture_ms == Approx(5.0));
  CHECK(t.instantiate_ms == Approx(10.0));
  CHECK(t.instantiate_bytes == 5242880);

  const std::string table = format_capture_table(rows);
  CHECK(table.find("graph key") != std::string::npos);
  CHECK(table.find("decode 32") != std::string::npos);
  CHECK(table.find("total (3 graphs)") != std::string::npos);
  CHECK(table.find("-1.05 MB") != std::string::npos);
  CHECK(table.find("5.24 MB") != std::string::npos);
  CHECK(count(table, "\n") == 5);  // header, 3 graphs, total

  const nlohmann::json j = capture_json(rows);
  REQUIRE(j.at("graphs").size() == 3);
  const auto& g = j.at("graphs")[1];
  CHECK(g.at("key") == "decode 32");
  CHECK(g.at("name") == "model-decode tiny b=32");
  CHECK(g.at("kernel_nodes") == 120);
  CHECK(g.at("other_nodes") == 4);
  CHECK(g.at("capture_ms") == 2.5);
  CHECK(g.at("instantiate_ms") == 5.0);
  CHECK(g.at("instantiate_bytes") == 4194304);
  CHECK(j.at("totals").at("graphs") == 3);
  CHECK(j.at("totals").at("kernel_nodes") == 310);
  CHECK(j.at("totals").at("instantiate_bytes") == 5242880);
  CHECK(format_signed_bytes(-2100000) == "-2.10 MB");
  CHECK(format_signed_bytes(512) == "512 B");
}
