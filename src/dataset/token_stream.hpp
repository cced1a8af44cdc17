// TokenStreamSplit: one split of a token-stream (pretraining) dataset, opened, validated
// and memory-mapped.
//
// Layouts: DATASET/<split>.bin (one flat file), or DATASET/<split>/ holding shard files
// *.bin and *.npy, taken in sorted name order. Tokens are numbered globally across files
// in that order. .npy files carry their dtype and shape (1-D, little-endian uint16 or
// uint32, C order); .bin files take the dtype given (dataset_metadata.json or config),
// and so does a .npy file without the .npy magic (a headerless memmap, as OLMo-core and
// nanoGPT write them), read as flat tokens.
//
// Megatron pairs may also sit directly in DATASET (neither <split>.bin nor <split>/ there):
// every NAME.bin + NAME.idx is train, in name order, but those whose NAME starts with
// `val_prefix`, which form val.
//
// A NAME.bin with NAME.idx beside it (DATASET/<split>.bin + <split>.idx, a pair in
// DATASET/<split>/, or in DATASET itself) is a Megatron-LM indexed dataset: its .bin is read in place as flat
// tokens of the dtype its .idx names, and its documents come from the .idx
// (megatron_index.hpp, which validates the pair). An .idx without its .bin is an error.
//
// A NAME.ds in DATASET/<split>/ is a datatrove tokenized file (datatrove_index.hpp): flat
// tokens of the size its NAME.ds.metadata names (else the dtype given), its documents from
// NAME.ds.index, which must be beside it.
//
// Beside shard NAME.npy (or NAME.bin), NAME.docs.npy may hold its document start offsets
// (`tokenfeed prepare-text`): 1-D little-endian uint64, one entry per document, the first
// 0, strictly increasing, each below the shard's token count. It is never a shard. open()
// validates it (a docs file without its shard, or bad contents, is Error(format) naming
// it) and records its document count; batches do not use it.
//
// Thread-safety: immutable after open(); const members may be called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/mapped_file.hpp"
#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

// Where a file's documents start, from an index beside it (a Megatron .idx, a datatrove
// .ds.index): document-aware batches take their boundaries from here instead of from an
// end-of-text id, and the SFT modes read each document as an episode (episode_dataset.hpp).
class DocumentStarts {
 public:
  virtual ~DocumentStarts() = default;
  // The token offset where document `d` starts; d == the file's document count gives its
  // token count. Never past the token count. REQUIRES: d <= the document count.
  virtual std::uint64_t document_start(std::uint64_t d) const noexcept = 0;
  // The smallest token offset greater than `token` at which a document starts, or
  // UINT64_MAX when none does.
  virtual std::uint64_t next_start_after(std::uint64_t token) const noexcept = 0;
  // Throws Error(io) when the index was truncated while mapped (MappedFile::check_intact).
  virtual void check_intact() const = 0;
};

// How a file's tokens are laid out and where its dtype comes from.
enum class StreamFileFormat {
  npy,        // a .npy file: its header says
  raw,        // flat tokens (.bin, or .npy without a header): the dtype given
  megatron,   // a Megatron .bin: its .idx says, and holds the documents
  datatrove,  // a datatrove .ds: its .ds.metadata says (else the dtype given), its .ds.index holds the documents
};

struct StreamFile {
  MappedFile map;
  StreamFileFormat format = StreamFileFormat::raw;
  TokenDtype dtype = TokenDtype::uint16;
  std::size_t data_offset = 0;     // bytes before the first token (the .npy header)
  std::uint64_t tokens = 0;
  std::uint64_t first_token = 0;   // global offset of its first token
  std::optional<std::uint64_t> documents;                 // entries of its NAME.docs.npy, or its .idx's documents
  std::shared_ptr<const DocumentStarts> document_starts;  // a Megatron file's .idx, a datatrove file's .ds.index
  std::string tokenizer;  // a datatrove file's tokenizer, from its .ds.metadata (empty without one)
};

