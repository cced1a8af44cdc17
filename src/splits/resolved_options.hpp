// ResolvedOptions: a Config settled against the dataset it names, once, for every front
// that reads a dataset: the Loader (and through it the Python module), RLPrompts and
// `tokenfeed inspect`.
//
// The model is leveldb's SanitizeOptions: resolve_options() takes what the user gave,
// reads what the dataset records (dataset_metadata.json, the layout of train/), applies
// the defaults, checks that they agree, and returns settings that nothing downstream
// second-guesses. The rules, in order:
//  - validate_config; rank and world_size from the launcher when not numbers
//    (resolve_ranks); decode_threads 0 is this process's share of the CPUs it may use but
//    the trainer's (cpu_share.hpp: affinity, cgroup quota, local ranks).
//  - A mixture stops there: each of its sources is resolved on its own when opened.
//  - dataset_dir must be a directory; dataset_metadata.json is read when present.
//  - dataset_mode auto: train/'s layout decides (detect_split_layout).
//  - batch_sampling_mode absent: epoch for the SFT modes, random for token_stream;
//    sft_packed needs epoch.
//  - token_dtype and mask_dtype: the metadata's record wins; a config naming another one
//    describes another dataset and is an error (settle_dtype). Absent from both: inferred
//    when the splits open (the loader's open loop; settle_use_loss_mask after it).
//  - pad_token_id (SFT modes): the config, else the metadata's pad_token_id, eot_token_id,
//    eos_token_id (pad_from_metadata); none is an error.
//  - document_aware: token_stream only; its end-of-text id is the config's eos_token_id,
//    else the metadata's eos_token_id, else its eot_token_id (end_of_text_id). None is an
//    error when the splits open, unless every token file indexes its documents (a Megatron
//    .idx); with context parallelism the documents' padding then needs a pad id.
//  - token_stream has no masks: use_loss_mask is false (with a warning when set true).
// What each dataset mode builds from the settled values (its reader's, sampler's and batch
// source's options, its fingerprint fields, how its splits open) is its ModeBuilder's
// (mode_builder.hpp): pure functions of the settled config, so that the loader and
// inspect's `--packed` report build the same sampler and packer.
//
// RLPrompts settles its config with resolve_prompt_options: the same steps and rules, but
// only those a prompt dataset needs (below).
//
// `tokenfeed inspect` cannot call resolve_options: it describes datasets the loader refuses
// (no train split, no pad id, a split that does not open), reporting each refusal as a
// verdict instead of stopping at the first. It calls the rules' own functions instead
// (detect_split_layout, settle_dtype, pad_from_metadata, kept_episodes, the mode builders'
// functions over the run it assumes), which are the only place each rule is written.
//
// Thread-safety: plain values and pure functions; resolve_options reads files and the
// environment and may log warnings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/dataset_metadata.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {

// The splits a dataset may have, in the order they are opened (train decides the dtype).
inline constexpr const char* kSplitNames[] = {"train", "val"};

struct ResolvedOptions {
  // Settled: rank, world_size, decode_threads; for one dataset also dataset_mode,
  // batch_sampling_mode, the dtypes the metadata records, pad_token_id (SFT modes),
  // eos_token_id (document_aware, when known), use_loss_mask (token_stream). What only the opened
  // splits tell (an inferred dtype, use_loss_mask=auto) stays unset until they open.
  Config config;
  DatasetMetadata metadata;  // empty for a mixture
  std::string rank_source;   // where rank and world_size came from (LauncherRanks::source)
  ParallelLayout layout;     // this process in the parallel layout (parallel_layout.hpp)
  std::string pad_source;    // where pad_token_id came from (SFT modes; empty otherwise), for the open line
  // How decode_threads was settled: "config", or the CPU share it came from
  // (default_decode_threads), for the open line.
  std::string decode_threads_source;
  // Whether the trainer's thread has a CPU of the process's share to itself beside the
  // decode threads (share > decode_threads): only then does get_batch spin before it sleeps.
  bool trainer_may_spin = true;
  // for_split("val")'s copy, once made (null: val opens with these options).
  std::shared_ptr<ResolvedOptions> val_view;
  // A mixture's source under the mixture's sequence-length schedule: the block sizes its
  // train rows take besides block_size (the source itself is never scheduled). Empty
  // otherwise.
  std::vector<std::uint64_t> mixture_block_sizes;
  // What the open line adds about why this dataset is opened (a mixture's source opened
  // again for its rows under the mixture's schedule); empty: nothing.
  std::string open_note;

