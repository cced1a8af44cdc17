#include "io/line_reader.hpp"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "util/sha256.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace {
constexpr std::size_t kChunkBytes = 1 << 20;
}  // namespace

struct LineReader::Impl {
  std::filesystem::path path;
  std::size_t max_line_bytes;
  std::ifstream file;
  std::uint64_t size = 0;
  std::uint64_t raw_read = 0;
  bool raw_eof = false;
  Sha256 sha;
  std::string sha_hex;

  bool gzip = false;
  bool gzip_started = false;
  bool gzip_member_done = false;
  z_stream zs{};
  std::vector<unsigned char> raw;  // compressed input waiting for inflate
  std::size_t raw_pos = 0, raw_end = 0;

  std::vector<char> data;  // decoded bytes
  std::size_t pos = 0, end = 0;
  std::uint64_t decoded = 0;           // bytes put into `data`, all fills
  mutable std::uint64_t reported = 0;  // the largest raw_bytes_read() given
  bool first_line = true;
  // A byte range (the range constructor): `base` is where reading started, and no line that
  // starts at `limit` or later is read. Plain files only.
  std::uint64_t base = 0;
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();

  // The offset in the file of the next byte to be read as a line (plain files).
  std::uint64_t offset() const noexcept { return base + raw_read - (end - pos); }
  bool at_limit() const noexcept { return limit != std::numeric_limits<std::uint64_t>::max() && offset() >= limit; }

  ZSTD_DCtx* zstd = nullptr;    // set for zstd input
  bool zstd_frame_done = true;  // the last ZSTD_decompressStream call ended a frame

  ~Impl() {
    if (gzip_started) inflateEnd(&zs);
    if (zstd != nullptr) ZSTD_freeDCtx(zstd);
  }

  // Refills `data` from zstd frames (concatenated frames, as `zstd` writes for several
  // inputs, are one stream); false at the end of the input.
  bool fill_zstd() {
    while (end == 0) {
      if (raw_pos == raw_end && !read_raw()) {
        if (!zstd_frame_done) {
          throw Error(ErrorKind::format, "'" + path.string() + "' is a truncated zstd file (it ends mid-frame)");
        }
        return false;
      }
      ZSTD_inBuffer in{raw.data(), raw_end, raw_pos};
      ZSTD_outBuffer out{data.data(), data.size(), 0};
      const std::size_t rc = ZSTD_decompressStream(zstd, &out, &in);
      if (ZSTD_isError(rc) != 0) {
        throw Error(ErrorKind::format, "'" + path.string() + "': corrupt zstd data near byte " +
                                           std::to_string(raw_read - (raw_end - raw_pos)) + ": " +
                                           ZSTD_getErrorName(rc));
      }
      raw_pos = in.pos;
      end = out.pos;
      zstd_frame_done = rc == 0;
    }
    return true;
  }

  // Reads the next raw chunk into `raw`; false at the end of the file.
  bool read_raw() {
    if (raw_eof) return false;
    file.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    const auto got = static_cast<std::size_t>(file.gcount());
    if (file.bad()) throw Error(ErrorKind::io, "error while reading '" + path.string() + "'");
    if (got < raw.size()) raw_eof = true;
    raw_pos = 0;
    raw_end = got;
    raw_read += got;
    sha.update(raw.data(), got);
    return got > 0;
  }

  // Refills `data` with decoded bytes; false at the end of the input.
  bool fill() {
    pos = end = 0;
    const bool any = fill_data();
    decoded += end;
    return any;
  }

