// tokenfeed::Config: every setting of a loader, one field per XML key.
//
// A config comes from XML (load_config_file / parse_config_xml), from key/value pairs
// (set_config_value, used by bindings), or from code by filling the struct. The XML keys
// are the field names, as children of a <training> element that is the root or a child
// of the root:
//
//   <training inherits="base.xml">      <!-- optional; own keys override the base's -->
//     <dataset_dir>data/chat</dataset_dir>
//     <batch_size>8</batch_size>
//     <block_size>1024</block_size>
//   </training>
//
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/export.hpp"

namespace tokenfeed {

enum class DatasetMode {
  auto_detect,  // key absent: an episode-indexed train/ selects sft_episode
  sft_episode,  // one whole conversation per row, padded or truncated to block_size
  token_stream, // pretraining windows over a token stream
  sft_packed,   // several whole episodes per row, attention kept inside each
};

// What an episode longer than L = block_size + 1 keeps (sft_episode and sft_packed).
enum class Truncation {
  right,              // its first block_size + 1 tokens
  drop_oldest_turns,  // drop whole oldest user+assistant exchanges after the system turn,
                      // never the final assistant turn; then cut from the left keeping the
                      // final assistant end-of-turn (needs special_tokens in the metadata)
  split,              // all of it, as pieces t[0:L], t[L-1:2L-1], t[2L-2:3L-2], ...: each
                      // starts with the previous one's last token, so every label position
                      // 1..n-1 is trained once; a last piece of one token (no label) is
                      // dropped. Each piece is a sequence of its own (sft_packed) or a row
                      // of its own (sft_episode), after the previous piece of its episode.
};

enum class SamplingMode {
  epoch,   // every kept episode once per epoch, numpy-compatible shuffled order
  random,  // uniform draws with replacement; global row g is a pure function of (seed, split, g)
};

// How sft_packed hands a global batch's rows to the data-parallel ranks (Config::balance_ranks).
enum class RankBalance {
  none,       // rank r takes the r-th slice of batch_size rows
  attention,  // every rank batch_size rows, chosen so that the ranks' attention costs
              // (the sum of each row's squared sequence lengths) are even (docs/packing.md)
};

// rank / world_size: take the value from the launcher's environment (see Config::rank).
inline constexpr std::int64_t kFromLauncher = -1;

// Which processes of a data-parallel group run a pipeline (Config::data_loading).
enum class DataLoading {
  every_rank,    // every rank decodes its group's batches itself: no communication
  group_leader,  // only the group's leader (its lowest global rank) decodes; the others
                 // receive its batches (Python: tokenfeed.torch.broadcast_batch)
};

// One dataset of a mixture: <source name="chat" dataset_dir="data/chat" weight="3" .../>
// inside <training><mixture>.
struct MixtureSource {
  // Unique; names the source in messages, the open line and the audit log. Its index in
  // Config::mixture is what Batch::source_ids records.
  std::string name;
  // Its weight in the first stage, as written: a non-negative integer or decimal ("3",
  // "0.25"). Kept as text so that decimals stay exact (see docs/mixtures.md's rule).
  std::string weight = "1";
  // The per-dataset keys this source sets (attribute name, text value as in XML), applied
  // over <training>'s keys; dataset_dir is required and, from XML, already resolved against
  // the file's directory. Allowed: dataset_dir, dataset_mode, batch_sampling_mode,
  // epoch_seed, epoch_shuffle, episode_min_tokens, document_aware, eos_token_id,
  // truncation, token_dtype, mask_dtype, pack_lookahead, val_prefix.
  std::vector<std::pair<std::string, std::string>> keys;
  // UniMax cap for a weight "auto" (docs/mixtures.md, "Weights from dataset sizes"): the
  // source repeats at most this many epochs over Config::mixture_planned_steps. Absent: no cap.
  std::optional<double> max_epochs = std::nullopt;
};

// A stage of a mixture's schedule: <stage until_step="N"><weight source="NAME">W</weight>...</stage>.
struct MixtureStage {
  // The global step (the loader's batch counter) where the stage ends, exclusive; absent
  // on the last stage only.
  std::optional<std::int64_t> until_step;
  // The weights this stage changes (source name, weight text); unlisted sources keep the
  // previous stage's weight (the first stage's previous weights are the sources' own).
  std::vector<std::pair<std::string, std::string>> weights;
};

// A stage of the shape schedule (docs/schedules.md): <shape_schedule><stage until_step="N"
// global_batch_size="G"/>...</shape_schedule>, or a dict of Python's shape_schedule list.
struct ShapeStage {
  // Where the stage ends, exclusive: at this global step, or at the first step by which the
  // run has trained this many positions (global_batch_size x block_size per step; rows'
  // padding included). One of them on every stage but the last, neither on the last.
  std::optional<std::int64_t> until_step;
  std::optional<std::int64_t> until_tokens;
  // Rows per step over the data-parallel ranks; each rank's batch_size is it divided by the
  // data-parallel size, which must divide it. Absent: batch_size x the data-parallel size.
  std::optional<std::int64_t> global_batch_size;
  // Positions per row (a sequence-length curriculum; docs/schedules.md says which modes
  // take one); absent: block_size.
  std::optional<std::int64_t> block_size;
};

struct Config {
  // Directory holding train/ and val/ (and dataset_metadata.json). A relative path in
  // an XML file is resolved against that file's directory. Required, unless `mixture` is
  // given (then it must be empty).
  std::filesystem::path dataset_dir;

