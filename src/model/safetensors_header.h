// The safetensors header: an 8-byte little-endian length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, then the data area the offsets index into.
// parse_safetensors_header validates everything before anything is read through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace hydragen {

// The element types of the safetensors format.
enum class SafetensorsDType : std::uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };
const char* safetensors_dtype_name(SafetensorsDType dtype);
std::size_t safetensors_dtype_bytes(SafetensorsDType dtype);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data area, [begin, end)
  std::uint64_t end = 0;
};

struct SafetensorsHeader {
  std::uint64_t header_bytes = 0;  // N
  std::uint64_t data_offset = 0;   // 8 + N: where the data area starts in the file
  std::uint64_t data_bytes = 0;    // file size - data_offset
  std::vector<SafetensorsEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;

  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
};

// A header longer than this is refused (real checkpoints have headers of a few hundred KB).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a whole safetensors file held in `file`: the length
// fits the file and the limit, the JSON is an object of well-formed entries, each dtype is
// known, shape x dtype size == the byte span, spans lie inside the data area and do not
// overlap. Errors are hydragen::Error naming `file_name` and the tensor.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& file_name);

}  // namespace hydragen
