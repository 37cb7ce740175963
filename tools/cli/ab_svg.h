// ab_svg.h: `stepgraph ab --svg`: a horizontal bar chart of the op families, A against B. One
// row per family (ab_compare.h's order), labelled with its verdict, with two bars: A (class
// "bar-a") above B (class "bar-b"), each as long as the side's median us per step on one shared
// scale, the value beside it; a side without the family gets a bar of width 0 and "-". The title
// says the whole step's medians and verdict. Plain SVG 1.1 text, no script, names XML-escaped.
// Pure host code.
#pragma once
#include <string>
#include <string_view>

#include "tools/cli/ab_compare.h"

namespace sg::cli {

std::string ab_svg(const AbReport& r);
// &, <, >, " and ' as entities; other bytes as they are (the names are printable ASCII).
std::string xml_escape(std::string_view s);

}  // namespace sg::cli
