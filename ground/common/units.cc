// Parsing and printing of byte quantities and capacities.
#include "ground/common/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace karma {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "1.5 GiB" into the number "1.5" and the unit "GiB".
void SplitNumber(std::string_view s, std::string_view* number, std::string_view* unit) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  *number = s.substr(0, i);
  *unit = Trim(s.substr(i));
}

bool UnitMultiplier(std::string_view unit, uint64_t* mult) {
  const std::string u = Lower(unit);
  struct Entry { const char* name; uint64_t mult; };
  static constexpr Entry kUnits[] = {
      {"", 1},          {"b", 1},
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
  };
  for (const Entry& e : kUnits) {
    if (u == e.name) {
      *mult = e.mult;
      return true;
    }
  }
  return false;
}

}  // namespace

Result<uint64_t> ParseBytes(std::string_view text) {
  const std::string_view s = Trim(text);
  std::string_view number, unit;
  SplitNumber(s, &number, &unit);
  uint64_t mult = 0;
  if (number.empty() || !UnitMultiplier(unit, &mult)) {
    return InvalidArgument("'" + std::string(text) + "' is not a byte count; expected " + kBytesForms);
  }
  if (number.find('.') == std::string_view::npos) {
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || end != number.data() + number.size()) {
      return InvalidArgument("'" + std::string(text) + "' is not a byte count; expected " + kBytesForms);
    }
    if (mult != 0 && value > UINT64_MAX / mult) {
      return InvalidArgument("'" + std::string(text) + "' is too large");
    }
    return value * mult;
  }
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) {
    return InvalidArgument("'" + std::string(text) + "' is not a byte count; expected " + kBytesForms);
  }
  const double bytes = value * static_cast<double>(mult);
  if (bytes >= 1.8e19) return InvalidArgument("'" + std::string(text) + "' is too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

uint64_t Capacity::Resolve(uint64_t device_total_bytes, uint64_t device_free_bytes) const {
  if (!is_fraction) return bytes;
  return static_cast<uint64_t>(fraction * static_cast<double>(std::min(device_total_bytes, device_free_bytes)));
}

std::string Capacity::ToString() const {
  if (!is_fraction) return FormatBytes(bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g of free device memory", fraction);
  return buf;
}

Result<Capacity> ParseCapacity(std::string_view text) {
  const std::string_view s = Trim(text);
  std::string_view number, unit;
  SplitNumber(s, &number, &unit);
  if (!number.empty() && unit.empty() && number.find('.') != std::string_view::npos) {
    double f = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), f);
    if (ec != std::errc() || end != number.data() + number.size() || !(f > 0) || f > 1) {
      return InvalidArgument("'" + std::string(text) + "' is not a capacity; a fraction must be in (0, 1]; expected " +
                             kCapacityForms);
    }
    Capacity c;
    c.is_fraction = true;
    c.fraction = f;
    return c;
  }
  auto bytes = ParseBytes(s);
  if (!bytes.ok()) {
    return InvalidArgument("'" + std::string(text) + "' is not a capacity; expected " + kCapacityForms);
  }
  if (*bytes == 0) return InvalidArgument("a capacity of 0 bytes leaves no room for anything");
  Capacity c;
  c.bytes = *bytes;
  return c;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[48];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[unit]);
  }
  return buf;
}

std::string FormatSignedBytes(int64_t bytes) {
  const uint64_t magnitude = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + FormatBytes(magnitude);
}

double ToGiB(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

}  // namespace karma
