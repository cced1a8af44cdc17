#include "dataset/episode_dataset.hpp"

#include "dataset/mask_values.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "util/hash.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

static_assert(std::endian::native == std::endian::little,
              "tokenfeed reads little-endian files by mapping them; big-endian hosts are not supported");

namespace fs = std::filesystem;

[[noreturn]] void format_error(const std::string& message) { throw Error(ErrorKind::format, message); }

bool is_shard_dir(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  return entry.is_directory() && name.rfind("shard_", 0) == 0;
}

std::vector<fs::path> shard_dirs(const fs::path& split_dir) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(split_dir)) {
    if (is_shard_dir(entry)) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::uint64_t read_u64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A token dtype open() may settle on, with the fingerprint as it would be under it: the
// fingerprint hashes the dtype and the token counts ahead of the records, so while the
// dtype is being inferred, the one pass over the records hashes them for each candidate.
struct DtypeCandidate {
  TokenDtype dtype;
  Hasher hasher;
  bool sizes_fit = true;    // every tokens.bin's size is a multiple of the width
  bool records_fit = true;  // every record ends within its tokens.bin at this width
};

struct RecordScan {
  std::uint64_t max_end = 0;            // the largest start+length
  std::uint64_t shortest = UINT64_MAX;  // the smallest length
};

// Checks every record of `index` for overflow and adds it to the hasher of each of the N
// candidates (kept in locals for the loop: the records are bytes, which may alias them).
template <std::size_t N>
RecordScan scan_records(const MappedFile& index, std::vector<DtypeCandidate>& candidates) {
  std::array<Hasher, N> hashers;
  for (std::size_t c = 0; c < N; ++c) hashers[c] = candidates[c].hasher;
  RecordScan scan;
  const std::byte* p = index.bytes().data();
  const std::uint64_t records = index.size() / 16;
  for (std::uint64_t i = 0; i < records; ++i) {
    const std::uint64_t start = read_u64(p + 16 * i);
    const std::uint64_t length = read_u64(p + 16 * i + 8);
    if (length > UINT64_MAX - start) {
      format_error("'" + index.path().string() + "': record " + std::to_string(i) + " (start=" + std::to_string(start) +
                   ", length=" + std::to_string(length) + ") overflows 64 bits");
    }
    scan.max_end = std::max(scan.max_end, start + length);
    scan.shortest = std::min(scan.shortest, length);
    for (Hasher& h : hashers) {
      h.add(start);
      h.add(length);
    }
  }
  for (std::size_t c = 0; c < N; ++c) candidates[c].hasher = hashers[c];
  return scan;
}

}  // namespace

bool EpisodeSplit::looks_like_episode_split(const fs::path& split_dir) {
  std::error_code ec;
  if (!fs::is_directory(split_dir, ec)) return false;
  if (fs::exists(split_dir / "episodes.idx", ec)) return true;
  for (const auto& dir : shard_dirs(split_dir)) {
    if (fs::exists(dir / "episodes.idx", ec)) return true;
  }
  return false;
}

namespace {

// The shard directories of `split_dir`, in order: the split itself when it is flat
// (episodes.idx in it), else its shard_* directories.
std::vector<fs::path> layout_dirs(const fs::path& split_dir) {
  std::error_code ec;
  if (!fs::exists(split_dir, ec)) throw Error(ErrorKind::io, "split directory '" + split_dir.string() + "' does not exist");
  if (!fs::is_directory(split_dir, ec)) throw Error(ErrorKind::io, "'" + split_dir.string() + "' is not a directory");
  std::vector<fs::path> dirs = shard_dirs(split_dir);
  const bool flat = fs::exists(split_dir / "episodes.idx", ec);
  if (flat && !dirs.empty()) {
    format_error("'" + split_dir.string() + "' holds both episodes.idx and shard_* directories; use one layout");
  }
  if (flat) dirs = {split_dir};
  if (dirs.empty()) {
    format_error("'" + split_dir.string() + "' holds neither episodes.idx nor shard_* directories");
  }
  return dirs;
}

// The token dtypes open() may settle on: the one given, else both; each hasher starts with
// the dtype and the shard count.
std::vector<DtypeCandidate> dtype_candidates(const EpisodeSplitOptions& options, std::size_t shards) {
  std::vector<DtypeCandidate> candidates;
  if (options.token_dtype) {
    candidates.push_back({*options.token_dtype, {}});
  } else {
    candidates.push_back({TokenDtype::uint16, {}});
    candidates.push_back({TokenDtype::uint32, {}});
  }
  for (DtypeCandidate& c : candidates) {
    c.hasher.add(std::string_view(to_string(c.dtype)));
    c.hasher.add(shards);
  }
  return candidates;
}

}  // namespace

