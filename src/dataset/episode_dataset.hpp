// EpisodeSplit: one split (train/ or val/) of an episode-indexed dataset, opened,
// validated and memory-mapped.
//
// Layout: the split directory holds tokens.bin, episodes.idx and optional mask.bin, or
// shard directories shard_00000/, shard_00001/, ... each holding those files, taken in
// sorted name order. Episode ids are global across shards in that order. episodes.idx is
// little-endian uint64 pairs (start, length), start being an offset into the shard's own
// tokens.bin.
//
// A token stream whose files index their documents (Megatron NAME.bin + NAME.idx, datatrove
// NAME.ds + NAME.ds.index; token_stream.hpp) opens as an episode split too
// (open_documents): each file is a shard, each of its documents an episode with every
// token trained (no mask), read through the file's index where it is mapped. With
// val_fraction (DocumentHashSplit) a split holds the documents document_split.hpp assigns
// it: each file is still a shard, its episodes the split's documents of it in index order
// (EpisodeShard::runs maps them to the file's documents).
//
// Nothing of the files is copied into memory: episodes.idx, tokens and masks are read
// through mmap (spans() reads the index records where they are mapped), so a split of
// 100M episodes holds a few hundred bytes per shard. A file truncated while mapped reads
// as zeros past its new end (an empty episode at offset 0, for the index) until
// check_intact() reports it.
// Thread-safety: immutable after open(); all const members may be called concurrently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataset/token_stream.hpp"
#include "io/mapped_file.hpp"
#include "tokenfeed/dtype.hpp"
#include "util/id_list.hpp"

namespace tokenfeed {

struct EpisodeSpan {
  std::uint64_t start = 0;   // token offset in its shard's tokens.bin
  std::uint64_t length = 0;  // tokens
};

struct EpisodeShard {
  std::filesystem::path dir;  // a foreign file's shard: the file (NAME.bin, NAME.ds)
  MappedFile tokens;
  MappedFile mask;                  // empty (size 0, no path) when not mapped
  MappedFile index;                 // episodes.idx: `episodes` records of 16 bytes (empty for a foreign file)
  std::shared_ptr<const DocumentStarts> documents;  // a foreign file's index, whose documents are the episodes
  // A foreign file under a split by document hash: the runs of its documents the split
  // holds, in order (empty: every document). Episode `first_episode` of a run (counted in
  // this shard) is document `first_document` of the file, the next ones follow it.
  struct DocumentRun {
    std::uint64_t first_episode = 0;
    std::uint64_t first_document = 0;
  };
  std::vector<DocumentRun> runs;
  std::uint64_t first_episode = 0;  // global id of its first episode
  std::uint64_t episodes = 0;
  std::uint64_t token_count = 0;
  bool has_mask_file = false;

  // Record `record` of episodes.idx (little-endian start, length), or document `record` of
  // a foreign file. REQUIRES: record < episodes.
  EpisodeSpan span(std::uint64_t record) const noexcept {
    EpisodeSpan s;
    if (documents) {  // starts are validated non-decreasing; bounded should the index change under us
      const std::uint64_t d = document_of(record);
      s.start = documents->document_start(d);
      const std::uint64_t end = documents->document_start(d + 1);
      s.length = end > s.start ? end - s.start : 0;
      return s;
    }
    const std::byte* p = index.bytes().data() + 16 * record;
    std::memcpy(&s.start, p, 8);
    std::memcpy(&s.length, p + 8, 8);
    return s;
  }

