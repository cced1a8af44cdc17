// What `inspect_dataset` is asked (InspectRequest) and what it finds (DatasetReport): a
// dataset directory described and validated split by split, as plain values, so that
// `tokenfeed inspect` prints it and Python's `tokenfeed.inspect()` hands it back as a dict
// with the same figures.
//
// The verdicts follow the loader: a split the loader would refuse (a file it cannot open or
// validate, no episode left after filtering, no window at the given block size), or a
// dataset without train, is INVALID, with the error the loader would raise. `deep` adds
// checks the loader does not make (token ids against vocab_size, uint8 mask values other
// than 0 and 1, negative float32 weights, all-zero masks, the shards' content against the
// SHA-256 recorded in dataset_metadata.json); a failure of the first three kinds but the
// all-zero masks is also INVALID.
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenfeed/config.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

// The dataset to inspect and the run inspect assumes over it: the loader's defaults, one
// rank, every row of an epoch (epoch_drop_last=false).
struct InspectRequest {
  std::string dataset_dir;                // as given: the report and its messages quote it
  std::int64_t block_size = 0;            // 0: no truncation or window figures
  bool deep = false;                      // the checks the loader does not make (above)
  std::optional<std::int64_t> eos_id;     // overrides the metadata's end-of-text id (token streams)
  std::optional<TokenDtype> token_dtype;  // for files that do not record theirs (.bin streams, episodes)
  // val_fraction and val_seed: val as a fraction of train's documents chosen by hash
  // (Megatron pairs, datatrove files; docs/formats.md, "Val by document hash"), as a run
  // with these keys reads it, in either layout inspect reads (with packed: as episodes).
  double val_fraction = 0.0;
  std::int64_t val_seed = 0;
  // How a run with dataset_mode=sft_packed and these settings packs epoch 0 (episodes, or
  // the documents of Megatron pairs and datatrove files read as episodes; needs block_size).
  bool packed = false;
  std::int64_t pack_lookahead = 64;
  Truncation truncation = Truncation::right;
  std::int64_t seed = 1337;  // epoch_seed
  // context_parallel_size: > 1 pads each episode to a multiple of 2·cp, as such a run does
  // (docs/batch-contract.md, "Context parallelism").
  std::int64_t context_parallel_size = 1;
};

enum class DatasetLayout { episodes, token_stream };

// Where a split's token dtype came from.
enum class DtypeSource { metadata, given, inferred, npy_header, megatron_index, datatrove_metadata };
const char* to_string(DtypeSource source) noexcept;

// An error the loader would raise for the dataset.
struct Refusal {
  ErrorKind kind = ErrorKind::format;
  std::string message;
};

// Nearest-rank percentiles of lengths, in tokens.
struct LengthPercentiles {
  std::uint64_t min = 0, median = 0, p90 = 0, p99 = 0, max = 0;
};

// deep: token ids against dataset_metadata.json's vocab_size, the first offender located.
struct VocabCheck {
  std::int64_t vocab_size = 0;
  std::uint64_t out_of_vocab = 0;  // tokens >= vocab_size
  struct First {
    std::uint32_t token = 0;
    std::uint64_t offset = 0;  // token offset in `file`
    std::string file;
    std::optional<std::uint64_t> episode, position;  // episodes: where the offset lies
  };
  std::optional<First> first;
};

// deep: mask values no mask should hold (uint8 other than 0 and 1, which the loader trains
// as 1; float32 negative), the first offender located.
struct MaskValueCheck {
  MaskDtype dtype = MaskDtype::uint8;
  std::uint64_t count = 0;
  struct First {
    double value = 0;
    std::uint64_t offset = 0;  // value offset in `file`
    std::string file;
    std::optional<std::uint64_t> episode, position;
  };
  std::optional<First> first;
};

// deep: kept episodes with nothing to train on, an all-zero mask over their label
// positions mask[1:n].
struct AllZeroMasks {
  std::uint64_t count = 0;
  std::uint64_t kept = 0;                // of the kept episodes
  std::vector<std::uint64_t> first_ids;  // the first few ids
};

// deep: the split's shards against the SHA-256 recorded in dataset_metadata.json.
struct ChecksumCheck {
  bool recorded = false;              // whether the metadata records any for the split
  std::size_t shards = 0;             // shards checked
  std::vector<std::string> problems;  // empty: all match
};

// --packed: epoch 0 of sft_packed against one padded sft_episode row per sampled id.
struct PackingFigures {
  std::uint64_t packed_rows = 0, packed_positions = 0, packed_cells = 0;
  std::uint64_t episode_rows = 0, episode_positions = 0, episode_cells = 0;
  struct Cut {  // truncation=split: the documents it cuts into pieces
    std::uint64_t documents = 0, cut = 0, pieces = 0;
  };
  std::optional<Cut> split;
  std::uint64_t episode_min_tokens = 0;  // assumed, with the request's settings
};

