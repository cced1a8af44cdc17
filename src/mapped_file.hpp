// MappedFile: a whole file memory-mapped read-only, unmapped on destruction.
//
// Thread-safety: immutable after construction; concurrent reads are safe. The mapping
// stays valid even if the file is later unlinked (POSIX semantics); if the file is
// truncated underneath us, reads past the new end raise SIGBUS, which is why datasets
// must not be rewritten in place while a loader reads them (documented in the README).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace tokenfeed {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error(io) naming the file when it cannot be opened, stat'ed or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

  // Hints that [offset, offset+length) will be read soon (madvise WILLNEED). Never throws.
  void will_need(std::size_t offset, std::size_t length) const noexcept;

 private:
  void reset() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tokenfeed
