#include "dataset/megatron_index.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic("MMIDIDX\0\0", 9);

// megatron-core's DType, by code (index 0 unused).
struct DtypeCode {
  const char* name;
  std::size_t size;
};
constexpr std::array<DtypeCode, 9> kDtypes = {{{"unknown", 0},
                                               {"uint8", 1},
                                               {"int8", 1},
                                               {"int16", 2},
                                               {"int32", 4},
                                               {"int64", 8},
                                               {"float64", 8},
                                               {"float32", 4},
                                               {"uint16", 2}}};
constexpr std::uint8_t kInt32Code = 4;
constexpr std::uint8_t kUint16Code = 8;

template <typename T>
T read_le(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

[[noreturn]] void fail(const std::string& file, const std::string& why) {
  throw Error(ErrorKind::format, "'" + file + "': " + why);
}

}  // namespace

const char* megatron_dtype_name(std::uint8_t code) noexcept {
  return code < kDtypes.size() ? kDtypes[code].name : kDtypes[0].name;
}

std::size_t megatron_dtype_size(std::uint8_t code) noexcept { return code < kDtypes.size() ? kDtypes[code].size : 0; }

std::optional<TokenDtype> megatron_token_dtype(std::uint8_t code) noexcept {
  if (code == kUint16Code) return TokenDtype::uint16;
  if (code == kInt32Code) return TokenDtype::int32;
  return std::nullopt;
}

MegatronHeader parse_megatron_header(std::span<const std::byte> idx, const std::string& file) {
  if (idx.size() < MegatronHeader::kSize) {
    fail(file, "not a Megatron index: " + std::to_string(idx.size()) + " bytes, shorter than the " +
                   std::to_string(MegatronHeader::kSize) + "-byte MMIDIDX header");
  }
  if (std::memcmp(idx.data(), kMagic.data(), kMagic.size()) != 0) {
    fail(file, "not a Megatron index (bad magic: expected \"MMIDIDX\\0\\0\")");
  }
  const std::byte* p = idx.data();
  const auto version = read_le<std::uint64_t>(p + 9);
  if (version != 1) fail(file, "Megatron index version " + std::to_string(version) + ", only version 1 is known");
  MegatronHeader h;
  h.dtype_code = read_le<std::uint8_t>(p + 17);
  if (megatron_dtype_size(h.dtype_code) == 0) {
    fail(file, "unknown dtype code " + std::to_string(h.dtype_code) + " (Megatron's codes are 1 to 8)");
  }
  h.sequences = read_le<std::uint64_t>(p + 18);
  h.document_entries = read_le<std::uint64_t>(p + 26);
  // 12 bytes a sequence (int32 length, int64 pointer), 8 a document index: compared by
  // division, so that no count can wrap the sum.
  const std::uint64_t arrays = idx.size() - MegatronHeader::kSize;
  const bool fits = h.sequences <= arrays / 12 && h.document_entries <= (arrays - 12 * h.sequences) / 8;
  if (!fits || arrays != 12 * h.sequences + 8 * h.document_entries) {
    fail(file, "size " + std::to_string(idx.size()) + " bytes does not match its header (" +
                   std::to_string(h.sequences) + " sequences and " + std::to_string(h.document_entries) +
                   " document indices take 34 + 12 x sequences + 8 x document indices bytes): truncated, "
                   "corrupt or a multimodal index");
  }
  return h;
}

MegatronIndex MegatronIndex::open(const fs::path& idx_path, const MappedFile& bin) {
  MegatronIndex index;
  index.map_ = MappedFile(idx_path);
  index.header_ = parse_megatron_header(index.map_.bytes(), idx_path.string());
  const std::uint8_t code = index.header_.dtype_code;
  const std::optional<TokenDtype> dtype = megatron_token_dtype(code);
  if (!dtype) {
    fail(idx_path.string(), std::string("dtype code ") + std::to_string(code) + " (" + megatron_dtype_name(code) +
                                ") is not a token dtype tokenfeed reads; of Megatron's dtypes it reads uint16 (code "
                                "8) and int32 (code 4)");
  }
  index.dtype_ = *dtype;
  const std::size_t width = size_of(index.dtype_);
  if (bin.size() % width != 0) {
    fail(bin.path().string(), "size " + std::to_string(bin.size()) + " bytes is not a multiple of " +
                                  std::to_string(width) + " (dtype " + megatron_dtype_name(code) + " in '" +
                                  idx_path.filename().string() + "')");
  }
  index.tokens_ = bin.size() / width;
  index.check_sequences(bin);
  index.check_documents();
  return index;
}