  // Several datasets blended by weight, in place of dataset_dir: rows are assigned to
  // sources by smooth weighted round-robin over the current stage's weights (docs/mixtures.md,
  // "The rule, exactly"). Empty: one dataset.
  std::vector<MixtureSource> mixture;
  // The mixture's schedule; empty: the sources' weights hold for ever.
  std::vector<MixtureStage> stages;
  // Weights from dataset sizes (<mixture temperature="A" planned_steps="N">, docs/mixtures.md):
  // a source weight "auto" is proportional to its train split's tokens to the power A, in
  // [0, 1]; planned_steps is the run's length in global steps that max_epochs caps count
  // over. A loader's config() holds the computed weights instead, with these two absent.
  std::optional<double> mixture_temperature;
  std::optional<std::int64_t> mixture_planned_steps;

  DatasetMode dataset_mode = DatasetMode::auto_detect;

  // Rows per batch on this data-parallel rank (the global batch is batch_size x the
  // data-parallel size), and positions per row. Required, > 0.
  std::int64_t batch_size = 0;
  std::int64_t block_size = 0;
  // The train split's batch-size schedule (a warmup), stages on the global step axis; empty:
  // batch_size for ever. Val splits are never scheduled.
  std::vector<ShapeStage> shape_schedule;

  // Return the loss mask (aligned to y), so that the loss covers only the trained positions
  // (the assistant replies of an SFT dataset). Absent ("auto" in XML, the default): on when
  // every shard of every split has mask.bin, off with a warning when none has, and an
  // Error(config) when some splits have masks and others not (say which you mean). true:
  // on, with a warning naming the splits without mask.bin (they return x and y only).
  // false: every position is trained on, logged as a deliberate choice when masks exist.
  // A loader's config() holds the resolved value. Episode modes only; token_stream has no
  // masks. (The original spec defaulted to false, which trained SFT runs on their prompts
  // unless the key was set: auto is the default that cannot silently do that.)
  std::optional<bool> use_loss_mask;

