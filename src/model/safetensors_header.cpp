#include "model/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

using nlohmann::json;

struct DTypeInfo {
  SafetensorsDType dtype;
  const char* name;
  std::size_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::F64, "F64", 8},         {SafetensorsDType::F32, "F32", 4},
    {SafetensorsDType::F16, "F16", 2},         {SafetensorsDType::BF16, "BF16", 2},
    {SafetensorsDType::I64, "I64", 8},         {SafetensorsDType::I32, "I32", 4},
    {SafetensorsDType::I16, "I16", 2},         {SafetensorsDType::I8, "I8", 1},
    {SafetensorsDType::U8, "U8", 1},           {SafetensorsDType::BOOL, "BOOL", 1},
    {SafetensorsDType::F8_E4M3, "F8_E4M3", 1}, {SafetensorsDType::F8_E5M2, "F8_E5M2", 1},
};

// The header is flat (depth 3 at most).
constexpr int kMaxJsonDepth = 8;

std::uint64_t get_offset(const json& value, const std::string& where) {
  HG_CHECK(value.is_number_unsigned(), where, ": data_offsets must hold two non-negative integers, got ", json_excerpt(value));
  return value.get<std::uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& value, const std::string& where) {
  HG_CHECK(value.is_object(), where, ": the entry must be an object with dtype, shape, data_offsets");
  SafetensorsEntry entry;
  entry.name = name;

  HG_CHECK(value.contains("dtype") && value.at("dtype").is_string(), where, ": missing or non-string \"dtype\"");
  const std::string dtype = value.at("dtype").get<std::string>();
  const auto* info = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                  [&](const DTypeInfo& d) { return dtype == d.name; });
  HG_CHECK(info != std::end(kDTypes), where, ": unknown dtype \"", dtype, "\"");
  entry.dtype = info->dtype;

  HG_CHECK(value.contains("shape") && value.at("shape").is_array(), where, ": missing or non-array \"shape\"");
  std::uint64_t elements = 1;
  for (const json& dim : value.at("shape")) {
    HG_CHECK(dim.is_number_unsigned(), where, ": shape must hold non-negative integers, got ",
             json_excerpt(value.at("shape")));
    const std::uint64_t size = dim.get<std::uint64_t>();
    HG_CHECK(size <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
                 (size == 0 || elements <= std::numeric_limits<std::uint64_t>::max() / size),
             where, ": shape ", json_excerpt(value.at("shape")), " overflows");
    elements *= size;
    entry.shape.push_back(static_cast<std::int64_t>(size));
  }
  HG_CHECK(elements <= std::numeric_limits<std::uint64_t>::max() / info->bytes, where, ": shape ",
           json_excerpt(value.at("shape")), " overflows");

  HG_CHECK(value.contains("data_offsets") && value.at("data_offsets").is_array() &&
               value.at("data_offsets").size() == 2,
           where, ": \"data_offsets\" must be [begin, end]");
  entry.begin = get_offset(value.at("data_offsets")[0], where);
  entry.end = get_offset(value.at("data_offsets")[1], where);
  HG_CHECK(entry.begin <= entry.end, where, ": data_offsets [", entry.begin, ", ", entry.end, "] has begin > end");
  HG_CHECK(entry.end - entry.begin == elements * info->bytes, where, ": shape ", json_excerpt(value.at("shape")), " of ",
           dtype, " needs ", elements * info->bytes, " bytes but data_offsets [", entry.begin, ", ", entry.end,
           "] span ", entry.end - entry.begin);
  return entry;
}

void check_no_overlaps(std::vector<SafetensorsEntry> tensors, const std::string& file_name) {
  std::erase_if(tensors, [](const SafetensorsEntry& e) { return e.begin == e.end; });
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    const SafetensorsEntry& a = tensors[i - 1];
    const SafetensorsEntry& b = tensors[i];
    HG_CHECK(a.end <= b.begin, file_name, ": tensors \"", a.name, "\" [", a.begin, ", ", a.end, ") and \"", b.name,
             "\" [", b.begin, ", ", b.end, ") overlap");
  }
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType dtype) { return kDTypes[static_cast<int>(dtype)].name; }
std::size_t safetensors_dtype_bytes(SafetensorsDType dtype) { return kDTypes[static_cast<int>(dtype)].bytes; }

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  const auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                                   [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& file_name) {
  HG_CHECK(file.size() >= 8, file_name, ": ", file.size(), " bytes is too short for a safetensors file (the header ",
           "length alone is 8 bytes)");
  SafetensorsHeader header;
  for (int i = 7; i >= 0; --i) header.header_bytes = (header.header_bytes << 8) | std::to_integer<std::uint64_t>(file[i]);
  HG_CHECK(header.header_bytes <= file.size() - 8, file_name, ": header length ", header.header_bytes,
           " runs past the end of the file (", file.size(), " bytes): truncated or not a safetensors file");
  HG_CHECK(header.header_bytes <= kMaxSafetensorsHeaderBytes, file_name, ": header length ", header.header_bytes,
           " exceeds the limit of ", kMaxSafetensorsHeaderBytes, " bytes");
  header.data_offset = 8 + header.header_bytes;
  header.data_bytes = file.size() - header.data_offset;

  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header.header_bytes);
  const json root = parse_json(text, file_name + ": header", {kMaxSafetensorsHeaderBytes, kMaxJsonDepth});
  HG_CHECK(root.is_object(), file_name, ": header must be a JSON object of tensors");

  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      HG_CHECK(value.is_object(), file_name, ": __metadata__ must be an object of strings");
      for (const auto& [key, item] : value.items()) {
        HG_CHECK(item.is_string(), file_name, ": __metadata__ \"", key, "\" must be a string");
        header.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    const std::string where = concat(file_name, ": tensor \"", name, "\"");
    SafetensorsEntry entry = parse_entry(name, value, where);
    HG_CHECK(entry.end <= header.data_bytes, where, ": data_offsets [", entry.begin, ", ", entry.end,
             "] lie outside the data area of ", header.data_bytes, " bytes (file truncated?)");
    header.tensors.push_back(std::move(entry));
  }
  check_no_overlaps(header.tensors, file_name);
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return header;
}

}  // namespace hydragen