  // What split `name` opens with: these options, or for a val with a shape of its own
  // (val.batch_size, val.block_size) a copy whose batch_size and block_size are val's. The
  // copy is held here, because an opened split keeps a reference to its config, and stays
  // this object's: call it on the options that outlive the splits. sync_split_views()
  // copies into it what the splits settle afterwards (dtypes, use_loss_mask).
  const ResolvedOptions& for_split(std::string_view name);
  void sync_split_views();

  bool mixture() const noexcept { return !config.mixture.empty(); }
  // The SFT modes read episode-indexed datasets.
  bool episode_mode() const noexcept { return config.dataset_mode != DatasetMode::token_stream; }
  bool packed_mode() const noexcept { return config.dataset_mode == DatasetMode::sft_packed; }
  std::string metadata_file() const { return (config.dataset_dir / "dataset_metadata.json").string(); }
};

// The whole resolution above. Throws Error(config) for settings that contradict each other
// or the dataset, Error(io) for a missing dataset directory or an undetectable layout,
// Error(format) for an invalid dataset_metadata.json.
ResolvedOptions resolve_options(Config config);

// The resolution of RLPrompts' config, whose prompts are train/'s episodes at most
// `max_tokens` long: batch_size and block_size, which the GroupBatcher owns, default to 1
// and max_tokens only to pass validate_config; then the loader's rules for the ranks, the
// dataset directory, the token dtype and the pad id, except that a dataset recording no pad
// or end-of-text id pads with 0 rather than failing; batch_sampling_mode defaults to epoch.
// dataset_mode is not settled: prompts are always an episode-indexed split.
ResolvedOptions resolve_prompt_options(Config config, std::size_t max_tokens);

// The most rows one step may take, batch_size x world_size: the loader counts rows of the
// stream in 64 bits, with room for the steps of a run (2^62, as a resume state's step).
inline constexpr std::uint64_t kMaxGlobalBatch = std::uint64_t{1} << 40;

// The data-parallel coordinates of a config whose ranks are settled (resolve_options sets
// data_parallel_rank and data_parallel_size from the parallel layout): what slices each
// global batch. A config that never went through it (a mixture's source) slices as rank
// and world_size say.
inline std::uint64_t data_parallel_size(const Config& config) noexcept {
  return static_cast<std::uint64_t>(config.data_parallel_size.value_or(config.world_size));
}
inline std::uint64_t data_parallel_rank(const Config& config) noexcept {
  return static_cast<std::uint64_t>(config.data_parallel_rank.value_or(config.rank));
}

// batch_size x the data-parallel size of a config whose ranks are settled. Throws
// Error(config) when the product exceeds kMaxGlobalBatch.
std::uint64_t global_batch_size(const Config& config);