  // A foreign file's document that episode `record` of this shard is (itself without runs).
  std::uint64_t document_of(std::uint64_t record) const noexcept {
    if (runs.empty()) return record;
    const auto it = std::upper_bound(runs.begin(), runs.end(), record,
                                     [](std::uint64_t r, const DocumentRun& run) { return r < run.first_episode; });
    const DocumentRun& run = *std::prev(it);  // runs.front().first_episode is 0
    return run.first_document + (record - run.first_episode);
  }
};

// The index of a split as an indexable sequence of spans, read from the shards' mapped
// episodes.idx: spans[id] finds id's shard (a binary search over the shards) and reads its
// record. A small value; valid while the split it came from lives.
class EpisodeSpans {
 public:
  EpisodeSpans(std::span<const EpisodeShard> shards, std::uint64_t count) noexcept : shards_(shards), count_(count) {}
  std::uint64_t size() const noexcept { return count_; }
  // REQUIRES: id < size().
  EpisodeSpan operator[](std::uint64_t id) const noexcept {
    const EpisodeShard& shard = shards_[shard_index(shards_, id)];
    return shard.span(id - shard.first_episode);
  }

  // The shard holding global episode `id` (the last shard whose first episode is <= id, so
  // empty shards are skipped). REQUIRES: id < the shards' episodes.
  static std::size_t shard_index(std::span<const EpisodeShard> shards, std::uint64_t id) noexcept {
    const auto it = std::upper_bound(shards.begin(), shards.end(), id,
                                     [](std::uint64_t v, const EpisodeShard& s) { return v < s.first_episode; });
    return static_cast<std::size_t>(it - shards.begin()) - 1;
  }

 private:
  std::span<const EpisodeShard> shards_;
  std::uint64_t count_ = 0;
};

// One episode's data where it is mapped, found once (a search over the shards and a read
// of its index record) for the several reads of a row. Valid while its split lives.
struct EpisodeData {
  const std::byte* tokens = nullptr;  // its first token, in the split's token dtype
  const std::byte* mask = nullptr;    // its first mask value; null when masks are not mapped
  std::uint64_t length = 0;           // tokens
};

struct EpisodeSplitOptions {
  std::optional<TokenDtype> token_dtype;  // metadata, else config; absent: infer
  std::optional<MaskDtype> mask_dtype;    // metadata, else config; absent: infer
  bool want_mask = false;                 // map mask.bin (use_loss_mask)
};

class EpisodeSplit {
 public:
  // Opens and validates `split_dir`. Throws Error(io) for missing directories or files and
  // Error(format) for invalid content, naming the file and record.
  static EpisodeSplit open(const std::filesystem::path& split_dir, const EpisodeSplitOptions& options = {});
  // Opens split `split` of the token stream in `dataset_dir` (TokenStreamSplit::open, which
  // validates its files; `val_prefix` as there) as an episode split whose episodes are its
  // files' documents, in file order, without masks. Every file must index its documents
  // (a Megatron pair or a datatrove file) and all must share one token dtype; otherwise
  // Error(format) naming the file. options.token_dtype is not used: the files say.
  // `by_hash` (fraction > 0): the split is the documents of train's files that
  // TokenStreamSplit::open assigns it (its refusals apply), episode ids numbering them in
  // order; a split left without a document is Error(config) naming val_fraction.
  static EpisodeSplit open_documents(const std::filesystem::path& dataset_dir, const std::string& split,
                                     const EpisodeSplitOptions& options, const std::string& val_prefix = {},
                                     DocumentHashSplit by_hash = {});

  // True when `split_dir` holds an episode-indexed layout (episodes.idx directly or in
  // shard_* directories); used for dataset_mode auto-detection.
  static bool looks_like_episode_split(const std::filesystem::path& split_dir);

  const std::filesystem::path& dir() const noexcept { return dir_; }
  TokenDtype token_dtype() const noexcept { return token_dtype_; }
  // The mask dtype when masks are mapped (want_mask and mask.bin in every shard).
  std::optional<MaskDtype> mask_dtype() const noexcept { return mask_dtype_; }
  bool has_mask() const noexcept { return mask_dtype_.has_value(); }
  // mask.bin exists in the shards (whether or not it was mapped), and its validated dtype.
  bool mask_files_present() const noexcept { return mask_files_present_; }
  std::optional<MaskDtype> mask_file_dtype() const noexcept { return mask_file_dtype_; }

