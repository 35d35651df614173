#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hydragen/error.h"

namespace hydragen {

const char* file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "of an unknown kind";
  }
}

std::string bytes_text(std::uint64_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return concat(bytes, bytes == 1 ? " byte" : " bytes");
  int unit = 0;
  std::uint64_t scale = 1024;
  while (unit < 3 && bytes >= scale * 1024) scale *= 1024, ++unit;
  if (bytes % scale == 0) return concat(bytes / scale, " ", units[unit]);
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", double(bytes) / double(scale), units[unit]);
  return text;
}

RegularFile::RegularFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  HG_CHECK(fd_ >= 0, path.string(), ": cannot open: ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    const char* kind = file_kind_name(info.st_mode);
    ::close(fd_);
    fail(path.string(), ": is ", kind, ", not a regular file");
  }
  // Reads of a regular file never block; blocking mode keeps read() simple.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(info.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all(std::uint64_t max_bytes) const {
  HG_CHECK(size_ <= max_bytes, path_.string(), ": ", bytes_text(size_), " is more than the ", bytes_text(max_bytes),
           " this file may have");
  std::string text(static_cast<std::size_t>(size_), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::pread(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    HG_CHECK(got >= 0, path_.string(), ": cannot read: ", std::strerror(errno));
    if (got == 0) break;  // the file shrank while it was read
    done += static_cast<std::size_t>(got);
  }
  text.resize(done);
  return text;
}

std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return RegularFile(path).read_all(max_bytes);
}

}  // namespace hydragen
