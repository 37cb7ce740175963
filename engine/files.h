// files.h: opening files whose names come from the user or from other files (config.json, the
// safetensors index, shards) so that nothing hangs or reads without bound. A path is checked to be
// a regular file before it is opened, and again on the open descriptor (a FIFO, a device such as
// /dev/zero, a socket or a directory is refused with an error naming the path and what it is);
// the open itself never blocks (O_NONBLOCK), so a FIFO swapped in between cannot hang it either.
// Every error is an sg::Error that starts with the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace sg {

// The most read_regular_file() reads from a JSON file (config.json, model.safetensors.index.json).
inline constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;

// A read-only descriptor of a regular file, closed on destruction.
class RegularFile {
 public:
  // Throws sg::Error "<path>: cannot open: <reason>" or "<path>: not a regular file (it is a FIFO)".
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole content of a regular file of at most max_bytes bytes (a larger one is an error naming
// the path, its size and the limit; nothing is read from it). A file whose size the kernel reports
// as 0 (/proc, /sys) is read to its end, and is an error once it passes max_bytes.
std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes = kMaxJsonFileBytes);

}  // namespace sg