  // Absent: epoch for sft_episode, random for token_stream.
  std::optional<SamplingMode> batch_sampling_mode;
  bool epoch_shuffle = true;
  bool epoch_drop_last = true;
  // Per-split overrides of epoch_shuffle and epoch_drop_last (validation usually wants every
  // example once, in a fixed order, while train wants both on). XML: a <train> or <val>
  // element holding those keys, e.g. <val><epoch_shuffle>false</epoch_shuffle></val>; as a
  // single key (set_config_value, Python): "val.epoch_shuffle". Absent: the global value.
  // Both are part of the resume fingerprint.
  // Val may also have a shape of its own (docs/schedules.md, "Val's own shape"):
  // <val><batch_size>..</batch_size><block_size>..</block_size></val>, "val.batch_size",
  // "val.block_size": its rows per rank and positions per row, under the keys' rules (a
  // mixture's val too); val is never scheduled. Absent: the batch_size and block_size keys. (Train's shape is the keys
  // themselves and its shape_schedule: train_overrides never sets these two.)
  struct SplitOverrides {
    std::optional<bool> epoch_shuffle;
    std::optional<bool> epoch_drop_last;
    std::optional<std::int64_t> batch_size;
    std::optional<std::int64_t> block_size;
  };
  SplitOverrides train_overrides;
  SplitOverrides val_overrides;
  // The effective values for `split` ("train" or "val"; another name gets the global ones).
  bool shuffle_for(std::string_view split) const noexcept {
    return overrides_for(split).epoch_shuffle.value_or(epoch_shuffle);
  }
  bool drop_last_for(std::string_view split) const noexcept {
    return overrides_for(split).epoch_drop_last.value_or(epoch_drop_last);
  }
  // The rows per rank and positions per row of `split` without a shape schedule: val's own
  // shape where it sets one, else the keys.
  std::int64_t batch_size_for(std::string_view split) const noexcept {
    return overrides_for(split).batch_size.value_or(batch_size);
  }
  std::int64_t block_size_for(std::string_view split) const noexcept {
    return overrides_for(split).block_size.value_or(block_size);
  }
  const SplitOverrides& overrides_for(std::string_view split) const noexcept {
    static const SplitOverrides kNone{};
    return split == "train" ? train_overrides : split == "val" ? val_overrides : kNone;
  }
  // Epoch e is shuffled with numpy.random.RandomState(epoch_seed + e); the sum must stay
  // below 2^32, as numpy requires.
  std::int64_t epoch_seed = 1337;

  // Absent: dataset_metadata.json's pad_token_id, else its eot_token_id, else its
  // eos_token_id; else an error. The loader's open line says which was used.
  std::optional<std::int64_t> pad_token_id;
  // Episodes shorter than this are never sampled. >= 2 so that y has a token.
  std::int64_t episode_min_tokens = 2;

  // dataset_metadata.json's token_dtype when it has one (a config naming another dtype is
  // then an error), else this, else inferred from file sizes when unambiguous (sft_episode;
  // token_stream .bin files need it from here or the metadata, .npy files carry their own).
  std::optional<TokenDtype> token_dtype;
  // The same order: dataset_metadata.json, else this, else inferred from mask.bin's size.
  std::optional<MaskDtype> mask_dtype;

  // Ready batches kept ahead of the trainer, per split: 1..4096, or 0 ("auto" in XML, the
  // default). Auto starts at 16 per decode thread and grows while the
  // trainer still finds no batch ready although production keeps up with it on average
  // (jitter: long episodes, page faults, a busy machine), up to 64 and never past
  // prefetch_memory_mb; the depth in use is in SplitStats::prefetch_depth and logged when
  // it changes.
  std::int64_t prefetch_depth = 0;
  // With prefetch_depth auto: the most memory the batch buffers of one split may take
  // (ready, in flight and held by the trainer), in MiB. >= 1. A fixed depth ignores it.
  std::int64_t prefetch_memory_mb = 512;
  // Batches of one split the trainer may hold at once (a Batch, or in Python any array or
  // tensor viewing one), 1..1024; one more get_batch is Error(usage), not a deadlock. Each
  // held batch takes a buffer of its own beside the prefetch depth's, so the pool grows by
  // this many. Raise it for gradient accumulation over more micro-batches with zero-copy
  // tensors (autograd keeps every micro-batch's inputs until backward()).
  std::int64_t max_held_batches = 4;
  // The most memory the batch buffers of all splits together may take, in MiB: every slot
  // a pool may grow to (the largest prefetch depth, fixed or auto, plus the batches the
  // trainer may hold), computed before anything is allocated. A loader whose buffers would
  // need more is refused with Error(config) giving the figures. 0 ("auto" in XML, the
  // default): half of the machine's physical memory divided by the job's processes on this
  // node (effective_max_memory_mb).
  std::int64_t max_memory_mb = 0;
  // Threads decoding batches in parallel; 0 means this process's share of the CPUs it may
  // use (its affinity mask, bounded by its cgroup CPU quota, divided by the job's processes
  // on this node) but the trainer's, at least 1. TBB caps its workers at hardware threads
  // - 1 in all.
  std::int64_t decode_threads = 0;

