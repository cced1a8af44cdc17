#include "dataset/datatrove_index.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& file, const std::string& why) {
  throw Error(ErrorKind::format, "'" + file + "': " + why);
}

// The line of `text` starting at `from` (without its '\n'), and where the next one starts.
std::string_view line_at(std::string_view text, std::size_t& from) {
  const std::size_t end = std::min(text.find('\n', from), text.size());
  const std::string_view line = text.substr(from, end - from);
  from = end < text.size() ? end + 1 : text.size();
  return line;
}

std::optional<std::uint64_t> parse_count(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

DatatroveMetadata parse_datatrove_metadata(std::string_view text, const std::string& file) {
  std::size_t at = 0;
  const std::string_view first = line_at(text, at);
  const std::size_t bar = first.rfind('|');
  if (bar == std::string_view::npos) {
    fail(file, "first line is not TOKENIZER|TOKEN_SIZE (datatrove's metadata): no '|'");
  }
  DatatroveMetadata m;
  m.tokenizer = std::string(first.substr(0, bar));
  const std::string_view size = first.substr(bar + 1);
  if (size == "2") {
    m.dtype = TokenDtype::uint16;
  } else if (size == "4") {
    m.dtype = TokenDtype::uint32;
  } else {
    fail(file, "token size '" + std::string(size) + "' after the '|' of the first line is not 2 or 4");
  }
  const std::string_view second = line_at(text, at);
  const std::optional<std::uint64_t> tokens = parse_count(second);
  if (!tokens) fail(file, "second line '" + std::string(second.substr(0, 40)) + "' is not a token count");
  m.tokens = *tokens;
  return m;
}

DatatroveIndex DatatroveIndex::open(const fs::path& index_path, std::uint64_t tokens) {
  DatatroveIndex index;
  index.map_ = MappedFile(index_path);
  index.tokens_ = tokens;
  const std::string file = index_path.string();
  const std::size_t size = index.map_.size();
  if (size % 8 != 0) {
    fail(file, "size " + std::to_string(size) + " bytes is not a multiple of 8 (uint64 document ends)");
  }
  index.documents_ = size / 8;
  if (index.documents_ == 0 && tokens > 0) {
    fail(file, "holds no document end, but its data file holds " + std::to_string(tokens) + " tokens");
  }
  std::uint64_t previous = 0;
  for (std::uint64_t d = 0; d < index.documents_; ++d) {
    std::uint64_t end = 0;  // as written: document_end() bounds what it returns
    std::memcpy(&end, index.map_.bytes().data() + 8 * d, 8);
    const std::string entry = "document end " + std::to_string(d) + " is " + std::to_string(end);
    if (end < previous) fail(file, entry + ", below the previous one (" + std::to_string(previous) + ")");
    if (end > tokens) fail(file, entry + ", past the " + std::to_string(tokens) + " tokens of its data file");
    previous = end;
  }
  if (previous != tokens) {
    fail(file, "the last document end (" + std::to_string(index.documents_ - 1) + ") is " + std::to_string(previous) +
                   ", but its data file holds " + std::to_string(tokens) + " tokens");
  }
  return index;
}

std::uint64_t DatatroveIndex::document_end(std::uint64_t d) const noexcept {
  std::uint64_t end = 0;
  std::memcpy(&end, map_.bytes().data() + 8 * d, 8);
  // Validated at open: end <= tokens. Bounded so that an index rewritten under a running
  // loader (not supported) cannot make a caller read past the tokens.
  return std::min(end, tokens_);
}

std::uint64_t DatatroveIndex::next_start_after(std::uint64_t token) const noexcept {
  // Document d + 1 starts where document d ends: the first end past `token` that is not the
  // file's end (ends are non-decreasing).
  std::uint64_t lo = 0, hi = documents_;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (document_end(mid) <= token) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == documents_) return UINT64_MAX;
  const std::uint64_t start = document_end(lo);
  return start < tokens_ ? start : UINT64_MAX;
}

}  // namespace tokenfeed
