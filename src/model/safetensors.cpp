#include "model/safetensors.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/regular_file.h"
#include "hydragen/error.h"

namespace hydragen {

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const RegularFile file(path);  // a FIFO or a device is refused, not waited on
  size_ = static_cast<std::size_t>(file.size_bytes());
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    HG_CHECK(mapped != MAP_FAILED, path.string(), ": mmap failed: ", std::strerror(errno));
    data_ = static_cast<const std::byte*>(mapped);
  }
  try {
    header_ = parse_safetensors_header({data_, size_}, path.string());
  } catch (...) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

std::span<const std::byte> SafetensorsFile::bytes(const SafetensorsEntry& entry) const {
  return {data_ + header_.data_offset + entry.begin, static_cast<std::size_t>(entry.end - entry.begin)};
}

Tensor SafetensorsFile::read(const SafetensorsEntry& entry, DType to) const {
  DType stored;
  switch (entry.dtype) {
    case SafetensorsDType::F32: stored = DType::f32; break;
    case SafetensorsDType::F16: stored = DType::f16; break;
    case SafetensorsDType::BF16: stored = DType::bf16; break;
    default:
      fail(path_.string(), ": tensor \"", entry.name, "\" has dtype ", safetensors_dtype_name(entry.dtype),
           ", expected F32, F16 or BF16");
  }
  HG_CHECK(entry.shape.size() <= static_cast<std::size_t>(kMaxRank), path_.string(), ": tensor \"", entry.name,
           "\" has rank ", entry.shape.size(), ", expected at most ", kMaxRank);
  // Copy first: the data area need not be aligned for the element type.
  Tensor raw = Tensor::empty(entry.shape, stored);
  const std::span<const std::byte> source = bytes(entry);
  if (!source.empty()) std::memcpy(raw.raw(), source.data(), source.size());
  return stored == to ? raw : raw.to(to);
}

namespace {

// A shard name from the index must be a plain file name inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::filesystem::path& index) {
  HG_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard.find('\\') == std::string::npos &&
               shard != "." && shard != "..",
           index.string(), ": shard \"", shard, "\" must be a file name in the checkpoint directory");
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  const std::filesystem::path index_path = dir / "model.safetensors.index.json";
  if (!std::filesystem::exists(index_path)) {
    const std::filesystem::path single = dir / "model.safetensors";
    HG_CHECK(std::filesystem::exists(single), dir.string(),
             ": no model.safetensors or model.safetensors.index.json in the checkpoint directory");
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const SafetensorsEntry& entry : files_[0]->header().tensors) tensors_[entry.name] = {files_[0].get(), &entry};
    return;
  }
  const nlohmann::json index = read_json_file(index_path);
  HG_CHECK(index.is_object(), index_path.string(), ": must be a JSON object");
  HG_CHECK(index.contains("weight_map") && index.at("weight_map").is_object(), index_path.string(),
           ": missing \"weight_map\" object");
  std::map<std::string, SafetensorsFile*> shards;
  for (const auto& [name, shard_value] : index.at("weight_map").items()) {
    HG_CHECK(shard_value.is_string(), index_path.string(), ": weight_map[\"", name, "\"] must be a file name");
    const std::string shard = shard_value.get<std::string>();
    check_shard_name(shard, index_path);
    auto it = shards.find(shard);
    if (it == shards.end()) {
      files_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
      it = shards.emplace(shard, files_.back().get()).first;
    }
    const SafetensorsEntry* entry = it->second->header().find(name);
    HG_CHECK(entry != nullptr, index_path.string(), ": tensor \"", name, "\" is mapped to ", shard,
             " but that file does not contain it");
    tensors_[name] = {it->second, entry};
  }
}

Checkpoint::Found Checkpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? Found{nullptr, nullptr} : it->second;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, found] : tensors_) names.push_back(name);
  return names;
}

}  // namespace hydragen