  // Data-parallel rank and world size: rank r takes the r-th slice of each global batch.
  // kFromLauncher (the default, and "env" in XML): from the launcher's environment,
  // RANK / WORLD_SIZE (torchrun), else OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open
  // MPI), else PMI_RANK / PMI_SIZE; 0 and 1 when none is set. A number always wins. The
  // loader's config() and open log line give the values in use and where they came from.
  std::int64_t rank = kFromLauncher;
  std::int64_t world_size = kFromLauncher;

  // The parallel layout (docs/distributed.md, "Tensor, context and pipeline parallelism").
  // rank and world_size above are the process's global rank and count; the data-parallel
  // coordinates that slice each global batch follow from them and these. Every rank of one
  // tensor/context/pipeline group (the ranks sharing a data-parallel rank) gets the same
  // batches. Each size >= 1; world_size must be a multiple of their product, unless the
  // data-parallel coordinates are given directly.
  std::int64_t tensor_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t pipeline_parallel_size = 1;
  // How the global rank is laid out over the four dimensions, fastest-varying first: each
  // of tp, cp, dp, pp once, joined by '-'. The default is Megatron's order and torchtitan's
  // device mesh: consecutive ranks share a tensor-parallel group.
  std::string parallel_order = "tp-cp-dp-pp";
  // The data-parallel rank and size, given directly (both or neither), for any other
  // layout (a torch DeviceMesh's get_local_rank("dp")); they win over the derivation.
  // Absent: derived from rank, world_size and the layout. A loader's config() holds the
  // values in use.
  std::optional<std::int64_t> data_parallel_rank;
  std::optional<std::int64_t> data_parallel_size;
  // This process's context-parallel rank, given directly; absent: derived. config() holds
  // the value in use.
  std::optional<std::int64_t> context_parallel_rank;
  // every_rank (default) or group_leader: see DataLoading.
  DataLoading data_loading = DataLoading::every_rank;
  // With context_parallel_size = cp > 1 (docs/batch-contract.md, "Context parallelism"):
  // true gives this process only its context-parallel rank's share of each row, the
  // load-balanced split of TransformerEngine's THD attention and Megatron's
  // get_batch_on_this_cp_rank (each sequence cut into 2·cp chunks, rank r keeping chunks r
  // and 2·cp - 1 - r), so rows are block_size / cp long; block_size must then be a multiple
  // of 2·cp, and the context-parallel rank known (derived, or context_parallel_rank).
  // false (the default): every rank of the group gets the whole rows and splits them
  // itself. A no-op with cp = 1. Not with data_loading=group_leader (the leader's batches
  // are its own share).
  bool context_parallel_split = false;

  // sft_episode / sft_packed: how an episode longer than block_size + 1 is cut.
  Truncation truncation = Truncation::right;
  // sft_packed: how many upcoming episodes (in epoch order) the packer may pick from to
  // fill a row's gap. Larger packs tighter and strays further from the epoch order.
  std::int64_t pack_lookahead = 64;
  // sft_packed, one dataset: none (the default) or attention: see RankBalance. The global
  // batch's rows are the same either way (its resume state and fingerprint too); only
  // which rank takes which of them changes. The audit log records each step's assignment.
  RankBalance balance_ranks = RankBalance::none;

