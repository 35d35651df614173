// Shared by the model tests: where the reference fixtures live, reading them, a scratch
// directory, and a writer of safetensors files (valid or deliberately broken).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "hydragen/tensor.h"
#include "model/model_config.h"
#include "model/paged_kv.h"

namespace hydragen::test {

// tests/fixtures/model/ (HYDRAGEN_TEST_FIXTURES: the source tree's tests/fixtures, set by CMake).
inline std::filesystem::path model_fixture_dir() {
  return std::filesystem::path(HYDRAGEN_TEST_FIXTURES) / "model";
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// ||actual - expected|| / ||expected|| over all elements: the logits criterion of issue 4.
inline double relative_error(const Tensor& actual, const Tensor& expected) {
  double diff = 0.0, norm = 0.0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double e = expected.get(i);
    diff += (actual.get(i) - e) * (actual.get(i) - e);
    norm += e * e;
  }
  return std::sqrt(diff / norm);
}

// The rows of one sequence's prompt as a prefill step: positions and slots 0..n-1.
inline StepRows prompt_rows(const std::vector<std::int32_t>& prompt) {
  StepRows rows;
  rows.tokens = prompt;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(prompt.size()); ++i)
    rows.positions.push_back(i), rows.slots.push_back(i);
  return rows;
}

// An f32 CPU K/V pool with every element NaN, so that a slot nobody wrote shows.
inline PagedKv poisoned_pool(const ModelConfig& config, std::int64_t pages, int page_size) {
  PagedKv kv = PagedKv::allocate(config, pages, page_size, DType::f32, Device::cpu);
  for (std::int64_t l = 0; l < kv.layers(); ++l)
    for (Tensor* t : {&kv.k[static_cast<std::size_t>(l)], &kv.v[static_cast<std::size_t>(l)]})
      for (std::int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return kv;
}

// A fresh empty directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("hydragen_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// One tensor for write_safetensors: `bytes` are its data; the header says dtype and shape.
// offsets, when set, override the data_offsets written (for corrupt files).
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> offsets;
};

inline RawTensor f32_tensor(const std::string& name, std::vector<std::int64_t> shape, float start = 0.0f) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  RawTensor t{name, "F32", shape, std::vector<std::uint8_t>(static_cast<std::size_t>(n) * 4), {}};
  for (std::int64_t i = 0; i < n; ++i) {
    const float value = start + 0.25f * static_cast<float>(i);
    std::memcpy(t.bytes.data() + i * 4, &value, 4);
  }
  return t;
}

// The bytes of a safetensors file holding `tensors` in order.
inline std::vector<std::uint8_t> safetensors_bytes(const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<std::uint8_t> data;
  for (const RawTensor& t : tensors) {
    const std::int64_t begin = static_cast<std::int64_t>(data.size());
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", t.offsets.empty() ? std::vector<std::int64_t>{begin, begin + (std::int64_t)t.bytes.size()}
                                                         : t.offsets}};
  }
  header["__metadata__"] = {{"format", "pt"}};
  const std::string text = header.dump();
  // Sized once and copied into (GCC 12 read the inserts of a vector grown from 8 bytes as
  // reads from an empty region: -Wstringop-overread).
  std::vector<std::uint8_t> file(8 + text.size() + data.size());
  const std::uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<std::uint8_t>(length >> (8 * i));
  std::memcpy(file.data() + 8, text.data(), text.size());
  if (!data.empty()) std::memcpy(file.data() + 8 + text.size(), data.data(), data.size());
  return file;
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace hydragen::test