// open()'s steps after the layout, in order, and what they hand on.
struct EpisodeSplit::Opening {
  EpisodeSplit& split;
  const EpisodeSplitOptions& options;
  std::vector<DtypeCandidate> candidates;
  std::vector<std::uint64_t> max_end;  // the largest start+length of each shard's records

  void map_shards(const std::vector<fs::path>& dirs);
  const DtypeCandidate& settle_token_dtype();
  void check_records();
  void check_masks();
};

EpisodeSplit EpisodeSplit::open(const fs::path& split_dir, const EpisodeSplitOptions& options) {
  const std::vector<fs::path> dirs = layout_dirs(split_dir);
  EpisodeSplit split;
  split.dir_ = split_dir;
  Opening opening{split, options, dtype_candidates(options, dirs.size()), {}};
  opening.map_shards(dirs);
  const DtypeCandidate& chosen = opening.settle_token_dtype();
  opening.check_records();
  Hasher hasher = chosen.hasher;
  opening.check_masks();
  // Whether masks exist is part of the data; whether this run maps them is not (a state
  // saved with use_loss_mask on resumes with it off: the order is the same).
  hasher.add(std::uint64_t{split.mask_files_present_});
  split.fingerprint_ = hasher.digest();
  return split;
}

// One pass over the shards in order: map the files, check the index records for overflow
// and hash them, noting what the checks that need the token dtype look at (the largest
// record end of each shard); then mask.bin in every shard or in none.
void EpisodeSplit::Opening::map_shards(const std::vector<fs::path>& dirs) {
  std::error_code ec;
  max_end.assign(dirs.size(), 0);
  split.shards_.reserve(dirs.size());
  std::size_t with_mask = 0;
  for (const fs::path& dir : dirs) {
    EpisodeShard shard;
    shard.dir = dir;
    for (const char* name : {"tokens.bin", "episodes.idx"}) {
      if (!fs::exists(dir / name, ec)) throw Error(ErrorKind::io, "missing file '" + (dir / name).string() + "'");
    }
    shard.tokens = MappedFile(dir / "tokens.bin");
    shard.index = MappedFile(dir / "episodes.idx");
    shard.has_mask_file = fs::exists(dir / "mask.bin", ec);
    with_mask += shard.has_mask_file ? 1 : 0;
    const MappedFile& index = shard.index;
    if (index.size() % 16 != 0) {
      format_error("'" + index.path().string() + "': size " + std::to_string(index.size()) +
                   " bytes is not a multiple of 16 (uint64 start, length pairs)");
    }
    shard.first_episode = split.num_episodes_;
    shard.episodes = index.size() / 16;
    // An episode is a run of tokens.bin, so an index cannot hold more records than tokens.bin
    // holds tokens (at the narrowest dtype, 2 bytes). One that does is sparse or corrupt:
    // refused before its pages are read, since reading a sparse 4 GiB index would cost 4 GiB.
    if (shard.episodes > shard.tokens.size() / 2) {
      format_error("'" + index.path().string() + "' holds " + std::to_string(shard.episodes) + " records but '" +
                   shard.tokens.path().string() + "' at most " + std::to_string(shard.tokens.size() / 2) +
                   " tokens: an index larger than its data can explain (sparse or corrupt)");
    }
    for (DtypeCandidate& c : candidates) {
      const std::size_t width = size_of(c.dtype);
      c.sizes_fit = c.sizes_fit && shard.tokens.size() % width == 0;
      c.hasher.add(dir.filename().string());
      c.hasher.add(shard.tokens.size() / width);
      c.hasher.add(shard.episodes);
    }
    const RecordScan scan =
        candidates.size() == 1 ? scan_records<1>(index, candidates) : scan_records<2>(index, candidates);
    index.check_intact();  // truncated during the pass: its records were read as zeros
    max_end[split.shards_.size()] = scan.max_end;
    split.shortest_episode_ = std::min(split.shortest_episode_, scan.shortest);
    split.num_episodes_ += shard.episodes;
    split.shards_.push_back(std::move(shard));
  }
  if (with_mask != 0 && with_mask != split.shards_.size()) {
    for (const EpisodeShard& shard : split.shards_) {
      if (!shard.has_mask_file) {
        format_error("mask.bin is present in " + std::to_string(with_mask) + " of " +
                     std::to_string(split.shards_.size()) + " shards of '" + split.dir_.string() +
                     "' but missing in '" + shard.dir.string() +
                     "'; an incomplete mask would train on unmasked tokens");
      }
    }
  }
  split.mask_files_present_ = with_mask == split.shards_.size();
}

