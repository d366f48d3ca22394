// bfloat16 <-> fp32 conversions, bit-compatible with PyTorch's c10::BFloat16 (round to nearest even).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace karma::hostopt {

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Every NaN becomes the quiet NaN 0x7FC0, as in PyTorch; a finite value past the largest bf16 becomes inf.
inline uint16_t FloatToBf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u = std::bit_cast<uint32_t>(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace karma::hostopt