  bool fill_data() {
    if (zstd != nullptr) return fill_zstd();
    if (!gzip) {
      if (!read_raw()) return false;
      // The raw buffer is the data buffer for plain files.
      std::memcpy(data.data(), raw.data(), raw_end);
      end = raw_end;
      return end > 0;
    }
    while (end == 0) {
      if (raw_pos == raw_end && !read_raw()) {
        if (!gzip_member_done) {
          throw Error(ErrorKind::format, "'" + path.string() + "' is a truncated gzip file (it ends mid-stream)");
        }
        return false;
      }
      if (gzip_member_done) {  // another gzip member follows (concatenated .gz files)
        if (inflateReset(&zs) != Z_OK) throw Error(ErrorKind::format, "'" + path.string() + "': zlib reset failed");
        gzip_member_done = false;
      }
      zs.next_in = raw.data() + raw_pos;
      zs.avail_in = static_cast<uInt>(raw_end - raw_pos);
      zs.next_out = reinterpret_cast<unsigned char*>(data.data());
      zs.avail_out = static_cast<uInt>(data.size());
      const int rc = inflate(&zs, Z_NO_FLUSH);
      raw_pos = raw_end - zs.avail_in;
      end = data.size() - zs.avail_out;
      if (rc == Z_STREAM_END) {
        gzip_member_done = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error(ErrorKind::format, "'" + path.string() + "': corrupt gzip data near byte " +
                                           std::to_string(raw_read - (raw_end - raw_pos)) + ": " +
                                           (zs.msg != nullptr ? zs.msg : "inflate failed"));
      }
    }
    return true;
  }
};

LineReader::LineReader(std::filesystem::path path, std::size_t max_line_bytes) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.path = std::move(path);
  d.max_line_bytes = max_line_bytes;
  std::error_code ec;
  if (std::filesystem::is_directory(d.path, ec)) {
    throw Error(ErrorKind::io, "cannot read '" + d.path.string() + "': it is a directory");
  }
  d.file.open(d.path, std::ios::binary);
  if (!d.file) throw Error(ErrorKind::io, "cannot open '" + d.path.string() + "' for reading");
  if (std::filesystem::is_regular_file(d.path, ec)) d.size = std::filesystem::file_size(d.path, ec);
  d.raw.resize(kChunkBytes);
  d.data.resize(kChunkBytes);

  // Sniff the gzip or zstd magic from the first chunk.
  const bool any = d.read_raw();
  if (any && d.raw_end >= 4 && d.raw[0] == 0x28 && d.raw[1] == 0xb5 && d.raw[2] == 0x2f && d.raw[3] == 0xfd) {
    d.zstd = ZSTD_createDCtx();
    if (d.zstd == nullptr) throw Error(ErrorKind::io, "cannot initialise zstd");
    d.zstd_frame_done = false;
  } else if (any && d.raw_end >= 2 && d.raw[0] == 0x1f && d.raw[1] == 0x8b) {
    d.gzip = true;
    if (inflateInit2(&d.zs, 15 + 16) != Z_OK) throw Error(ErrorKind::io, "cannot initialise zlib");
    d.gzip_started = true;
    d.gzip_member_done = false;
  } else {
    std::memcpy(d.data.data(), d.raw.data(), d.raw_end);
    d.end = d.raw_end;
    d.raw_pos = d.raw_end;
    d.decoded = d.end;
  }
}

LineReader::LineReader(std::filesystem::path path, std::size_t max_line_bytes, std::uint64_t begin, std::uint64_t end)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.path = std::move(path);
  d.max_line_bytes = max_line_bytes;
  d.file.open(d.path, std::ios::binary);
  if (!d.file) throw Error(ErrorKind::io, "cannot open '" + d.path.string() + "' for reading");
  std::error_code ec;
  d.size = std::filesystem::file_size(d.path, ec);
  d.raw.resize(kChunkBytes);
  d.data.resize(kChunkBytes);
  unsigned char magic[4] = {};
  d.file.read(reinterpret_cast<char*>(magic), sizeof magic);
  if ((d.file.gcount() >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) ||
      (d.file.gcount() >= 2 && magic[0] == 0x1f && magic[1] == 0x8b)) {
    throw Error(ErrorKind::format,
                "'" + d.path.string() + "' is compressed: it cannot be read from byte " + std::to_string(begin));
  }
  d.file.clear();
  // From begin - 1: when the byte there is the '\n' that ends a line, a line starts at begin.
  d.base = begin > 0 ? begin - 1 : 0;
  d.file.seekg(static_cast<std::streamoff>(d.base));
  if (!d.file)
    throw Error(ErrorKind::io, "cannot seek to byte " + std::to_string(d.base) + " of '" + d.path.string() + "'");
  if (begin > 0) {
    d.first_line = false;
    std::string partial;
    bool too_long = false;
    next(partial, too_long);  // the end of the line that started before `begin`
    line_number_ = 0;
  }
  d.limit = end;
}

