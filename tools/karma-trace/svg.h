// A minimal SVG writer and chart axes for karma-trace's pictures (memory curve, plan timelines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace karma::tools {

std::string XmlEscape(const std::string& s);
// About `count` round tick values covering [lo, hi] (steps of 1, 2, 2.5 or 5 times a power of ten).
std::vector<double> NiceTicks(double lo, double hi, int count);

class Svg {
 public:
  Svg(double width, double height);
  void Rect(double x, double y, double w, double h, const std::string& fill, double opacity = 1.0,
            const std::string& stroke = "none");
  void Line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1.0,
            const std::string& dash = "");
  void Text(double x, double y, const std::string& text, double size = 12, const std::string& anchor = "start",
            const std::string& fill = "#222", const std::string& weight = "normal");
  // A filled or stroked path over points (x, y); `close_to_y` closes an area down to that y when >= 0.
  void Poly(const std::vector<std::pair<double, double>>& pts, const std::string& fill, const std::string& stroke,
            double width = 1.0, double close_to_y = -1, double opacity = 1.0);
  void Raw(const std::string& element) { body_ += element; body_ += '\n'; }
  std::string Finish() const;

 private:
  double width_, height_;
  std::string body_;
};

// A plot area inside an Svg: data coordinates to pixels, and axes with ticks and labels.
struct Axes {
  double left, top, width, height;  // plot area in pixels
  double xmin, xmax, ymin, ymax;    // data range
  double X(double x) const { return left + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0) * width; }
  double Y(double y) const { return top + height - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0) * height; }
  // Draws the frame, grid lines, tick labels (formatted by printf-style formats) and axis titles.
  void Draw(Svg& svg, const std::string& xtitle, const std::string& ytitle, const char* xfmt,
            const char* yfmt) const;
};

// The unit a memory axis reads best in: GiB from 1 GiB up, MiB below (a 64 MiB device in GiB would label every
// tick 0.0 or 0.1).
struct MemoryUnit {
  double bytes;
  const char* name;
  const char* tick_format;
  double Of(uint64_t b) const { return static_cast<double>(b) / bytes; }  // `b` bytes in this unit
};
MemoryUnit MemoryUnitFor(uint64_t max_bytes);

}  // namespace karma::tools
