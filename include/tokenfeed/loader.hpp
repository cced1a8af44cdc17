// tokenfeed::Loader: fixed-shape training batches from a pre-tokenized dataset, prepared
// ahead of time on background threads so that get_batch only pops a ready batch.
//
//   tokenfeed::Loader loader(tokenfeed::load_config_file("train.xml"));
//   for (int step = 0; step < steps; ++step) {
//     tokenfeed::Batch batch = loader.get_batch("train");
//     train_step(batch.x(), batch.y(), batch.mask());
//   }                                  // the batch returns to the pool here
//   std::string state = loader.save_state();   // later: loader.load_state(state)
//
// Each split ("train", "val") has its own stream of batches and its own epochs, and its
// own pipeline, started on the first get_batch of that split. The output is a pure
// function of the dataset, the config and the step: identical for any decode_threads and
// prefetch_depth, and after save_state/load_state.
//
// Thread-safety: get_batch, save_state, load_state and set_mixture_weights must not be
// called concurrently with each other (one trainer thread). stop() may be called from any thread: it wakes a
// get_batch blocked on an empty ring, which then throws Error(usage), as does every
// get_batch after it (batches already prefetched are not handed out). The destructor
// returns promptly even while stages are busy or blocked.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/export.hpp"

namespace tokenfeed {

// What a split holds, as opened and validated.
struct SplitInfo {
  std::string name;
  std::uint64_t episodes = 0;       // in the index (sft_episode)
  std::uint64_t kept_episodes = 0;  // length >= episode_min_tokens (sft_episode)
  std::uint64_t windows = 0;        // token_stream: windows per epoch, or window starts (random)
  std::uint64_t tokens = 0;
  std::uint64_t shards = 0;         // shard directories, or token-stream files
  bool mask = false;                // the loss mask is returned
  std::uint64_t batches_per_epoch = 0;  // 0 in random mode; sft_packed: the current epoch's
  // Where the next batch comes from (what the trainer consumed so far decides it).
  std::uint64_t next_epoch = 0;
  std::uint64_t next_batch_in_epoch = 0;
};

// What dataset_metadata.json says about the vocabulary; nullopt for what it does not give
// (or when the dataset has no metadata file).
struct DatasetVocabulary {
  std::optional<std::int64_t> vocab_size;
  std::optional<std::int64_t> eot_token_id;
  std::optional<std::int64_t> eos_token_id;
  std::optional<SpecialTokenIds> special_tokens;  // the chat template's ids
};

// The token ids the loader settled, each by its one rule in the library, so that every
// front (C++, Python's Loader, `tokenfeed show`) reports the same ids; nullopt for none.
// The shape of one batch on this rank: rows() x cols() of its grid fields.
struct StepShape {
  std::size_t rows = 0;  // batch_size, or the shape_schedule's global_batch_size / data-parallel size
  std::size_t cols = 0;  // block_size (with context_parallel_split, this rank's share of it)
};

struct TokenIds {
  // What padding holds: the config's pad_token_id, else dataset_metadata.json's
  // pad_token_id, else its eot_token_id, else its eos_token_id (the SFT modes; token_stream
  // rows hold no padding, and have the config's pad_token_id only).
  std::optional<std::int64_t> pad;
  // What ends a document (document_aware's separator): the config's eos_token_id, else the
  // metadata's eos_token_id, else its eot_token_id.
  std::optional<std::int64_t> end_of_text;
  std::optional<std::int64_t> eot;  // the metadata's eot_token_id
  std::optional<std::int64_t> eos;  // the config's eos_token_id, else the metadata's
};

// Where this process sits in the parallel layout (Config::tensor_parallel_size and the
// keys after it; docs/distributed.md): the data-parallel coordinates slice each global
// batch, and every rank of one data-parallel group gets the same batches.
struct ParallelLayout {
  std::int64_t rank = 0;        // the process's global rank
  std::int64_t world_size = 1;  // the processes of the job
  std::int64_t data_parallel_rank = 0, data_parallel_size = 1;
  std::int64_t tensor_parallel_rank = -1, tensor_parallel_size = 1;      // -1: not derivable
  std::int64_t context_parallel_rank = -1, context_parallel_size = 1;    // -1: not derivable
  std::int64_t pipeline_parallel_rank = -1, pipeline_parallel_size = 1;  // -1: not derivable
  std::string order = "tp-cp-dp-pp";                                     // Config::parallel_order
  // The lowest global rank of this data-parallel group (-1 when the layout does not tell it:
  // data-parallel coordinates given directly that the derivation does not give), and
  // whether that is this process.
  std::int64_t leader_rank = -1;
  bool data_leader = false;
  // "derived", or "data_parallel_rank/data_parallel_size from the config".
  std::string source;
};

// Consumer-side counters for one split, since the loader was created.
struct SplitStats {
  std::uint64_t batches = 0;      // returned by get_batch
  std::uint64_t waits = 0;        // get_batch calls that found the ring empty
  double total_wait_us = 0;
  double max_wait_us = 0;
  std::uint64_t prefetch_depth = 0;
  std::uint64_t decode_threads = 0;
};

class TOKENFEED_API Loader {
 public:
  // Opens and validates the dataset (train/ always, val/ when present). Throws Error.
  explicit Loader(Config config);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of `split` ("train" or "val"). Blocks while none is ready. Rethrows a
  // background stage's failure with its original message. At most
  // Config::max_held_batches batches of a split may be held at once; one more is
  // Error(usage), not a deadlock. With data_loading=group_leader, a rank that is not its
  // data-parallel group's leader holds no pipeline: get_batch, try_get_batch and save_state
  // are Error(usage) there (it receives the leader's batches, and the leader's state is
  // its own).
  Batch get_batch(std::string_view split = "train");