LineReader::~LineReader() = default;

bool LineReader::next(std::string& line, bool& too_long) {
  Impl& d = *impl_;
  line.clear();
  too_long = false;
  std::size_t length = 0;
  bool any = false;
  if (d.at_limit()) return false;
  for (;;) {
    if (d.pos == d.end && !d.fill()) {
      if (!any) return false;
      break;
    }
    any = true;
    const char* begin = d.data.data() + d.pos;
    const std::size_t avail = d.end - d.pos;
    const void* nl = std::memchr(begin, '\n', avail);
    const std::size_t take = nl != nullptr ? static_cast<std::size_t>(static_cast<const char*>(nl) - begin) : avail;
    length += take;
    if (!too_long) {
      if (length > d.max_line_bytes) {
        too_long = true;
        line.clear();
        line.shrink_to_fit();
      } else {
        line.append(begin, take);
      }
    }
    d.pos += take;
    if (nl != nullptr) {
      ++d.pos;  // the '\n'
      break;
    }
  }
  ++line_number_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (d.first_line) {
    d.first_line = false;
    if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
  }
  return true;
}

bool LineReader::read_rest(std::string& text, std::size_t max_bytes, bool& too_long) {
  Impl& d = *impl_;
  text.clear();
  too_long = false;
  bool any = false;
  for (;;) {
    if (d.pos == d.end && !d.fill()) break;
    any = true;
    const std::size_t avail = d.end - d.pos;
    if (!too_long) {
      if (text.size() + avail > max_bytes) {
        too_long = true;
        std::string().swap(text);
      } else {
        text.append(d.data.data() + d.pos, avail);
      }
    }
    d.pos = d.end;
  }
  if (d.first_line) {
    d.first_line = false;
    if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  }
  return any;
}

std::uint64_t LineReader::skip_empty_lines(std::uint64_t max_lines) {
  Impl& d = *impl_;
  std::uint64_t skipped = 0;
  while (skipped < max_lines) {
    if (d.pos == d.end && !d.fill()) break;
    const char* p = d.data.data();
    std::size_t pos = d.pos;
    // A '\r' last in the buffer is left for next(): its '\n', if any, is not read yet.
    while (skipped < max_lines && pos < d.end) {
      if (d.limit != std::numeric_limits<std::uint64_t>::max() && d.base + d.raw_read - (d.end - pos) >= d.limit) break;
      if (p[pos] == '\n') {
        ++pos;
      } else if (p[pos] == '\r' && pos + 1 < d.end && p[pos + 1] == '\n') {
        pos += 2;
      } else {
        break;
      }
      ++skipped;
    }
    const bool more = pos == d.end;  // the run may go on in the next buffer
    d.pos = pos;
    if (!more) break;
  }
  line_number_ += skipped;
  return skipped;
}

std::uint64_t LineReader::raw_bytes_read() const noexcept {
  const Impl& d = *impl_;
  const bool plain = !d.gzip && d.zstd == nullptr;
  // Plain: `data` holds the last raw chunk, so the bytes not yet read as lines are end - pos.
  const std::uint64_t taken = plain ? d.raw_read : d.raw_read - (d.raw_end - d.raw_pos);
  const std::uint64_t given = d.decoded - (d.end - d.pos);
  // given <= decoded, so the estimate never passes `taken`, and equals it once all is given.
  const std::uint64_t estimate =
      d.decoded == 0
          ? 0
          : static_cast<std::uint64_t>(static_cast<long double>(taken) *
                                       (static_cast<long double>(given) / static_cast<long double>(d.decoded)));
  d.reported = std::max(d.reported, estimate);
  return d.reported;
}
std::uint64_t LineReader::file_size() const noexcept { return impl_->size; }
bool LineReader::is_gzip() const noexcept { return impl_->gzip; }
bool LineReader::is_zstd() const noexcept { return impl_->zstd != nullptr; }

std::string LineReader::sha256_hex() {
  if (impl_->sha_hex.empty()) impl_->sha_hex = Sha256::hex(impl_->sha.finish());
  return impl_->sha_hex;
}

}  // namespace tokenfeed
