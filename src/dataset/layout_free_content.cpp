#include "dataset/layout_free_content.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <vector>

#include "dataset/content_fingerprint.hpp"
#include "io/mapped_file.hpp"
#include "io/npy.hpp"
#include "tokenfeed/error.hpp"
#include "util/hash.hpp"
#include "util/sha256.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

// What a channel hands its bytes to: the 64-bit Hasher or SHA-256.
class Digest {
 public:
  virtual ~Digest() = default;
  virtual void update(const std::byte* data, std::size_t size) = 0;
};

class CheapDigest final : public Digest {
 public:
  void update(const std::byte* data, std::size_t size) override {
    hasher_.add(std::string_view(reinterpret_cast<const char*>(data), size));
  }
  std::uint64_t value() const noexcept { return hasher_.digest(); }

 private:
  Hasher hasher_;
};

class FullDigest final : public Digest {
 public:
  void update(const std::byte* data, std::size_t size) override { sha_.update(data, size); }
  Sha256::Digest value() { return sha_.finish(); }

 private:
  Sha256 sha_;
};

// Bytes for a digest, handed on in chunks of kChunk bytes whatever pieces they come in, so
// that the digest depends on the bytes alone, never on where a file, an episode or a block
// ended.
class Channel {
 public:
  static constexpr std::size_t kChunk = 64 << 10;

