#include "io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

[[noreturn]] void io_error(std::string_view what, const std::filesystem::path& path, const std::string& why) {
  throw Error(ErrorKind::io, std::string(what) + " '" + path.string() + "' " + why);
}

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

int open_regular_file(const std::filesystem::path& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer;
  // it changes nothing for the regular files accepted below, which are read blocking.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io_error(what, path, std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_error(what, path, std::string("cannot be examined: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    io_error(what, path, std::string("is ") + file_type(st.st_mode) + ", expected a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::filesystem::path& path, std::string_view what, std::size_t max_bytes) {
  const Fd fd(open_regular_file(path, what));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) io_error(what, path, std::string("cannot be examined: ") + std::strerror(errno));
  const auto too_large = [&] {
    io_error(what, path, "is larger than " + std::to_string(max_bytes) + " bytes, the most this file may hold");
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) too_large();
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      io_error(what, path, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (got == 0) break;
    if (text.size() + static_cast<std::size_t>(got) > max_bytes) too_large();
    text.append(buffer, static_cast<std::size_t>(got));
  }
  return text;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text, std::string_view what) {
  const std::filesystem::path tmp =
      path.parent_path() / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error(what, path, std::string("cannot be written: ") + std::strerror(errno));
  const auto fail = [&](const char* step) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    io_error(what, path, std::string("cannot be written (") + step + "): " + std::strerror(err));
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    io_error(what, path, std::string("cannot be written (close): ") + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    io_error(what, path, std::string("cannot be replaced: ") + std::strerror(err));
  }
}

}  // namespace tokenfeed