  std::uint64_t num_episodes() const noexcept { return num_episodes_; }
  std::uint64_t total_tokens() const noexcept { return total_tokens_; }
  // The episodes' spans, read from the mapped index: spans()[id].
  EpisodeSpans spans() const noexcept { return EpisodeSpans(shards_, num_episodes_); }
  // The length of the shortest episode (UINT64_MAX when there is none).
  std::uint64_t shortest_episode() const noexcept { return shortest_episode_; }
  const std::vector<EpisodeShard>& shards() const noexcept { return shards_; }
  // A hash of the layout, dtypes and index content: changes when the data would.
  std::uint64_t fingerprint() const noexcept { return fingerprint_; }

  std::size_t shard_of(std::uint64_t episode) const noexcept;
  // Where `episode`'s tokens and mask are. REQUIRES: episode < num_episodes().
  EpisodeData data(std::uint64_t episode) const noexcept;
  // Hints the CPU to load `episode`'s index record, without waiting for it: a row's
  // first read (data()) is of a record at a random place in the index, a cache (and TLB)
  // miss that hints issued a few rows ahead overlap. REQUIRES: episode < num_episodes().
  void prefetch_record(std::uint64_t episode) const noexcept {
    const EpisodeShard& shard = shards_[shard_of(episode)];
    if (shard.documents) return;  // found through the foreign index's arrays: nothing to hint
    __builtin_prefetch(shard.index.bytes().data() + 16 * (episode - shard.first_episode));
  }
  // Where token offset `offset` of shard `shard` lies, for messages: ", episode E position P"
  // or ", in no episode".
  std::string locate(std::size_t shard, std::uint64_t offset) const;

  // Copies tokens [first, first+count) of `episode` into `out`, widened to int64.
  // REQUIRES: episode < num_episodes(), first + count <= the episode's length.
  void read_tokens(std::uint64_t episode, std::uint64_t first, std::size_t count, std::int64_t* out) const noexcept;
  // Copies mask values [first, first+count) of `episode` into `out` (uint8 masks as 0/1,
  // any non-zero byte reading as 1; float32 masks as they are, which open() checked to be
  // finite). REQUIRES: has_mask(), and the range as for read_tokens.
  void read_mask(std::uint64_t episode, std::uint64_t first, std::size_t count, float* out) const noexcept;

  // Reads one token / mask value (0 or 1 as float). REQUIRES: in range.
  std::uint32_t token_at(std::size_t shard, std::uint64_t offset) const noexcept;

  // Hints the kernel to read the episode's first `max_tokens` tokens (and mask) ahead.
  void prefetch_episode(std::uint64_t episode, std::size_t max_tokens) const noexcept;
  // Hints that tokens and masks will be read at random, an episode at a time (training
  // in shuffled order): page faults stop reading around (MappedFile::advise_random), and
  // prefetch_episode brings in what upcoming batches need. Not for sequential scans.
  void advise_random_access() const noexcept;
  // Throws Error(io) for an episodes.idx, tokens.bin or mask.bin truncated while mapped
  // (MappedFile::check_intact).
  void check_intact() const;

 private:
  struct Opening;  // open()'s steps (episode_dataset.cpp)

  std::filesystem::path dir_;
  TokenDtype token_dtype_ = TokenDtype::uint32;
  std::optional<MaskDtype> mask_dtype_;       // when mapped
  std::optional<MaskDtype> mask_file_dtype_;  // when present
  bool mask_files_present_ = false;
  std::vector<EpisodeShard> shards_;
  std::uint64_t num_episodes_ = 0;
  std::uint64_t shortest_episode_ = UINT64_MAX;
  std::uint64_t total_tokens_ = 0;
  std::uint64_t fingerprint_ = 0;
};

// Global ids of the episodes with length >= min_tokens, ascending: stored as nothing when
// every episode is kept (min_tokens <= shortest_episode()), else in 4 bytes an id when
// there are fewer than 2^32 episodes (IdList).
IdList kept_episodes(const EpisodeSplit& split, std::uint64_t min_tokens);

}  // namespace tokenfeed
