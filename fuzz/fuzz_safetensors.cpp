// libFuzzer target: the safetensors header parser on arbitrary bytes. It must either throw
// hydragen::Error or return a header whose every tensor lies inside the data area; the
// target then reads each tensor's bytes so AddressSanitizer sees any span it got wrong.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "hydragen/error.h"
#include "model/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const hydragen::SafetensorsHeader header = hydragen::parse_safetensors_header(file, "fuzz-input");
    std::uint8_t checksum = 0;
    for (const hydragen::SafetensorsEntry& entry : header.tensors) {
      if (entry.begin > entry.end || header.data_offset + entry.end > size) std::abort();
      for (std::uint64_t i = entry.begin; i < entry.end; ++i) checksum ^= data[header.data_offset + i];
    }
    volatile std::uint8_t sink = checksum;
    (void)sink;
  } catch (const hydragen::Error&) {
    // A clear error is the expected outcome for malformed input.
  }
  return 0;
}
