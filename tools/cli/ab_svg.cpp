// ab_svg.cpp: the bar chart of `stepgraph ab --svg` (see ab_svg.h).
#include "tools/cli/ab_svg.h"

#include <fmt/format.h>

#include <algorithm>

namespace sg::cli {
namespace {

// Layout (px): a label column, the bar area, room for the value; each family takes one row.
constexpr int kLabelW = 200, kBarW = 420, kValueW = 110, kWidth = kLabelW + kBarW + kValueW;
constexpr int kTop = 56, kRowH = 30, kBarH = 11, kBottom = 16;

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ab_svg(const AbReport& r) {
  double most = 0;
  for (const auto& f : r.families) {
    if (f.sa) most = std::max(most, f.sa->median);
    if (f.sb) most = std::max(most, f.sb->median);
  }
  const double scale = most > 0 ? kBarW / most : 0.0;
  const int height = kTop + kRowH * static_cast<int>(r.families.size()) + kBottom;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, height, kWidth, height);
  out += "<style>.bar-a{fill:#4e79a7}.bar-b{fill:#f28e2b}</style>\n";
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", kWidth, height);
  std::string step = "-";
  if (r.step.sa && r.step.sb) {
    step = fmt::format("step A {:.4f} ms, B {:.4f} ms: B {}", r.step.sa->median, r.step.sb->median,
                       verdict_name(r.step.v));
  }
  out += fmt::format("<text x=\"8\" y=\"18\" font-size=\"13\">{}</text>\n",
                     xml_escape(fmt::format("{} {}: us per step per op family (CUPTI medians)", r.preset, r.graph)));
  out += fmt::format("<text x=\"8\" y=\"36\">{}</text>\n", xml_escape(step));
  out += fmt::format(
      "<rect class=\"key-a\" x=\"{}\" y=\"28\" width=\"10\" height=\"10\" fill=\"#4e79a7\"/>"
      "<text x=\"{}\" y=\"37\">{}</text>\n",
      kLabelW, kLabelW + 14, xml_escape("A " + r.a.selection));
  out += fmt::format(
      "<rect class=\"key-b\" x=\"{}\" y=\"42\" width=\"10\" height=\"10\" fill=\"#f28e2b\"/>"
      "<text x=\"{}\" y=\"51\">{}</text>\n",
      kLabelW, kLabelW + 14, xml_escape("B " + r.b.selection));
  int y = kTop;
  for (const auto& f : r.families) {
    out += fmt::format("<text x=\"8\" y=\"{}\">{}</text>\n", y + kBarH + 4,
                       xml_escape(fmt::format("{} ({})", f.name, verdict_name(f.v))));
    const std::optional<Spread>* sides[2] = {&f.sa, &f.sb};
    for (int i = 0; i < 2; ++i) {
      const std::optional<Spread>& s = *sides[i];
      const double w = s ? s->median * scale : 0.0;
      const int by = y + i * (kBarH + 2);
      out += fmt::format("<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\"/>",
                         i == 0 ? "bar-a" : "bar-b", kLabelW, by, w, kBarH);
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\">{}</text>\n", kLabelW + w + 4, by + kBarH - 2,
                         s ? fmt::format("{:.1f}", s->median) : std::string("-"));
    }
    y += kRowH;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace sg::cli
