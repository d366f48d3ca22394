// Fitting and parsing the alpha-beta allreduce model.
#include "ground/exchange/cost_model.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace karma::dp {
namespace {

bool ParseDouble(std::string_view text, double* out) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(*out);
}

}  // namespace

std::string CostModel::ToString() const {
  if (beta_s_per_byte <= 0) return fmt::format("alpha {:.1f} us, unlimited bandwidth", alpha_s * 1e6);
  return fmt::format("alpha {:.1f} us, {:.3g} GB/s", alpha_s * 1e6, 1e-9 / beta_s_per_byte);
}

Result<CostModel> FitCostModel(std::span<const CostSample> samples) {
  if (samples.empty()) return InvalidArgument("cost model: no measurements");
  // Weighted by 1 / t^2, i.e. least relative error: with plain least squares the largest size decides the
  // line and the start-up cost, which is what merging is about, comes out of the noise of large transfers.
  double sw = 0, sx = 0, sy = 0;
  for (const CostSample& s : samples) {
    if (s.seconds <= 0) return InvalidArgument("cost model: a measured time is not positive");
    const double w = 1 / (s.seconds * s.seconds);
    sw += w;
    sx += w * static_cast<double>(s.bytes);
    sy += w * s.seconds;
  }
  const double mean_x = sx / sw, mean_y = sy / sw;
  double sxx = 0, sxy = 0, sx2 = 0, sxy0 = 0;
  for (const CostSample& s : samples) {
    const double w = 1 / (s.seconds * s.seconds), x = static_cast<double>(s.bytes);
    sxx += w * (x - mean_x) * (x - mean_x);
    sxy += w * (x - mean_x) * (s.seconds - mean_y);
    sx2 += w * x * x;
    sxy0 += w * x * s.seconds;
  }
  if (sxx <= 0) return InvalidArgument("cost model: the measurements need at least two different sizes");
  CostModel m{mean_y - sxy / sxx * mean_x, sxy / sxx};
  if (m.beta_s_per_byte < 0) {
    m = CostModel{mean_y, 0};  // no measurable bandwidth term: the best constant
  } else if (m.alpha_s < 0) {
    m = CostModel{0, sxy0 / sx2};  // no measurable start-up: the best line through the origin
  }
  return m;
}

Result<CostModel> ParseCostModel(std::string_view text) {
  const size_t comma = text.find(',');
  double alpha_us = 0, gbps = 0;
  if (comma == std::string_view::npos || !ParseDouble(text.substr(0, comma), &alpha_us) ||
      !ParseDouble(text.substr(comma + 1), &gbps) || alpha_us < 0 || gbps <= 0) {
    return InvalidArgument(fmt::format(
        "'{}' is not ALPHA_US,GBPS (start-up microseconds >= 0, bandwidth in GB/s > 0), e.g. 20,5", text));
  }
  return CostModel{alpha_us * 1e-6, 1e-9 / gbps};
}

}  // namespace karma::dp
