// Byte quantities with units ("512MiB", "1.5GB") and capacities given as bytes or a fraction of device memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ground/common/status.h"

namespace karma {

inline constexpr uint64_t kKiB = 1ull << 10;
inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

// The accepted forms, for error messages.
inline constexpr const char* kBytesForms =
    "plain bytes (1048576) or a number with a unit: B, KiB, MiB, GiB, TiB (binary), "
    "KB, MB, GB, TB (decimal), K, M, G, T (binary); e.g. 512MiB, 16GiB, 1.5GB";

// Parses a byte count. Whitespace between number and unit is allowed; units are case-insensitive.
Result<uint64_t> ParseBytes(std::string_view text);

// A memory capacity: absolute bytes, or a fraction of the device's total memory.
struct Capacity {
  bool is_fraction = false;
  double fraction = 0;  // in (0, 1] when is_fraction
  uint64_t bytes = 0;   // when !is_fraction

  // A fraction applies to the device memory free when KARMA first looks (at most the total): on a device that
  // other processes share, what they hold is not KARMA's to fill, and what this process's context already holds
  // is not the tensors'. Bytes are taken as given.
  uint64_t Resolve(uint64_t device_total_bytes, uint64_t device_free_bytes) const;
  std::string ToString() const;
};

inline constexpr const char* kCapacityForms =
    "bytes with a unit (512MiB, 16GiB, 1.5GB), plain bytes (1048576), "
    "or a fraction of free device memory with a decimal point (0.8, 1.0)";

// "0.8" and "1.0" are fractions (a decimal point and no unit, at most 1); everything else is bytes.
Result<Capacity> ParseCapacity(std::string_view text);

// "10.62 GiB", "512.00 MiB", "0 B": two decimals in the largest binary unit that keeps the value >= 1.
std::string FormatBytes(uint64_t bytes);
// A difference of byte counts, always signed: "+1.50 MiB", "-512 B", "+0 B".
std::string FormatSignedBytes(int64_t bytes);
// The same quantity as GiB with two decimals, no unit.
double ToGiB(uint64_t bytes);

}  // namespace karma