// Context parallelism (docs/batch-contract.md, "Context parallelism"). Whether rows of a
// config whose mode is settled pad each sequence to a multiple of 2·cp: sft_packed and a
// document-aware token_stream with context_parallel_size = cp > 1.
bool pads_sequences_for_context_parallel(const Config& config) noexcept;
// The multiple every sequence of a row is padded to: 2·cp when it pads (above), else 1.
std::size_t context_parallel_multiple(const Config& config) noexcept;
// Whether batches hold only this rank's share of each row: context_parallel_split with
// cp > 1.
inline bool splits_rows_for_context_parallel(const Config& config) noexcept {
  return config.context_parallel_split && config.context_parallel_size > 1;
}
// The rules of a config whose dataset mode is settled: with cp > 1, block_size must be a
// multiple of 2·cp when rows pad their sequences or are split. Throws Error(config)
// naming both numbers.
void check_context_parallel_rows(const Config& config);
// The rows' rules above, then what the padding needs of `r` (mode settled): a
// document-aware token stream's pad id, the SFT modes' rule (pad_from_metadata), else its
// end-of-text id. Throws as check_context_parallel_rows.
void settle_context_parallel_padding(ResolvedOptions& r);
// The rule of a config whose ranks are settled: with the split on, the context-parallel
// rank must be known (derived from the layout, or context_parallel_rank). Throws
// Error(config) naming context_parallel_rank.
void check_context_parallel_rank(const Config& config);

// balance_ranks=attention applies to one sft_packed dataset: Error(config) naming the key
// for a mixture or another settled mode.
void check_balance_ranks(const Config& config);

// The pieces of the resolution, for fronts that apply only some of the rules
// (RLPrompts) or report a refusal instead of throwing it (inspect).

// Throws Error(io) when config.dataset_dir is not a directory.
void check_dataset_dir(const Config& config);

// How a split of `dataset_dir` is laid out: sft_episode (an episode-indexed directory,
// episodes.idx) or token_stream (NAME.bin, or *.bin / *.npy files in NAME/); nullopt for
// neither.
std::optional<DatasetMode> detect_split_layout(const std::filesystem::path& dataset_dir, const std::string& split);

// Where a dtype the user gave came from, for the error when the metadata contradicts it.
struct GivenSetting {
  std::string name;  // "config key 'token_dtype'", "--token-dtype"
  ErrorKind kind = ErrorKind::config;
  std::string remedy;  // "remove the key", "drop the option"
};

// A config key, as GivenSetting: "config key 'KEY'", Error(config), "remove the key".
inline GivenSetting config_key(const std::string& key) {
  return GivenSetting{"config key '" + key + "'", ErrorKind::config, "remove the key"};
}

// The dtype to read with: the metadata's record, else `given`. Throws Error(given.kind)
// when both are set and differ.
template <typename Dtype>
std::optional<Dtype> settle_dtype(std::optional<Dtype> given, std::optional<Dtype> recorded, const GivenSetting& source,
                                  const std::string& metadata_file) {
  if (given && recorded && *given != *recorded) {
    throw Error(source.kind, source.name + " is " + to_string(*given) + " but '" + metadata_file + "' says " +
                                 to_string(*recorded) + "; " + source.remedy + " or fix the metadata");
  }
  return recorded ? recorded : given;
}

// The config's pad_token_id, else the metadata's pad_token_id, eot_token_id, eos_token_id,
// with where it came from ("config", "metadata pad_token_id", ...); nullopt for none.
struct PadChoice {
  std::int64_t id = 0;
  std::string source;
};
std::optional<PadChoice> pad_from_metadata(const Config& config, const DatasetMetadata& metadata);

// The end-of-text id that separates documents: `given`, else the metadata's eos_token_id,
// else its eot_token_id.
std::optional<std::int64_t> end_of_text_id(std::optional<std::int64_t> given, const DatasetMetadata& metadata);

// Settles decode_threads 0 as this process's share of the CPUs it may use (cpu_share.hpp)
// minus the trainer's, with where it came from (r.decode_threads_source), and whether the
// trainer may spin (r.trainer_may_spin). Reads the launcher's local ranks: throws
// Error(config) for a variable that is not a count.
void settle_decode_threads(Config& config, ResolvedOptions& r);

// Settles use_loss_mask=auto from which episode splits have mask.bin (`with`, `without`:
// their names, comma-separated), and logs the choice. Throws Error(config) for auto when
// some splits have masks and others not.
void settle_use_loss_mask(Config& config, const std::string& with, const std::string& without);

}  // namespace tokenfeed