// A run of whole documents of one file that a split chosen by document hash holds
// (document_split.hpp); the split's tokens are its runs one after another.
struct DocumentRange {
  std::size_t file = 0;
  std::uint64_t offset = 0;  // its first token in the file
  std::uint64_t tokens = 0;
  std::uint64_t first_token = 0;     // where it starts in the split's concatenation of runs
  std::uint64_t first_document = 0;  // its first document's index in the file
  std::uint64_t documents = 0;
};

// A val split made of a fraction of the documents (Config::val_fraction, val_seed).
struct DocumentHashSplit {
  double fraction = 0.0;  // 0: off
  std::uint64_t seed = 0;
};

class TokenStreamSplit {
 public:
  // Throws Error(io) when the split is missing, Error(format) for invalid files and
  // Error(config) for a .bin (or headerless .npy) file whose dtype is not given.
  // `val_prefix`: for Megatron pairs placed directly in dataset_dir, the name prefix of
  // val's pairs (empty: every pair is train).
  // `by_hash` (fraction > 0): both splits read train's files, which must all index their
  // documents (else Error(format) naming the first that does not); the split holds the
  // documents document_split.hpp assigns it, as ranges(). A dataset with a val split of its
  // own, or a train left without a document, is Error(config) naming val_fraction.
  static TokenStreamSplit open(const std::filesystem::path& dataset_dir, const std::string& split,
                               std::optional<TokenDtype> bin_dtype, const std::string& val_prefix = {},
                               DocumentHashSplit by_hash = {});

  // True when the dataset has this split in a token-stream layout (val, with by_hash: when
  // train has).
  static bool has_split(const std::filesystem::path& dataset_dir, const std::string& split,
                        const std::string& val_prefix = {}, DocumentHashSplit by_hash = {});

  const std::vector<StreamFile>& files() const noexcept { return files_; }
  // The files, moved out (EpisodeSplit::open_documents keeps their maps and indexes).
  std::vector<StreamFile> take_files() && noexcept { return std::move(files_); }
  // The split's tokens: every file's, or with ranges() only theirs.
  std::uint64_t total_tokens() const noexcept { return total_tokens_; }
  // The runs of documents the split holds when it was chosen by document hash, in order;
  // empty when the split is its files whole.
  const std::vector<DocumentRange>& ranges() const noexcept { return ranges_; }
  // With ranges(): where the documents of the concatenation of the runs start (every run's
  // first token too), in its offsets. Null without ranges().
  const DocumentStarts* range_starts() const noexcept { return range_starts_.get(); }
  // With ranges(): the run holding concatenation offset `token`. REQUIRES: token < total_tokens().
  std::size_t range_of(std::uint64_t token) const noexcept;
  // The dtype shared by every file, or nullopt when they differ.
  std::optional<TokenDtype> common_dtype() const noexcept;
  std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  bool flat() const noexcept { return flat_; }

  // Copies tokens [offset, offset+count) of file `file` into `out`, widened to int64.
  // REQUIRES: in range.
  void read(std::size_t file, std::uint64_t offset, std::size_t count, std::int64_t* out) const noexcept;
  std::uint32_t token_at(std::size_t file, std::uint64_t offset) const noexcept;
  void will_need(std::size_t file, std::uint64_t offset, std::size_t count) const noexcept;
  // Throws Error(io) for a file truncated while mapped (MappedFile::check_intact).
  void check_intact() const;

 private:
  static TokenStreamSplit open_by_hash(const std::filesystem::path& dataset_dir, const std::string& split,
                                       std::optional<TokenDtype> bin_dtype, const std::string& val_prefix,
                                       DocumentHashSplit by_hash);

  std::vector<StreamFile> files_;
  std::vector<DocumentRange> ranges_;
  std::shared_ptr<const DocumentStarts> range_starts_;
  std::uint64_t total_tokens_ = 0;
  std::uint64_t fingerprint_ = 0;
  bool flat_ = false;
};

}  // namespace tokenfeed