// With block_size: what each truncation rule cuts of an episode split.
struct TruncationCost {
  Truncation rule = Truncation::right;
  std::uint64_t dropped_tokens = 0;
  std::optional<std::uint64_t> lost_trained_tokens;  // nullopt: no mask
};
struct EpisodeBlockFigures {
  std::uint64_t longer = 0;  // kept episodes longer than block_size + 1
  std::vector<TruncationCost> truncation;
  bool turns_known = false;  // drop_oldest_turns needs the metadata's special_tokens
  std::optional<PackingFigures> packing;
};

struct EpisodeFigures {
  bool flat = false;  // files directly in the split, not in shards
  std::size_t shards = 0;
  std::uint64_t episodes = 0, kept = 0, min_tokens = 0;
  std::uint64_t tokens = 0;
  TokenDtype dtype = TokenDtype::uint16;
  DtypeSource dtype_source = DtypeSource::inferred;
  std::optional<MaskDtype> mask;
  std::optional<LengthPercentiles> lengths;
  std::optional<EpisodeBlockFigures> block;   // with block_size and kept episodes
  std::optional<MaskValueCheck> mask_values;  // deep, with a mask
  std::optional<AllZeroMasks> all_zero;       // deep, with a mask
  bool documents = false;  // the documents of a token stream's files (Megatron, datatrove), each an episode
};

struct StreamFileFigures {
  std::string name;  // file name
  std::uint64_t tokens = 0;
  TokenDtype dtype = TokenDtype::uint16;
  DtypeSource dtype_source = DtypeSource::npy_header;
  std::optional<std::uint64_t> documents;  // from its .docs.npy, a Megatron file's .idx, a datatrove .ds.index
  std::string docs_file;                   // that file's name
  std::string tokenizer;                   // a datatrove file's, from its .ds.metadata
};

struct StreamFigures {
  bool flat = false;  // NAME.bin
  std::vector<StreamFileFigures> files;
  std::uint64_t tokens = 0;
  struct Windows {
    std::uint64_t epoch = 0, random_starts = 0;
  };
  std::optional<Windows> windows;  // with block_size
  struct Documents {
    std::int64_t eos = 0;
    std::uint64_t count = 0, trailing = 0;
    std::optional<LengthPercentiles> lengths;
  };
  std::optional<Documents> documents;  // nullopt: no end-of-text id known
  // With val_fraction: the split is the documents of train's files the hash assigns it
  // (`tokens` above is theirs); how many.
  struct ByHash {
    double fraction = 0.0;
    std::uint64_t seed = 0;
    std::uint64_t documents = 0, runs = 0;
  };
  std::optional<ByHash> by_hash;
};

struct SplitReport {
  std::string name;                        // train, val
  std::string dir;                         // episodes: the split's directory
  std::optional<EpisodeFigures> episodes;  // whichever layout the dataset has, when it opened
  std::optional<StreamFigures> stream;
  // deep: vocab (nullopt: dataset_metadata.json has no vocab_size); checksums (nullopt: a
  // flat token stream, which nothing records).
  std::optional<VocabCheck> vocab;
  std::optional<ChecksumCheck> checksums;
  // The split's layout-free content identity (dataset/layout_free_content.hpp), the same for
  // the same documents in any shards: its fingerprint (16 hex digits) when it opened, and
  // deep its SHA-256 over every byte (64 hex digits). Empty when not computed.
  std::string layout_free_fingerprint, content_sha256;
  std::string verdict;             // "ok" or "INVALID: why"
  std::optional<Refusal> refusal;  // what the loader would raise for this split
  bool bad_token_ids = false, bad_mask_values = false, bad_checksums = false;

  bool valid() const { return verdict == "ok"; }
};

// One line of the <training> snippet: <key>value</key> with an optional note.
struct SuggestedKey {
  std::string key, value, note;
};

struct DatasetReport {
  std::string dataset_dir;
  bool metadata_present = false;
  DatasetLayout layout = DatasetLayout::episodes;
  bool deep = false;
  std::int64_t block_size = 0;
  std::vector<SplitReport> splits;
  std::optional<std::string> val_ignored;    // why a val split is not read
  std::optional<std::string> missing_train;  // why the dataset has no train split
  std::optional<Refusal> failure;            // the error the verdicts add up to (none: valid)
  // A <training> config for the dataset, checked against what the loader needs (train
  // forms a batch, a token stream has a window in every split); empty when the loader
  // refuses the dataset (a deep check failing does not stop it loading).
  std::vector<SuggestedKey> suggested_config;
};

}  // namespace tokenfeed
