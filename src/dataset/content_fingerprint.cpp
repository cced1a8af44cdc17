#include "dataset/content_fingerprint.hpp"

#include <algorithm>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "io/regular_file.hpp"
#include "tokenfeed/error.hpp"
#include "util/hash.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

bool is_data_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  // .ds and .index: a datatrove file and its document ends.
  return ext == ".bin" || ext == ".idx" || ext == ".npy" || ext == ".ds" || ext == ".index";
}

struct DataFile {
  fs::path path;
  std::uint64_t size = 0;
};

std::vector<DataFile> data_files(const fs::path& split_path) {
  std::vector<DataFile> files;
  std::error_code ec;
  if (fs::is_directory(split_path, ec)) {
    for (fs::recursive_directory_iterator it(split_path, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec) && is_data_file(it->path())) files.push_back({it->path(), 0});
    }
    if (ec) throw Error(ErrorKind::io, "cannot list '" + split_path.string() + "': " + ec.message());
  } else {
    files.push_back({split_path, 0});
  }
  return files;
}

// Sorts `files` by path and reads their sizes.
std::vector<DataFile> sized(std::vector<DataFile> files) {
  std::error_code ec;
  std::sort(files.begin(), files.end(), [](const DataFile& a, const DataFile& b) { return a.path < b.path; });
  for (DataFile& f : files) {
    f.size = fs::file_size(f.path, ec);
    if (ec) throw Error(ErrorKind::io, "cannot read the size of '" + f.path.string() + "': " + ec.message());
  }
  return files;
}

// Hashes `bytes` bytes of the file at `offset` (at most to its end).
void hash_range(Hasher& h, int fd, const fs::path& path, std::uint64_t offset, std::uint64_t bytes) {
  std::string buffer(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, kContentBlockBytes)), '\0');
  while (bytes > 0) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, buffer.size()));
    const ssize_t got = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset));
    if (got < 0) throw Error(ErrorKind::io, "cannot read '" + path.string() + "'");
    if (got == 0) break;  // the file ended early (it shrank): hashed as it is
    h.add(std::string_view(buffer.data(), static_cast<std::size_t>(got)));
    offset += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::uint64_t>(got);
  }
}

// The hash of `listed` (unsorted, unsized), read as one byte stream in path order, each
// file named by its path relative to `base`.
std::uint64_t content_fingerprint_of(std::vector<DataFile> listed, const fs::path& base) {
  const std::vector<DataFile> files = sized(std::move(listed));
  std::uint64_t total = 0;
  for (const DataFile& f : files) total += f.size;
  // The global offsets to hash, each with its length: everything, or the sampled blocks.
  std::vector<std::uint64_t> starts;
  std::uint64_t length = total;
  if (total <= kContentFullBytes) {
    starts.push_back(0);
  } else {
    length = kContentBlockBytes;
    starts = evenly_spaced_blocks(total, kContentBlockBytes, kContentBlocks);
  }
  Hasher h;
  h.add(std::string_view("tokenfeed-content-v1"));
  h.add(total);
  std::uint64_t file_start = 0;
  for (const DataFile& f : files) {
    h.add(std::string_view(f.path.lexically_relative(base).string()));
    h.add(f.size);
    const std::uint64_t file_end = file_start + f.size;
    int fd = -1;
    // Each range (or its part) that falls in this file.
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::uint64_t begin = std::max(starts[k], file_start), end = std::min(starts[k] + length, file_end);
      if (begin >= end) continue;
      if (fd < 0) fd = open_regular_file(f.path, "dataset file");
      try {
        hash_range(h, fd, f.path, begin - file_start, end - begin);
      } catch (...) {
        ::close(fd);
        throw;
      }
    }
    if (fd >= 0) ::close(fd);
    file_start = file_end;
  }
  return h.digest();
}

}  // namespace

std::vector<std::uint64_t> evenly_spaced_blocks(std::uint64_t total, std::uint64_t length, std::uint64_t count) {
  std::vector<std::uint64_t> starts;
  for (std::uint64_t k = 0; k < count; ++k) starts.push_back(k * ((total - length) / (count - 1)));
  starts.back() = total - length;
  return starts;
}

std::uint64_t content_fingerprint(const fs::path& split_path) {
  return content_fingerprint_of(data_files(split_path), split_path);
}

std::uint64_t content_fingerprint(const std::vector<fs::path>& paths, const fs::path& base) {
  std::vector<DataFile> files;
  for (const fs::path& path : paths) files.push_back({path, 0});
  return content_fingerprint_of(std::move(files), base);
}

}  // namespace tokenfeed
