#include "hydragen/dtype.h"

#include <cmath>
#include <cstring>

#include "hydragen/error.h"

namespace hydragen {

std::size_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  fail("dtype_bytes: unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "unknown";
}

float fp16_to_float(fp16 x) {
  const std::uint32_t sign = (x.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (x.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

fp16 float_to_fp16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return fp16{static_cast<std::uint16_t>(sign | 0x7e00u)};
  if (a >= 65520.0f) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (a < 6.103515625e-05f) {
    // Subnormal range: round a / 2^-24 to the nearest integer, ties to even.
    const float scaled = std::ldexp(a, 24);
    return fp16{static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)))};
  }
  std::uint32_t bits = std::bit_cast<std::uint32_t>(a);
  bits += 0xfffu + ((bits >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  const std::uint32_t exponent = (bits >> 23) - 112u;
  return fp16{static_cast<std::uint16_t>(sign | (exponent << 10) | ((bits >> 13) & 0x3ffu))};
}

}  // namespace hydragen