  explicit Channel(Digest& digest) : digest_(digest) { buffer_.reserve(kChunk); }
  void append(const std::byte* data, std::size_t size) {
    while (size > 0) {
      const std::size_t take = std::min(size, kChunk - buffer_.size());
      buffer_.insert(buffer_.end(), data, data + take);
      data += take;
      size -= take;
      if (buffer_.size() == kChunk) flush();
    }
  }
  void word(std::uint64_t value) {  // little-endian, as the files are
    std::array<std::byte, 8> bytes;
    std::memcpy(bytes.data(), &value, 8);
    append(bytes.data(), bytes.size());
  }
  // Tokens of `dtype` at `data`, each appended as a little-endian uint32.
  void tokens(const std::byte* data, TokenDtype dtype, std::uint64_t count) {
    if (dtype == TokenDtype::uint32) {
      append(data, static_cast<std::size_t>(count) * 4);
      return;
    }
    std::array<std::uint32_t, 4096> wide;
    while (count > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(count, wide.size()));
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        wide[i] = v;
      }
      append(reinterpret_cast<const std::byte*>(wide.data()), n * 4);
      data += 2 * n;
      count -= n;
    }
  }
  void finish() { flush(); }

 private:
  void flush() {
    if (!buffer_.empty()) digest_.update(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  Digest& digest_;
  std::vector<std::byte> buffer_;
};

// The stream offsets whose tokens are hashed: [start, start + length) for each start, in
// increasing order, never overlapping.
struct Blocks {
  std::vector<std::uint64_t> starts;
  std::uint64_t length = 0;
};

Blocks every_token(std::uint64_t total) { return Blocks{{0}, total}; }

Blocks sampled_tokens(std::uint64_t total) {
  if (total <= kLayoutFreeFullTokens) return every_token(total);
  return Blocks{evenly_spaced_blocks(total, kLayoutFreeBlockTokens, kLayoutFreeBlocks), kLayoutFreeBlockTokens};
}

// A run of the stream where it is mapped: `count` tokens, and their mask values when the
// split has masks.
struct Piece {
  const std::byte* tokens = nullptr;
  TokenDtype dtype = TokenDtype::uint16;
  const std::byte* mask = nullptr;
  std::size_t mask_width = 0;
  std::uint64_t count = 0;
};

// The canonical stream taken piece by piece: what of each piece falls in a block goes to
// the token channel (and the mask channel).
class StreamWalk {
 public:
  StreamWalk(Blocks blocks, Channel& tokens, Channel* masks)
      : blocks_(std::move(blocks)), tokens_(tokens), masks_(masks) {}

  void add(const Piece& piece) {
    const std::uint64_t end = position_ + piece.count;
    while (next_ < blocks_.starts.size()) {
      const std::uint64_t begin = blocks_.starts[next_], block_end = begin + blocks_.length;
      if (begin >= end) break;
      const std::uint64_t from = std::max(begin, position_), to = std::min(block_end, end);
      if (from < to) {
        const std::uint64_t skip = from - position_;
        tokens_.tokens(piece.tokens + skip * size_of(piece.dtype), piece.dtype, to - from);
        if (masks_ != nullptr && piece.mask != nullptr) {
          masks_->append(piece.mask + skip * piece.mask_width,
                         static_cast<std::size_t>((to - from) * piece.mask_width));
        }
      }
      if (block_end > end) break;
      ++next_;
    }
    position_ = end;
  }

 private:
  Blocks blocks_;
  Channel& tokens_;
  Channel* masks_;
  std::size_t next_ = 0;
  std::uint64_t position_ = 0;
};

// The three channels' digests, of one kind.
template <class D>
struct Digests {
  D documents, tokens, masks;
};

// The counts and the mask dtype, which every value starts with.
struct Counts {
  std::uint64_t tokens = 0, documents = 0;
  std::string_view mask = "no mask";
};

// ---- episode splits

// Where each shard's mask values are: the split's own maps, else mask.bin mapped here
// (a split that has masks but a run that does not use them: the values are content still).
class EpisodeMasks {
 public:
  explicit EpisodeMasks(const EpisodeSplit& split) : split_(split) {
    const std::optional<MaskDtype> dtype = split.has_mask() ? split.mask_dtype() : split.mask_file_dtype();
    if (!split.mask_files_present() || !dtype) return;
    width_ = size_of(*dtype);
    name_ = to_string(*dtype);
    if (split.has_mask()) return;
    for (const EpisodeShard& shard : split.shards()) {
      own_.push_back(shard.documents ? MappedFile() : MappedFile(shard.dir / "mask.bin"));
    }
  }
  std::size_t width() const noexcept { return width_; }
  std::string_view name() const noexcept { return name_; }
  // Shard `s`'s mask values of the span, or null without masks. Throws Error(format) when
  // the mask file no longer covers the span (changed since the split opened).
  const std::byte* at(std::size_t s, const EpisodeSpan& span) const {
    if (width_ == 0) return nullptr;
    const MappedFile& map = own_.empty() ? split_.shards()[s].mask : own_[s];
    if (map.size() / width_ < span.start + span.length) {
      throw Error(ErrorKind::format, "'" + map.path().string() + "' is shorter than its episodes (changed while read)");
    }
    return map.bytes().data() + span.start * width_;
  }

 private:
  const EpisodeSplit& split_;
  std::vector<MappedFile> own_;
  std::size_t width_ = 0;
  std::string_view name_ = "no mask";
};

template <class D>
Counts walk_episodes(const EpisodeSplit& split, bool sampled, Digests<D>& d) {
  Counts counts;
  for (const EpisodeShard& shard : split.shards()) {
    for (std::uint64_t r = 0; r < shard.episodes; ++r) counts.tokens += shard.span(r).length;
  }
  const EpisodeMasks masks(split);
  counts.mask = masks.name();
  Channel documents(d.documents), tokens(d.tokens), mask_values(d.masks);
  StreamWalk walk(sampled ? sampled_tokens(counts.tokens) : every_token(counts.tokens), tokens, &mask_values);
  const TokenDtype dtype = split.token_dtype();
  for (std::size_t s = 0; s < split.shards().size(); ++s) {
    const EpisodeShard& shard = split.shards()[s];
    for (std::uint64_t r = 0; r < shard.episodes; ++r) {
      const EpisodeSpan span = shard.span(r);
      documents.word(span.length);
      ++counts.documents;
      walk.add({shard.tokens.bytes().data() + span.start * size_of(dtype), dtype, masks.at(s, span), masks.width(),
                span.length});
    }
  }
  documents.finish();
  tokens.finish();
  mask_values.finish();
  return counts;
}

// ---- token streams

// The document starts file `f` indexes, each as its offset in the stream: from its index,
// else from its NAME.docs.npy (which open() validated).
void add_file_starts(const StreamFile& f, Channel& documents, Counts& counts) {
  const std::uint64_t n = f.documents.value_or(0);
  counts.documents += n;
  if (f.document_starts) {
    for (std::uint64_t d = 0; d < n; ++d) documents.word(f.first_token + f.document_starts->document_start(d));
    return;
  }
  if (n == 0) return;
  const fs::path& path = f.map.path();
  const fs::path docs = path.parent_path() / (path.stem().string() + ".docs.npy");
  const MappedFile map(docs);
  const NpyHeader header = parse_npy_header(map.bytes(), docs.string());
  if (map.size() < header.data_offset || (map.size() - header.data_offset) / 8 < n) {
    throw Error(ErrorKind::format, "'" + docs.string() + "' holds fewer than its " + std::to_string(n) +
                                       " document offsets (changed while read)");
  }
  const std::byte* data = map.bytes().data() + header.data_offset;
  for (std::uint64_t d = 0; d < n; ++d) {
    std::uint64_t offset = 0;
    std::memcpy(&offset, data + 8 * d, 8);
    documents.word(f.first_token + offset);
  }
}

template <class D>
Counts walk_stream(const TokenStreamSplit& split, bool sampled, Digests<D>& d) {
  Counts counts;
  counts.tokens = split.total_tokens();
  Channel documents(d.documents), tokens(d.tokens);
  StreamWalk walk(sampled ? sampled_tokens(counts.tokens) : every_token(counts.tokens), tokens, nullptr);
  const auto base = [](const StreamFile& f) { return f.map.bytes().data() + f.data_offset; };
  if (split.ranges().empty()) {
    for (const StreamFile& f : split.files()) {
      walk.add({base(f), f.dtype, nullptr, 0, f.tokens});
      add_file_starts(f, documents, counts);
    }
  } else {  // val_fraction: the documents the split holds, as their runs
    for (const DocumentRange& r : split.ranges()) {
      const StreamFile& f = split.files()[r.file];
      walk.add({base(f) + r.offset * size_of(f.dtype), f.dtype, nullptr, 0, r.tokens});
      counts.documents += r.documents;
    }
    for (std::uint64_t doc = 0; doc < counts.documents; ++doc) {
      documents.word(split.range_starts()->document_start(doc));
    }
  }
  documents.finish();
  tokens.finish();
  return counts;
}

// ---- the values

void add_counts(Hasher& h, const Counts& counts) {
  h.add(std::string_view("tokenfeed-layout-free-v1"));
  h.add(counts.tokens);
  h.add(counts.documents);
  h.add(counts.mask);
}

LayoutFreeFingerprint cheap_value(const Counts& counts, const Digests<CheapDigest>& d) {
  Hasher h;
  add_counts(h, counts);
  h.add(d.documents.value());
  LayoutFreeFingerprint out;
  out.documents = h.digest();
  h.add(d.tokens.value());
  h.add(d.masks.value());
  out.content = h.digest();
  return out;
}

std::string full_value(const Counts& counts, Digests<FullDigest>& d) {
  Sha256 sha;
  sha.update("tokenfeed-layout-free-sha256-v1");
  for (const std::uint64_t word : {counts.tokens, counts.documents}) sha.update(&word, 8);
  sha.update(counts.mask);
  for (FullDigest* part : {&d.documents, &d.tokens, &d.masks}) {
    const Sha256::Digest digest = part->value();
    sha.update(digest.data(), digest.size());
  }
  return Sha256::hex(sha.finish());
}

}  // namespace

LayoutFreeFingerprint layout_free_fingerprint(const EpisodeSplit& split) {
  Digests<CheapDigest> d;
  const Counts counts = walk_episodes(split, true, d);
  return cheap_value(counts, d);
}

LayoutFreeFingerprint layout_free_fingerprint(const TokenStreamSplit& split) {
  Digests<CheapDigest> d;
  const Counts counts = walk_stream(split, true, d);
  return cheap_value(counts, d);
}

std::string layout_free_digest(const EpisodeSplit& split) {
  Digests<FullDigest> d;
  const Counts counts = walk_episodes(split, false, d);
  return full_value(counts, d);
}

std::string layout_free_digest(const TokenStreamSplit& split) {
  Digests<FullDigest> d;
  const Counts counts = walk_stream(split, false, d);
  return full_value(counts, d);
}

}  // namespace tokenfeed
