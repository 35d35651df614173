// A counter-based random number generator: value = hash(seed, stream, index), no state,
// so any element of any tensor can be generated independently and in parallel, on the CPU
// or in a CUDA kernel, with the same result. The hash is SplitMix64's finaliser.
#pragma once

#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define HG_HOST_DEVICE __host__ __device__
#else
#define HG_HOST_DEVICE
#endif

namespace hydragen {

HG_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The key of one stream (one tensor) under a seed.
HG_HOST_DEVICE inline std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ stream);
}

// Uniform in [-1, 1): element `index` of the stream with key `key`.
HG_HOST_DEVICE inline float counter_uniform(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t bits = mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 random bits
}

// FNV-1a of a name: the stream id of a tensor, independent of the order tensors are made in.
inline std::uint64_t name_stream(std::string_view name) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

}  // namespace hydragen
