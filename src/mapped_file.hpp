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
  // Hints that the file is read at random (madvise RANDOM): a page fault then reads its
  // own page instead of a read-around window (read_ahead_kb, 8 MiB on some virtual
  // disks), so a shuffled epoch over a cold dataset reads what it uses. Never throws.
  void advise_random() const noexcept;

  // False when TOKENFEED_READ_AHEAD=0 is in the environment: will_need and advise_random
  // then do nothing (a switch for measuring their effect, see perf/run.sh).
  static bool hints_enabled() noexcept;

 private:
  void reset() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tokenfeed