// The token dtype: given, else the one width consistent with every shard. When no width
// is consistent, the files are damaged rather than ambiguous: validate with the width
// the file sizes allow (uint16 when both do, since it reads more tokens), so that the
// error check_records gives names the file and record at fault instead of asking for a
// dtype.
const DtypeCandidate& EpisodeSplit::Opening::settle_token_dtype() {
  for (DtypeCandidate& c : candidates) {
    const std::size_t width = size_of(c.dtype);
    for (std::size_t s = 0; s < split.shards_.size(); ++s) {
      c.records_fit = c.records_fit && max_end[s] <= split.shards_[s].tokens.size() / width;
    }
  }
  const DtypeCandidate* chosen = &candidates.front();
  if (!options.token_dtype) {
    std::vector<const DtypeCandidate*> fitting;
    std::vector<const DtypeCandidate*> size_fitting;
    for (const DtypeCandidate& c : candidates) {
      if (c.sizes_fit) size_fitting.push_back(&c);
      if (c.sizes_fit && c.records_fit) fitting.push_back(&c);
    }
    if (fitting.size() > 1) {
      throw Error(ErrorKind::config, "cannot infer the token dtype of '" + split.dir_.string() +
                                         "': both uint16 and uint32 are consistent with tokens.bin's size and "
                                         "episodes.idx; set token_dtype in dataset_metadata.json or in the config");
    }
    if (fitting.size() == 1) {
      chosen = fitting.front();
    } else if (!size_fitting.empty()) {
      chosen = size_fitting.front();
    } else {
      // Every even size fits uint16, so some tokens.bin has an odd size.
      const auto odd = std::find_if(split.shards_.begin(), split.shards_.end(),
                                    [](const EpisodeShard& s) { return s.tokens.size() % 2 != 0; });
      format_error("'" + odd->tokens.path().string() + "': size " + std::to_string(odd->tokens.size()) +
                   " bytes is not a multiple of 2 (uint16) or 4 (uint32)");
    }
  }
  split.token_dtype_ = chosen->dtype;
  return *chosen;
}

// Each shard's token count at the settled dtype, and every record within its tokens.bin.
void EpisodeSplit::Opening::check_records() {
  const std::size_t token_width = size_of(split.token_dtype_);
  for (std::size_t s = 0; s < split.shards_.size(); ++s) {
    EpisodeShard& shard = split.shards_[s];
    if (shard.tokens.size() % token_width != 0) {
      format_error("'" + shard.tokens.path().string() + "': size " + std::to_string(shard.tokens.size()) +
                   " bytes is not a multiple of " + std::to_string(token_width) + " (token dtype " +
                   to_string(split.token_dtype_) + ")");
    }
    shard.token_count = shard.tokens.size() / token_width;
    if (max_end[s] > shard.token_count) {
      // Some record ends past tokens.bin: find the first, to name it.
      for (std::uint64_t i = 0; i < shard.episodes; ++i) {
        const EpisodeSpan span = shard.span(i);
        if (span.start + span.length <= shard.token_count) continue;
        format_error("'" + shard.index.path().string() + "': record " + std::to_string(i) +
                     " (start=" + std::to_string(span.start) + ", length=" + std::to_string(span.length) +
                     ") ends past the end of tokens.bin (" + std::to_string(shard.token_count) + " tokens as " +
                     to_string(split.token_dtype_) + ")");
      }
    }
    split.total_tokens_ += shard.token_count;
  }
}