  // As get_batch, but waits at most `timeout` for a batch to be ready: nullopt when none
  // was, and nothing is consumed then. For a caller that must do something else while it
  // waits (the Python module checks for Ctrl-C between short waits): a call made within
  // 10 ms of one that timed out continues its wait (Batch::wait_us counts from the first).
  std::optional<Batch> try_get_batch(std::string_view split, std::chrono::microseconds timeout);

  // The default of Config::max_held_batches.
  static constexpr std::size_t kMaxHeldBatches = 4;

  // The position of every split, as a small JSON text: what the trainer consumed, not
  // what was prefetched, with a fingerprint of the dataset and the order-determining
  // config fields.
  std::string save_state() const;
  // Restores a save_state() text: the next batches are exactly those that would have
  // followed it. Throws Error(state) for malformed text or another dataset/config; the
  // loader is unchanged then. Batches already handed out stay valid.
  void load_state(std::string_view state);

  // Stops the pipelines (see the thread-safety note). Idempotent.
  void stop() noexcept;

  // The effective config: defaults, metadata and inference resolved (dataset_mode,
  // batch_sampling_mode, pad_token_id, token_dtype, decode_threads, rank and world_size,
  // data_parallel_rank, data_parallel_size and context_parallel_rank).
  const Config& config() const noexcept;
  // Where this process sits in the parallel layout (tensor, context, pipeline and data
  // parallelism), as derived when the loader opened.
  const ParallelLayout& parallel_layout() const noexcept;
  // The global ranks of each data-parallel group as the layout derives them, indexed by
  // data-parallel rank, each in increasing order (its first is the group's leader): what a
  // trainer passes to torch.distributed.new_group. Empty when the layout does not give
  // this process's coordinates (data_parallel_rank/size given directly otherwise).
  std::vector<std::vector<std::int64_t>> data_parallel_groups() const;
  bool has_split(std::string_view split) const noexcept;
  // Throws Error(usage) for a split the dataset does not have.
  SplitInfo split_info(std::string_view split) const;
  // The shape batch `step` of `split` has on this rank (a train split's shape_schedule says
  // it; known in advance, for any step). Throws Error(usage) for a split the dataset does
  // not have.
  StepShape batch_shape(std::string_view split, std::uint64_t step) const;
  SplitStats split_stats(std::string_view split) const;
  DatasetVocabulary vocabulary() const;
  // The pad, end-of-text, eot and eos ids as the loader settled them (see TokenIds).
  TokenIds token_ids() const;
  // The dataset fingerprint recorded in states and the audit log (hex).
  std::string fingerprint() const;

  // A mixture (Config::mixture): its sources' names in declaration order, which
  // Batch::source_ids() indexes. Empty for a single dataset.
  std::vector<std::string> source_names() const;
  // A mixture: the epoch source `source` is in after the first `steps` batches of `split`
  // (over all ranks; its epoch when its next row is read), or nullopt when the source has no
  // epochs (random sampling). Throws Error(usage) for a bad split or source index, or a
  // single dataset.
  std::optional<std::uint64_t> source_epoch_after(std::string_view split, std::size_t source,
                                                  std::uint64_t steps) const;

  // A mixture: from global step `at_step` of the train split on, the sources named in
  // `weights` (name -> weight, an exact decimal as in the config: "3", "1.5") take these
  // weights and the others keep theirs, exactly as if the config had a stage starting at
  // `at_step` (the round-robin restarts at its first row). The change holds until the
  // next config stage or change, whichever comes first, which then applies as written;
  // two changes at one step apply in call order. Every rank must make the same calls.
  // The change is recorded in the audit log (weights_changed), save_state and the
  // fingerprint. Batches before `at_step` never change: the batches made ahead are made
  // again, identical. Throws Error(usage) for an `at_step` before earliest_weight_step(),
  // Error(config) for an unknown source, a weight that is not a non-negative decimal, a
  // stage left all zero, or a single dataset; the loader is unchanged then.
  void set_mixture_weights(const std::map<std::string, std::string>& weights, std::uint64_t at_step);
  // The earliest step set_mixture_weights accepts: the train split's next step plus the
  // largest prefetch depth (every batch made ahead comes before it). Throws Error(config)
  // for a single dataset.
  std::uint64_t earliest_weight_step() const;

 private:
  std::optional<Batch> next_batch(std::string_view split,
                                  std::optional<std::chrono::steady_clock::time_point> deadline);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What `dataset_dir/dataset_metadata.json` says about the vocabulary, read and checked as a
// Loader reads it (all nullopt without the file). Throws Error(format) for an invalid file.
TOKENFEED_API DatasetVocabulary read_dataset_vocabulary(const std::filesystem::path& dataset_dir);

}  // namespace tokenfeed
