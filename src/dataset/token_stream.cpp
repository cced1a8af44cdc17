#include "dataset/token_stream.hpp"

#include <algorithm>
#include <cstring>

#include "util/hash.hpp"
#include "io/npy.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

bool is_shard_file(const fs::directory_entry& entry) {
  const std::string ext = entry.path().extension().string();
  return entry.is_regular_file() && (ext == ".bin" || ext == ".npy");
}

StreamFile open_npy(const fs::path& path) {
  StreamFile f;
  f.map = MappedFile(path);
  const NpyHeader h = parse_npy_header(f.map.bytes(), path.string());
  const auto fail = [&](const std::string& what) { throw Error(ErrorKind::format, "'" + path.string() + "': " + what); };
  if (h.descr == "<u2" || h.descr == "=u2") {
    f.dtype = TokenDtype::uint16;
  } else if (h.descr == "<u4" || h.descr == "=u4") {
    f.dtype = TokenDtype::uint32;
  } else {
    fail("dtype '" + h.descr + "' is not a little-endian uint16 or uint32 ('<u2' or '<u4')");
  }
  if (h.fortran_order) fail("Fortran order is not supported (save a C-order array)");
  if (h.shape.size() != 1) fail("expected a 1-D array, got " + std::to_string(h.shape.size()) + " dimensions");
  f.data_offset = h.data_offset;
  f.tokens = h.shape[0];
  const std::uint64_t width = size_of(f.dtype);
  if (f.tokens > (UINT64_MAX - f.data_offset) / width || f.map.size() != f.data_offset + f.tokens * width) {
    fail("file size " + std::to_string(f.map.size()) + " bytes does not match its header (" +
         std::to_string(f.tokens) + " tokens of " + std::to_string(width) + " bytes after a " +
         std::to_string(f.data_offset) + "-byte header): truncated or corrupt");
  }
  return f;
}

StreamFile open_bin(const fs::path& path, std::optional<TokenDtype> dtype) {
  if (!dtype) {
    throw Error(ErrorKind::config, "'" + path.string() +
                                       "': the token dtype of a .bin file is not known; set token_dtype "
                                       "(uint16 or uint32) in the config or in dataset_metadata.json");
  }
  StreamFile f;
  f.map = MappedFile(path);
  f.dtype = *dtype;
  const std::size_t width = size_of(*dtype);
  if (f.map.size() % width != 0) {
    throw Error(ErrorKind::format, "'" + path.string() + "': size " + std::to_string(f.map.size()) +
                                       " bytes is not a multiple of " + std::to_string(width) + " (token dtype " +
                                       to_string(*dtype) + ")");
  }
  f.tokens = f.map.size() / width;
  return f;
}

}  // namespace

bool TokenStreamSplit::has_split(const fs::path& dataset_dir, const std::string& split) {
  std::error_code ec;
  if (fs::is_regular_file(dataset_dir / (split + ".bin"), ec)) return true;
  if (!fs::is_directory(dataset_dir / split, ec)) return false;
  for (const auto& entry : fs::directory_iterator(dataset_dir / split, ec)) {
    if (is_shard_file(entry)) return true;
  }
  return false;
}

TokenStreamSplit TokenStreamSplit::open(const fs::path& dataset_dir, const std::string& split,
                                        std::optional<TokenDtype> bin_dtype) {
  std::error_code ec;
  std::vector<fs::path> paths;
  TokenStreamSplit result;
  const fs::path flat = dataset_dir / (split + ".bin");
  const fs::path dir = dataset_dir / split;
  if (fs::is_regular_file(flat, ec)) {
    if (fs::is_directory(dir, ec)) {
      throw Error(ErrorKind::format, "'" + dataset_dir.string() + "' holds both " + split + ".bin and " + split +
                                         "/; use one layout");
    }
    paths.push_back(flat);
    result.flat_ = true;
  } else if (fs::is_directory(dir, ec)) {
    // An episode-indexed split's tokens.bin and mask.bin are *.bin files too; reading them
    // as token streams would train on masks as if they were tokens.
    if (fs::exists(dir / "episodes.idx", ec)) {
      throw Error(ErrorKind::format, "'" + dir.string() + "' is an episode-indexed split (it holds episodes.idx), not "
                                         "a token stream; use dataset_mode=sft_episode or sft_packed");
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (is_shard_file(entry)) paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) throw Error(ErrorKind::format, "'" + dir.string() + "' holds no *.bin or *.npy shard files");
  } else {
    throw Error(ErrorKind::io, "split '" + split + "' not found: neither '" + flat.string() + "' nor '" + dir.string() +
                                   "' exists");
  }

  Hasher hasher;
  for (const fs::path& path : paths) {
    StreamFile f = path.extension() == ".npy" ? open_npy(path) : open_bin(path, bin_dtype);
    f.first_token = result.total_tokens_;
    result.total_tokens_ += f.tokens;
    hasher.add(path.filename().string());
    hasher.add(f.tokens);
    hasher.add(std::string_view(to_string(f.dtype)));
    result.files_.push_back(std::move(f));
  }
  result.fingerprint_ = hasher.digest();
  return result;
}

std::optional<TokenDtype> TokenStreamSplit::common_dtype() const noexcept {
  for (const StreamFile& f : files_) {
    if (f.dtype != files_.front().dtype) return std::nullopt;
  }
  return files_.empty() ? std::nullopt : std::optional<TokenDtype>(files_.front().dtype);
}

void TokenStreamSplit::read(std::size_t file, std::uint64_t offset, std::size_t count,
                            std::int64_t* out) const noexcept {
  const StreamFile& f = files_[file];
  const std::byte* base = f.map.bytes().data() + f.data_offset;
  if (f.dtype == TokenDtype::uint16) {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint16_t v;
      std::memcpy(&v, base + 2 * (offset + i), 2);
      out[i] = v;
    }
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t v;
      std::memcpy(&v, base + 4 * (offset + i), 4);
      out[i] = v;
    }
  }
}

std::uint32_t TokenStreamSplit::token_at(std::size_t file, std::uint64_t offset) const noexcept {
  std::int64_t v = 0;
  read(file, offset, 1, &v);
  return static_cast<std::uint32_t>(v);
}

void TokenStreamSplit::check_intact() const {
  for (const StreamFile& f : files_) f.map.check_intact();
}

void TokenStreamSplit::will_need(std::size_t file, std::uint64_t offset, std::size_t count) const noexcept {
  const StreamFile& f = files_[file];
  const std::size_t width = size_of(f.dtype);
  f.map.will_need(f.data_offset + static_cast<std::size_t>(offset) * width, count * width);
}

}  // namespace tokenfeed
