// Element types and the bf16/fp16 <-> fp32 conversions the CPU side uses.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace hydragen {

enum class DType : std::uint8_t { f32, f64, f16, bf16, i32 };

std::size_t dtype_bytes(DType dtype);
const char* dtype_name(DType dtype);

// bf16: the top 16 bits of an IEEE fp32; conversion rounds to nearest even, NaN stays NaN.
struct bf16 {
  std::uint16_t bits = 0;
};
struct fp16 {
  std::uint16_t bits = 0;
};

inline float bf16_to_float(bf16 x) { return std::bit_cast<float>(std::uint32_t{x.bits} << 16); }

inline bf16 float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}

float fp16_to_float(fp16 x);
fp16 float_to_fp16(float f);

}  // namespace hydragen
