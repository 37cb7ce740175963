// files.cpp: RegularFile and read_regular_file (see files.h).
#include "engine/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"
#include "engine/text.h"

namespace sg {
namespace {

constexpr size_t kPathShown = 4096;

std::string shown(const std::filesystem::path& p) { return printable(p.string(), kPathShown); }

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void not_regular(const std::filesystem::path& p, mode_t m) {
  throw Error(fmt::format("{}: not a regular file (it is {})", shown(p), file_kind(m)));
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path) {
  const std::string p = path.string();
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) throw Error(fmt::format("{}: cannot open: {}", shown(path), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once.
  fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open: {}", shown(path), std::strerror(errno)));
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(fmt::format("{}: cannot stat: {}", shown(path), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    not_regular(path, st.st_mode);
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes) {
  RegularFile f(path);
  if (f.size() > max_bytes) {
    throw Error(fmt::format("{}: the file is {} bytes, more than the {} byte limit for this kind of file", shown(path),
                            f.size(), max_bytes));
  }
  std::string text;
  if (f.size() == 0) {
    // A file whose size the kernel does not know (/proc, /sys report 0): read it to its end, within
    // the limit.
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(f.fd(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error(fmt::format("{}: read error: {}", shown(path), std::strerror(errno)));
      }
      if (n == 0) return text;
      if (text.size() + static_cast<size_t>(n) > max_bytes) {
        throw Error(fmt::format("{}: more than the {} byte limit for this kind of file", shown(path), max_bytes));
      }
      text.append(buf, static_cast<size_t>(n));
    }
  }
  text.resize(static_cast<size_t>(f.size()));
  size_t got = 0;
  // Read what fstat promised, plus one byte to see whether the file grew meanwhile.
  char extra = 0;
  for (;;) {
    char* dst = got < text.size() ? text.data() + got : &extra;
    const size_t want = got < text.size() ? text.size() - got : 1;
    const ssize_t n = ::read(f.fd(), dst, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: read error: {}", shown(path), std::strerror(errno)));
    }
    if (n == 0) break;
    if (got >= text.size()) {
      throw Error(fmt::format("{}: the file grew while it was read (more than {} bytes)", shown(path), text.size()));
    }
    got += static_cast<size_t>(n);
  }
  text.resize(got);  // a file that shrank meanwhile: what was there
  return text;
}

}  // namespace sg