std::int64_t MegatronIndex::pointer(std::uint64_t s) const noexcept {
  return read_le<std::int64_t>(map_.bytes().data() + MegatronHeader::kSize + 4 * header_.sequences + 8 * s);
}

std::int64_t MegatronIndex::document_index(std::uint64_t d) const noexcept {
  return read_le<std::int64_t>(map_.bytes().data() + MegatronHeader::kSize + 12 * header_.sequences + 8 * d);
}

void MegatronIndex::check_sequences(const MappedFile& bin) const {
  const std::string file = map_.path().string();
  const std::string bin_name = "'" + bin.path().filename().string() + "'";
  const std::byte* lengths = map_.bytes().data() + MegatronHeader::kSize;
  const std::uint64_t width = size_of(dtype_);
  std::uint64_t end = 0;  // byte where the sequences so far end in the .bin
  for (std::uint64_t s = 0; s < header_.sequences; ++s) {
    const auto length = read_le<std::int32_t>(lengths + 4 * s);
    const std::int64_t at = pointer(s);
    if (length < 0) fail(file, "sequence " + std::to_string(s) + " has a negative length " + std::to_string(length));
    if (at < 0 || static_cast<std::uint64_t>(at) != end) {
      fail(file, "sequence " + std::to_string(s) + " points at byte " + std::to_string(at) + " of " + bin_name +
                     ", but the sequences before it end at byte " + std::to_string(end) +
                     " (pointers follow the lengths, as Megatron's writer lays them out)");
    }
    const std::uint64_t bytes = static_cast<std::uint64_t>(length) * width;
    if (bytes > bin.size() - end) {
      fail(file, "sequence " + std::to_string(s) + " (" + std::to_string(length) + " tokens at byte " +
                     std::to_string(end) + ") runs past the end of " + bin_name + " (" + std::to_string(bin.size()) +
                     " bytes)");
    }
    end += bytes;
  }
  if (end != bin.size()) {
    fail(file, "its " + std::to_string(header_.sequences) + " sequences end at byte " + std::to_string(end) + ", but " +
                   bin_name + " holds " + std::to_string(bin.size()) + " bytes");
  }
}

void MegatronIndex::check_documents() const {
  const std::string file = map_.path().string();
  const std::uint64_t entries = header_.document_entries;
  if (entries == 0) fail(file, "no document index (the first, 0, is always written)");
  const auto sequences = static_cast<std::int64_t>(header_.sequences);
  std::int64_t previous = 0;
  for (std::uint64_t d = 0; d < entries; ++d) {
    const std::int64_t first = document_index(d);
    if ((d == 0 && first != 0) || first < previous || first > sequences) {
      // The message is made only for the bad entry: 100M documents must open in well under
      // a second, and a string per entry costs seconds.
      const std::string entry = "document index " + std::to_string(d) + " is " + std::to_string(first);
      if (d == 0 && first != 0) fail(file, entry + ", not 0");
      if (first < previous) fail(file, entry + ", below the previous one (" + std::to_string(previous) + ")");
      fail(file, entry + ", past the sequence count " + std::to_string(sequences));
    }
    previous = first;
  }
  if (previous != sequences) {
    fail(file, "the last document index (" + std::to_string(entries - 1) + ") is " + std::to_string(previous) +
                   ", not the sequence count " + std::to_string(sequences));
  }
}

std::uint64_t MegatronIndex::document_start(std::uint64_t d) const noexcept {
  const auto s = static_cast<std::uint64_t>(document_index(d));
  // Validated at open: s <= S. The bound is kept so that an index rewritten in place under
  // a running loader (not supported, formats.md) cannot make this read outside the map.
  if (s >= header_.sequences) return tokens_;
  return std::min(static_cast<std::uint64_t>(pointer(s)) / size_of(dtype_), tokens_);
}

std::uint64_t MegatronIndex::next_start_after(std::uint64_t token) const noexcept {
  // The first document whose start is past `token` (starts are non-decreasing).
  std::uint64_t lo = 0, hi = documents();
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (document_start(mid) <= token) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < documents() ? document_start(lo) : UINT64_MAX;
}

}  // namespace tokenfeed