// The mask: validated whenever present (a damaged mask.bin is reported even by a run that
// does not use it, so that turning the mask on later cannot be the first sign), mapped
// only when asked for.
void EpisodeSplit::Opening::check_masks() {
  if (!split.mask_files_present_) return;
  std::error_code ec;
  std::optional<MaskDtype> dtype = options.mask_dtype;
  for (EpisodeShard& shard : split.shards_) {
    const fs::path path = shard.dir / "mask.bin";
    const std::uint64_t size = fs::file_size(path, ec);
    if (ec) throw Error(ErrorKind::io, "cannot read the size of '" + path.string() + "': " + ec.message());
    if (!dtype) {
      if (size == shard.token_count && shard.token_count != 0) {
        dtype = MaskDtype::uint8;
      } else if (size == shard.token_count * 4 && shard.token_count != 0) {
        dtype = MaskDtype::float32;
      } else if (shard.token_count == 0 && size == 0) {
        continue;  // an empty shard says nothing about the dtype
      }
    }
    const std::uint64_t width = dtype ? size_of(*dtype) : 1;
    if (!dtype || size != shard.token_count * width) {
      format_error("'" + path.string() + "': size " + std::to_string(size) + " bytes does not match tokens.bin's " +
                   std::to_string(shard.token_count) + " tokens" +
                   (dtype ? std::string(" at ") + to_string(*dtype) : std::string(" as uint8 or float32")));
    }
  }
  split.mask_file_dtype_ = dtype.value_or(MaskDtype::uint8);
  if (options.want_mask) {
    for (EpisodeShard& shard : split.shards_) shard.mask = MappedFile(shard.dir / "mask.bin");
    split.mask_dtype_ = split.mask_file_dtype_;
  }
  // A NaN or infinite loss weight would poison every gradient it reaches: refused here,
  // one sequential read of the float32 masks. (uint8 values above 1 read as 1; inspect
  // --deep reports them.)
  if (split.mask_file_dtype_ == MaskDtype::float32) {
    for (std::size_t s = 0; s < split.shards_.size(); ++s) {
      const EpisodeShard& shard = split.shards_[s];
      const MappedFile scratch = options.want_mask ? MappedFile() : MappedFile(shard.dir / "mask.bin");
      const MappedFile& mask = options.want_mask ? shard.mask : scratch;
      const MaskValueCount bad = scan_mask_values(mask.bytes(), MaskDtype::float32).not_finite;
      if (bad.count == 0) continue;
      format_error("'" + (shard.dir / "mask.bin").string() + "': " + std::to_string(bad.count) + " float32 mask value" +
                   (bad.count == 1 ? " is" : "s are") + " NaN or infinite (first: " + std::to_string(bad.first_value) +
                   " at value offset " + std::to_string(bad.first_offset) + split.locate(s, bad.first_offset) +
                   "); loss weights must be finite");
    }
  }
}

