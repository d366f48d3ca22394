// SVG text generation and tick placement.
#include "tools/karma-trace/svg.h"

#include <fmt/format.h>
#include <fmt/printf.h>

#include <cmath>

#include "ground/common/units.h"

namespace karma::tools {

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

MemoryUnit MemoryUnitFor(uint64_t max_bytes) {
  if (max_bytes >= kGiB) return {static_cast<double>(kGiB), "GiB", "%.1f"};
  return {static_cast<double>(kMiB), "MiB", "%.0f"};
}

std::vector<double> NiceTicks(double lo, double hi, int count) {
  std::vector<double> ticks;
  if (!(hi > lo) || count < 1) return {lo};
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push_back(v);
  return ticks;
}

Svg::Svg(double width, double height) : width_(width), height_(height) {}

void Svg::Rect(double x, double y, double w, double h, const std::string& fill, double opacity,
               const std::string& stroke) {
  body_ += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" fill-opacity="{:.2f}" stroke="{}"/>)",
                       x, y, w, h, fill, opacity, stroke);
  body_ += '\n';
}

void Svg::Line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const std::string& dash) {
  body_ += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="{:.1f}"{}/>)",
                       x1, y1, x2, y2, stroke, width, dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"");
  body_ += '\n';
}

void Svg::Text(double x, double y, const std::string& text, double size, const std::string& anchor,
               const std::string& fill, const std::string& weight) {
  body_ += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{:.0f}" text-anchor="{}" fill="{}" font-weight="{}">{}</text>)",
                       x, y, size, anchor, fill, weight, XmlEscape(text));
  body_ += '\n';
}

void Svg::Poly(const std::vector<std::pair<double, double>>& pts, const std::string& fill, const std::string& stroke,
               double width, double close_to_y, double opacity) {
  if (pts.empty()) return;
  std::string d;
  d.reserve(pts.size() * 16);
  if (close_to_y >= 0) d += fmt::format("M{:.1f},{:.1f} ", pts.front().first, close_to_y);
  for (size_t i = 0; i < pts.size(); ++i) {
    d += fmt::format("{}{:.1f},{:.1f} ", (i == 0 && close_to_y < 0) ? "M" : "L", pts[i].first, pts[i].second);
  }
  if (close_to_y >= 0) d += fmt::format("L{:.1f},{:.1f} Z", pts.back().first, close_to_y);
  body_ += fmt::format(R"(<path d="{}" fill="{}" fill-opacity="{:.2f}" stroke="{}" stroke-width="{:.1f}"/>)", d, fill,
                       opacity, stroke, width);
  body_ += '\n';
}

std::string Svg::Finish() const {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{2}</svg>\n",
      width_, height_, body_);
}

void Axes::Draw(Svg& svg, const std::string& xtitle, const std::string& ytitle, const char* xfmt,
                const char* yfmt) const {
  for (double v : NiceTicks(ymin, ymax, 6)) {
    svg.Line(left, Y(v), left + width, Y(v), "#ddd", 1);
    svg.Text(left - 6, Y(v) + 4, fmt::sprintf(yfmt, v), 11, "end", "#444");
  }
  for (double v : NiceTicks(xmin, xmax, 8)) {
    svg.Line(X(v), top + height, X(v), top + height + 4, "#444", 1);
    svg.Text(X(v), top + height + 17, fmt::sprintf(xfmt, v), 11, "middle", "#444");
  }
  svg.Line(left, top + height, left + width, top + height, "#444", 1);
  svg.Line(left, top, left, top + height, "#444", 1);
  svg.Text(left + width / 2, top + height + 36, xtitle, 12, "middle");
  svg.Raw(fmt::format(R"svg(<text x="{:.1f}" y="{:.1f}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1f} {:.1f})">{}</text>)svg",
                      left - 48, top + height / 2, left - 48, top + height / 2, XmlEscape(ytitle)));
}

}  // namespace karma::tools
