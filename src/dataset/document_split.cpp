#include "dataset/document_split.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "util/sha256.hpp"

namespace tokenfeed {
namespace {

constexpr char kDomain[] = "tokenfeed-token-split-v1";

// SHA-256's state after the domain (with its 0 byte) and the seed.
Sha256 split_prefix(std::uint64_t seed) {
  Sha256 sha;
  sha.update(kDomain, sizeof kDomain);
  std::uint8_t seed_bytes[8];
  for (int i = 0; i < 8; ++i) seed_bytes[i] = static_cast<std::uint8_t>(seed >> (8 * i));
  sha.update(seed_bytes, sizeof seed_bytes);
  return sha;
}

// `sha` given the tokens, each as 4 bytes little-endian (the host's order: little-endian,
// checked where files are mapped), then u from its digest.
double finish_point(Sha256& sha, const std::byte* tokens, std::uint64_t count, TokenDtype dtype) {
  if (dtype != TokenDtype::uint16) {
    sha.update(tokens, static_cast<std::size_t>(count) * 4);
  } else {
    std::array<std::uint32_t, 1024> wide;
    for (std::uint64_t done = 0; done < count;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(wide.size(), count - done));
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t t = 0;
        std::memcpy(&t, tokens + 2 * (done + i), 2);
        wide[i] = t;
      }
      sha.update(wide.data(), n * 4);
      done += n;
    }
  }
  const Sha256::Digest digest = sha.finish();
  std::uint64_t top = 0;
  for (std::size_t i = 0; i < 8; ++i) top = (top << 8) | digest[i];
  return static_cast<double>(top >> 11) * 0x1.0p-53;
}

}  // namespace

double token_document_split_point(const std::byte* tokens, std::uint64_t count, TokenDtype dtype, std::uint64_t seed) {
  Sha256 sha = split_prefix(seed);
  return finish_point(sha, tokens, count, dtype);
}

std::vector<DocumentRange> choose_documents(std::span<const StreamFile> files, double fraction, std::uint64_t seed,
                                            bool val) {
  const Sha256 prefix = split_prefix(seed);
  Sha256 sha;
  std::vector<DocumentRange> ranges;
  std::uint64_t total = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const StreamFile& file = files[f];
    const DocumentStarts& starts = *file.document_starts;
    const std::byte* data = file.map.bytes().data() + file.data_offset;
    const std::size_t width = size_of(file.dtype);
    bool open_run = false;  // the previous document of this file is in ranges.back()
    for (std::uint64_t d = 0; d < file.documents.value_or(0); ++d) {
      const std::uint64_t begin = starts.document_start(d);
      const std::uint64_t end = std::max(begin, starts.document_start(d + 1));
      if (end == begin) {
        // An empty document is invisible: it joins an open run (keeping the run's documents
        // consecutive), else is left out.
        if (open_run) ++ranges.back().documents;
        continue;
      }
      sha.restart_from(prefix);
      const bool chosen = finish_point(sha, data + begin * width, end - begin, file.dtype) < fraction;
      if (chosen != val) {
        open_run = false;
        continue;
      }
      if (!open_run) ranges.push_back({f, begin, 0, total, d, 0});
      open_run = true;
      ranges.back().tokens += end - begin;
      ++ranges.back().documents;
      total += end - begin;
    }
  }
  return ranges;
}

}  // namespace tokenfeed