namespace {

// The files of a split read as documents must all index them and share one token dtype.
void check_document_files(const std::vector<StreamFile>& files) {
  const StreamFile* first = nullptr;
  for (const StreamFile& f : files) {
    if (!f.document_starts) {
      format_error("'" + f.map.path().string() +
                   "' does not index its documents (neither a Megatron NAME.bin + NAME.idx pair nor a datatrove "
                   "NAME.ds + NAME.ds.index), so sft_episode and sft_packed cannot read its documents as episodes; "
                   "use dataset_mode=token_stream, or prepare it with prepare-text --format episodes");
    }
    if (first != nullptr && f.dtype != first->dtype) {
      format_error("'" + f.map.path().string() + "' holds " + to_string(f.dtype) + " tokens but '" +
                   first->map.path().string() + "' " + to_string(first->dtype) +
                   ": the documents of one split are read as episodes of one token dtype");
    }
    if (first == nullptr) first = &f;
  }
}

// The runs of file `file`'s documents that `ranges` (a split by document hash, in file
// order) hold from ranges[next] on, as a shard's runs, and their document count; `next`
// moves past them (one pass over the ranges for all the files).
std::uint64_t shard_runs(const std::vector<DocumentRange>& ranges, std::size_t file, std::size_t& next,
                         std::vector<EpisodeShard::DocumentRun>& runs) {
  std::uint64_t episodes = 0;
  for (; next < ranges.size() && ranges[next].file == file; ++next) {
    runs.push_back({episodes, ranges[next].first_document});
    episodes += ranges[next].documents;
  }
  return episodes;
}

}  // namespace

EpisodeSplit EpisodeSplit::open_documents(const fs::path& dataset_dir, const std::string& split_name,
                                          const EpisodeSplitOptions& options, const std::string& val_prefix,
                                          DocumentHashSplit by_hash) {
  TokenStreamSplit stream = TokenStreamSplit::open(dataset_dir, split_name, options.token_dtype, val_prefix, by_hash);
  const std::uint64_t stream_fingerprint = stream.fingerprint();
  const std::uint64_t stream_tokens = stream.total_tokens();  // with by_hash: the split's documents' only
  const std::vector<DocumentRange> ranges = stream.ranges();
  std::vector<StreamFile> files = std::move(stream).take_files();
  check_document_files(files);
  EpisodeSplit split;
  split.dir_ = dataset_dir / split_name;
  split.token_dtype_ = files.front().dtype;  // TokenStreamSplit::open found at least one file
  std::size_t next_range = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    StreamFile& f = files[i];
    EpisodeShard shard;
    shard.dir = f.map.path();
    shard.documents = f.document_starts;
    shard.first_episode = split.num_episodes_;
    shard.episodes = by_hash.fraction > 0.0 ? shard_runs(ranges, i, next_range, shard.runs) : *f.documents;
    shard.token_count = f.tokens;
    for (std::uint64_t d = 0; d < shard.episodes; ++d) {
      split.shortest_episode_ = std::min(split.shortest_episode_, shard.span(d).length);
    }
    split.num_episodes_ += shard.episodes;
    shard.tokens = std::move(f.map);
    split.shards_.push_back(std::move(shard));
  }
  split.total_tokens_ = stream_tokens;
  if (by_hash.fraction > 0.0 && split.num_episodes_ == 0) {
    throw Error(ErrorKind::config, "config key 'val_fraction' (" + std::to_string(by_hash.fraction) + ") leaves " +
                                       split_name + " no document of '" + dataset_dir.string() + "' (val_seed " +
                                       std::to_string(by_hash.seed) + "); raise it, or change val_seed");
  }
  // The stream's fingerprint names the split, the fraction and the seed under by_hash.
  Hasher hasher;
  hasher.add(std::string_view("documents of a token stream"));
  hasher.add(stream_fingerprint);
  split.fingerprint_ = hasher.digest();
  return split;
}

std::size_t EpisodeSplit::shard_of(std::uint64_t episode) const noexcept {
  return EpisodeSpans::shard_index(shards_, episode);
}

EpisodeData EpisodeSplit::data(std::uint64_t episode) const noexcept {
  const EpisodeShard& shard = shards_[shard_of(episode)];
  const EpisodeSpan span = shard.span(episode - shard.first_episode);
  EpisodeData d;
  d.tokens = shard.tokens.bytes().data() + span.start * size_of(token_dtype_);
  if (mask_dtype_) d.mask = shard.mask.bytes().data() + span.start * size_of(*mask_dtype_);
  d.length = span.length;
  return d;
}

