// MappedFile: a whole file memory-mapped read-only, unmapped on destruction.
//
// Thread-safety: immutable after construction; concurrent reads are safe. The mapping
// stays valid even if the file is later unlinked (POSIX semantics). If the file is
// truncated underneath us, a read past the new end raises SIGBUS; the bus-fault guard
// (bus_fault_guard.hpp) catches it for every MappedFile, the read returns zeros, and
// damaged() turns true: code that reads a mapping calls check_intact() after reading
// (cheaply: only once any_damaged() is true) so that such zeros never pass as data.
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

  // True once a read of this mapping hit a page its file no longer has (see above).
  bool damaged() const noexcept;
  // Throws Error(io) naming the file when damaged().
  void check_intact() const;
  // False until some mapping in the process is damaged: until then nobody needs to check.
  static bool any_damaged() noexcept;

  // False when TOKENFEED_READ_AHEAD=0 is in the environment: will_need and advise_random
  // then do nothing (a switch for measuring their effect, see perf/run.sh).
  static bool hints_enabled() noexcept;

 private:
  void reset() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t guard_ = UINT32_MAX;  // bus_fault_guard registration (kUnguarded)
};

}  // namespace tokenfeed
