#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <string>
#include <utility>

#include "io/bus_fault_guard.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

[[noreturn]] void io_error(const std::filesystem::path& path, const char* what, int err) {
  throw Error(ErrorKind::io, std::string("cannot ") + what + " '" + path.string() + "': " + std::strerror(err));
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  // O_NONBLOCK: a FIFO in a dataset would block open() until a writer appears; opened
  // non-blocking it is refused below. It has no effect on the regular files mapped.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io_error(path, "open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_error(path, "stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::io, "'" + path.string() + "' is not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      io_error(path, "memory-map", err);
    }
    data_ = static_cast<const std::byte*>(p);
    guard_ = bus_fault_guard::register_mapping(data_, size_);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      guard_(std::exchange(other.guard_, bus_fault_guard::kUnguarded)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    guard_ = std::exchange(other.guard_, bus_fault_guard::kUnguarded);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  bus_fault_guard::unregister_mapping(std::exchange(guard_, bus_fault_guard::kUnguarded));
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

bool MappedFile::damaged() const noexcept { return bus_fault_guard::damaged(guard_); }

bool MappedFile::any_damaged() noexcept { return bus_fault_guard::fault_count() != 0; }

void MappedFile::check_intact() const {
  if (!damaged()) return;
  throw Error(ErrorKind::io, "'" + path_.string() + "' became shorter than when it was opened (" +
                                 std::to_string(size_) + " bytes) while the loader was reading it; rewriting a "
                                 "dataset in place under a running loader is not supported: write a new directory");
}

bool MappedFile::hints_enabled() noexcept {
  static const bool enabled = [] {
    const char* v = std::getenv("TOKENFEED_READ_AHEAD");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

void MappedFile::advise_random() const noexcept {
  if (data_ == nullptr || !hints_enabled()) return;
  ::madvise(const_cast<std::byte*>(data_), size_, MADV_RANDOM);
}

void MappedFile::will_need(std::size_t offset, std::size_t length) const noexcept {
  if (data_ == nullptr || offset >= size_ || !hints_enabled()) return;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t begin = offset / page * page;
  const std::size_t end = std::min(size_, offset + length);
  ::madvise(const_cast<std::byte*>(data_ + begin), end - begin, MADV_WILLNEED);
}

}  // namespace tokenfeed