std::uint32_t EpisodeSplit::token_at(std::size_t shard, std::uint64_t offset) const noexcept {
  const std::byte* base = shards_[shard].tokens.bytes().data();
  if (token_dtype_ == TokenDtype::uint16) {
    std::uint16_t v;
    std::memcpy(&v, base + 2 * offset, 2);
    return v;
  }
  std::uint32_t v;
  std::memcpy(&v, base + 4 * offset, 4);
  return v;
}

void EpisodeSplit::read_tokens(std::uint64_t episode, std::uint64_t first, std::size_t count,
                               std::int64_t* out) const noexcept {
  const EpisodeShard& shard = shards_[shard_of(episode)];
  const std::uint64_t begin = shard.span(episode - shard.first_episode).start + first;
  const std::byte* tokens = shard.tokens.bytes().data();
  if (token_dtype_ == TokenDtype::uint16) {
    const auto* src = reinterpret_cast<const std::uint16_t*>(tokens) + begin;
    for (std::size_t i = 0; i < count; ++i) out[i] = src[i];
  } else {
    const auto* src = reinterpret_cast<const std::uint32_t*>(tokens) + begin;
    for (std::size_t i = 0; i < count; ++i) out[i] = src[i];
  }
}

std::string EpisodeSplit::locate(std::size_t shard_index, std::uint64_t offset) const {
  const EpisodeShard& shard = shards_[shard_index];
  for (std::uint64_t i = 0; i < shard.episodes; ++i) {
    const EpisodeSpan span = shard.span(i);
    if (offset >= span.start && offset - span.start < span.length) {
      return ", episode " + std::to_string(shard.first_episode + i) + " position " +
             std::to_string(offset - span.start);
    }
  }
  return ", in no episode";
}

void EpisodeSplit::read_mask(std::uint64_t episode, std::uint64_t first, std::size_t count,
                             float* out) const noexcept {
  const EpisodeShard& shard = shards_[shard_of(episode)];
  const std::uint64_t begin = shard.span(episode - shard.first_episode).start + first;
  const std::byte* mask = shard.mask.bytes().data();
  if (*mask_dtype_ == MaskDtype::uint8) {
    const auto* src = reinterpret_cast<const std::uint8_t*>(mask) + begin;
    for (std::size_t i = 0; i < count; ++i) out[i] = src[i] != 0 ? 1.0f : 0.0f;
  } else {
    const auto* src = reinterpret_cast<const float*>(mask) + begin;
    for (std::size_t i = 0; i < count; ++i) out[i] = src[i];  // float masks are weights: kept as they are
  }
}

void EpisodeSplit::prefetch_episode(std::uint64_t episode, std::size_t max_tokens) const noexcept {
  const EpisodeShard& shard = shards_[shard_of(episode)];
  const EpisodeSpan span = shard.span(episode - shard.first_episode);
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(span.length, max_tokens));
  const std::size_t width = size_of(token_dtype_);
  shard.tokens.will_need(static_cast<std::size_t>(span.start) * width, n * width);
  if (mask_dtype_) {
    const std::size_t mwidth = size_of(*mask_dtype_);
    shard.mask.will_need(static_cast<std::size_t>(span.start) * mwidth, n * mwidth);
  }
}

void EpisodeSplit::check_intact() const {
  for (const EpisodeShard& shard : shards_) {
    shard.index.check_intact();
    shard.tokens.check_intact();
    shard.mask.check_intact();
  }
}

void EpisodeSplit::advise_random_access() const noexcept {
  for (const EpisodeShard& shard : shards_) {
    shard.tokens.advise_random();
    shard.mask.advise_random();
  }
}

IdList kept_episodes(const EpisodeSplit& split, std::uint64_t min_tokens) {
  if (min_tokens <= split.shortest_episode()) return IdList::iota(split.num_episodes());
  IdList kept = IdList::for_ids_below(split.num_episodes(), static_cast<std::size_t>(split.num_episodes()));
  for (const EpisodeShard& shard : split.shards()) {
    for (std::uint64_t i = 0; i < shard.episodes; ++i) {
      if (shard.span(i).length >= min_tokens) kept.push_back(shard.first_episode + i);
    }
  }
  return kept;
}

}  // namespace tokenfeed
