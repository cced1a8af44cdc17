// CorpusShardWriter: one split of a prepared pretraining corpus (prepare-text), written
// document by document into shards cut only at document ends, and resumable at any point
// the caller recorded after sync(): the finished shards and the open shard's size.
//
// Layouts under the split directory:
//   tokens    shard_NNNNN.npy       the documents' tokens, 1-D, uint16 or uint32
//             shard_NNNNN.docs.npy  uint64, one entry per document: its first token's offset
//                                   in the shard (0 first, strictly increasing)
//   episodes  shard_NNNNN/tokens.bin, shard_NNNNN/episodes.idx (the episode-indexed format:
//             records of two little-endian uint64, offset and length; no mask.bin, so every
//             position is trained)
// A shard holds at most shard_tokens tokens, except a single document longer than that,
// which makes a shard of its own. Finished shards are final; the open shard's files grow by
// appending (a .npy's header gives its length only once the shard is finished).
//
// Thread-safety: used by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenfeed/dtype.hpp"
#include "tokenfeed/prepare_text.hpp"

namespace tokenfeed {

struct CorpusShard {
  std::uint64_t tokens = 0;
  std::uint64_t documents = 0;
  std::map<std::string, std::string> sha256;  // file (relative to the split directory) -> hex
};

// Shard `index`'s name (shard_NNNNN), and its files relative to the split directory: the data
// file first, then the index file (tokens: shard_NNNNN.npy, shard_NNNNN.docs.npy; episodes:
// shard_NNNNN/tokens.bin, shard_NNNNN/episodes.idx).
std::string shard_name(std::uint64_t index);
std::vector<std::string> corpus_shard_files(CorpusFormat format, std::uint64_t index);

// Where a split stands: enough to resume it exactly.
struct CorpusSplitState {
  std::vector<CorpusShard> finished;
  std::uint64_t open_tokens = 0;  // of the open shard
  std::uint64_t open_documents = 0;
};

class CorpusShardWriter {
 public:
  // Creates `split_dir` when missing. REQUIRES: shard_tokens > 0.
  CorpusShardWriter(std::filesystem::path split_dir, CorpusFormat format, TokenDtype dtype, std::uint64_t shard_tokens);
  ~CorpusShardWriter();
  CorpusShardWriter(const CorpusShardWriter&) = delete;
  CorpusShardWriter& operator=(const CorpusShardWriter&) = delete;

  // Takes up a split an earlier run left at `state`: the finished shards must be there with
  // their sizes, the open shard's files at least as long as recorded (they are cut back
  // to it), and no other shard. Throws Error(format) naming the file that does not match.
  // REQUIRES: nothing added yet.
  void restore(const CorpusSplitState& state);

  // Appends a document: the concatenation of `pieces` (a begin-of-text id, the text's ids,
  // an end-of-text id), written piece by piece, so that a long document is never copied
  // whole. When the open shard cannot take it without passing shard_tokens, the shard is
  // finished first and shard_finished() called (the moment to sync() and record where the
  // split stands), then the document starts the next shard. Throws Error(io) on write
  // errors. REQUIRES: the pieces not all empty, each id fits the dtype.
  template <typename ShardFinished>
  void add(std::span<const std::span<const std::uint32_t>> pieces, ShardFinished&& shard_finished) {
    std::uint64_t tokens = 0;
    for (const auto& piece : pieces) tokens += piece.size();
    if (open_tokens_ > 0 && open_tokens_ + tokens > shard_tokens_) {
      finish_shard();
      shard_finished();
    }
    append(pieces, tokens);
  }

  // Flushes the open shard's files to disk (fsync), so that a run killed right after can
  // resume from the split as it stands: finished_shards(), open_tokens(), open_documents().
  void sync();
  // Finishes the open shard, if it holds anything. Then nothing more may be added.
  void finish();

  std::uint64_t tokens() const noexcept;     // all shards
  std::uint64_t documents() const noexcept;  // all shards
  const std::vector<CorpusShard>& finished_shards() const noexcept { return finished_; }
  std::uint64_t open_tokens() const noexcept { return open_tokens_; }
  std::uint64_t open_documents() const noexcept { return open_documents_; }

 private:
  struct OpenFiles;
  void open_shard(bool resume, std::uint64_t tokens, std::uint64_t documents);
  void append(std::span<const std::span<const std::uint32_t>> pieces, std::uint64_t tokens);
  void finish_shard();
  std::filesystem::path shard_file(std::uint64_t index, bool index_file) const;
  std::uint64_t file_bytes(std::uint64_t tokens, std::uint64_t documents, bool index_file) const;

  std::filesystem::path split_dir_;
  CorpusFormat format_;
  TokenDtype dtype_;
  std::uint64_t shard_tokens_;
  std::vector<CorpusShard> finished_;
  std::uint64_t open_tokens_ = 0, open_documents_ = 0;
  std::unique_ptr<OpenFiles> open_;
  std::vector<std::uint16_t> narrow_;  // a piece's ids as uint16, a bounded run at a time
};

}  // namespace tokenfeed