  // sft_episode / token_stream: fill the batch contract's labels, token_weights,
  // position_ids and cu_seqlens. false leaves them empty and writes only the mode's own
  // view (x, y, mask; in token_stream also the document fields): fewer bytes per batch
  // (sft_episode: 20 per position instead of 32) for trainers that use that view.
  // sft_packed batches are the contract, so false is an error there.
  bool contract_fields = true;
  // The fields the trainer reads (docs/batch-contract.md, "Choosing the fields"): a set of
  // BatchField, in XML and Python a comma-separated list of their names (x, y, mask,
  // tokens, labels, token_weights, position_ids, cu_seqlens); every field by default (the
  // empty text). The decoders write what is chosen (sft_episode leaves y, or labels,
  // position_ids and cu_seqlens, unwritten when none of them is chosen), so a trainer that
  // reads one view does not pay for the other; reading a field not chosen throws
  // Error(usage). A contract field needs contract_fields. Not part of the fingerprint:
  // the same data comes whatever is chosen.
  BatchFields fields = kEveryBatchField;

  // token_stream: also return doc_ids and position_ids, and mask labels that cross a
  // document boundary with ignore_index. Needs an end-of-text id, unless every token file
  // indexes its documents (a Megatron .idx).
  bool document_aware = false;
  // The end-of-text id. Absent: eos_token_id, else eot_token_id, from dataset_metadata.json.
  std::optional<std::int64_t> eos_token_id;
  // A token stream of Megatron pairs (NAME.bin + NAME.idx) placed directly in dataset_dir:
  // the pairs whose NAME starts with this prefix form the val split, the others train.
  // Empty: every pair is train. Ignored by datasets with train/ or train.bin.
  std::string val_prefix;
  // Megatron pairs and datatrove files (documents indexed): the fraction of the train
  // files' documents that form the val split, each chosen by SHA-256 over
  // "tokenfeed-token-split-v1\0", val_seed and its tokens (docs/formats.md, "Val by
  // document hash"); train keeps the others. 0: off. In [0, 1).
  double val_fraction = 0.0;
  std::int64_t val_seed = 0;  // the seed of that hash, >= 0
  // The label value that means "no loss here" (PyTorch's cross_entropy default).
  std::int64_t ignore_index = -100;

  // Directory for the audit log (relative to the working directory); empty disables it.
  std::filesystem::path audit_log_dir = "logs/audit";
};

// Reads `path`, following `inherits` chains. Throws Error(config) naming the file and the
// key (or pugixml's offset for malformed XML), Error(io) when a file cannot be read.
TOKENFEED_API Config load_config_file(const std::filesystem::path& path);

// Parses XML text; relative paths (dataset_dir, inherits) resolve against `base_dir`.
TOKENFEED_API Config parse_config_xml(std::string_view xml, const std::filesystem::path& base_dir);

// Sets one key from its text form, as in XML ("true", "1337", "epoch", ...).
// Throws Error(config) naming the key for unknown keys and bad values.
TOKENFEED_API void set_config_value(Config& config, std::string_view key, std::string_view value);

// Checks ranges and combinations (sizes > 0, rank < world_size, batch_size * block_size at
// most 2^34 positions, ...). Throws Error(config).
TOKENFEED_API void validate_config(const Config& config);

// Every key with its effective text value (defaults included; "" for absent optionals and unset sizes),
// in a fixed order: for the audit log and for printing.
TOKENFEED_API std::vector<std::pair<std::string, std::string>> config_entries(const Config& config);

// max_memory_mb as a number of MiB: the key's value, or for 0 (auto) half of the physical
// memory divided by the job's processes on this node (LOCAL_WORLD_SIZE and the like: each
// has a loader of its own).
TOKENFEED_API std::uint64_t effective_max_memory_mb(const Config& config) noexcept;

TOKENFEED_API const char* to_string(DatasetMode mode) noexcept;
TOKENFEED_API const char* to_string(SamplingMode mode) noexcept;
TOKENFEED_API const char* to_string(Truncation truncation) noexcept;
TOKENFEED_API const char* to_string(DataLoading loading) noexcept;
TOKENFEED_API const char* to_string(RankBalance balance) noexcept;

}  // namespace tokenfeed
