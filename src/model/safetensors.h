// Reading safetensors checkpoints: one memory-mapped file (SafetensorsFile) and a whole
// checkpoint directory, single-file or sharded through model.safetensors.index.json
// (Checkpoint). Headers are validated when a file is opened (see safetensors_header.h).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hydragen/tensor.h"
#include "model/safetensors_header.h"

namespace hydragen {

class SafetensorsFile {
 public:
  // Maps the file read-only and validates its header; errors name the path.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The raw bytes of a tensor of this file (which the header validated).
  std::span<const std::byte> bytes(const SafetensorsEntry& entry) const;
  // A new contiguous CPU tensor of dtype `to` (f32, f16 or bf16) from an F32/F16/BF16
  // entry; any other stored dtype is an Error naming the file and tensor.
  Tensor read(const SafetensorsEntry& entry, DType to) const;

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  SafetensorsHeader header_;
};

// A checkpoint directory: model.safetensors, or the shards listed in
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  struct Found {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  // The file and entry holding `name`, or {nullptr, nullptr}.
  Found find(const std::string& name) const;
  std::vector<std::string> tensor_names() const;  // sorted

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found> tensors_;
};

}  // namespace hydragen
