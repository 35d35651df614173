// Files from outside are opened only when they are regular files: a FIFO blocks a reader, and a
// directory or a device (/dev/zero) is no file of data; each is refused by name before a byte
// is read, and a file's size is checked against its limit before it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace hydragen {

class RegularFile {
 public:
  // Opens `path` read-only without blocking (a FIFO is refused, not waited on); an Error names
  // the path and what it is when it is not a regular file.
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size_bytes() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // The whole file; more than max_bytes is an Error naming the path and both sizes.
  std::string read_all(std::uint64_t max_bytes) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// RegularFile(path).read_all(max_bytes).
std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes);

// What a file system entry is, for messages: "a directory", "a FIFO (named pipe)", ...
const char* file_kind_name(unsigned mode);

// "12 MiB", "3 KiB", "17 bytes": a size in a message.
std::string bytes_text(std::uint64_t bytes);

}  // namespace hydragen
