// ModeBuilder: everything one dataset mode knows of opening a dataset, in one class per
// mode: the options of its reader, sampler and batch source, the fields of the resume
// fingerprint its rows depend on, and how each split opens (as the DatasetSplit of its
// sampling layout). ResolvedOptions holds the settled values; a builder turns them into
// opened splits. The modes:
//  - sft_episode: EpisodeModeBuilder (episode_modes.hpp), one episode (or piece) per row;
//  - sft_packed:  PackedModeBuilder (packed_mode.hpp), episodes packed into rows;
//  - token_stream: StreamModeBuilder (stream_mode.hpp), windows of a token stream.
// A new mode is a new builder and one line in mode_builder(); nothing else asks the mode
// to open a split.
//
// Thread-safety: builders are stateless; their functions open files and log, so call them
// from one thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "pipeline/batch_pool.hpp"
#include "modes/sampled_row_source.hpp"
#include "pipeline/batch_source.hpp"
#include "sampling/episode_sampler.hpp"
#include "splits/dataset_split.hpp"
#include "splits/fingerprint.hpp"
#include "splits/resolved_options.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

using OpenedSplits = std::map<std::string, std::unique_ptr<DatasetSplit>, std::less<>>;

class ModeBuilder {
 public:
  virtual ~ModeBuilder();

  // The resume fingerprint's fields this mode's rows depend on beyond those every mode has
  // (order_fields adds these to them). Each is named so that a refused state says which
  // differs; a field appears only when the rows depend on it, so that adding one keeps the
  // fingerprints of configs that do not use it.
  virtual void add_order_fields(const Config& settled, OrderFields& fields) const = 0;

  // Opens split `name` of `settled`'s dataset (REQUIRES: it exists; settled.config has the
  // token dtype once train opened). Throws Error for a split that does not open, or a train
  // split that forms no batch; a val split that forms none opens unusable, with a warning.
  // REQUIRES: settled outlives the split (it reads settled.config).
  virtual std::unique_ptr<DatasetSplit> open_split(const ResolvedOptions& settled, const std::string& name) const = 0;

  // Every split the dataset has: train (required), and val when it is there. Writes back
  // into settled.config what only the split files tell (the token dtype inferred from train
  // when not given, so that val is read at train's width; for episodes the mask dtype and
  // use_loss_mask=auto). Throws as open_split.
  virtual OpenedSplits open_splits(ResolvedOptions& settled) const = 0;
};

// The builder of a settled dataset mode (REQUIRES: not auto_detect).
const ModeBuilder& mode_builder(DatasetMode mode);

// Every split of `settled`'s dataset, opened by its mode's builder (open_splits above),
// each with settled.for_split(name): val with its own shape when it has one.
OpenedSplits open_dataset_splits(ResolvedOptions& settled);

// What the order of a single dataset's batches depends on among the settled settings, by
// name (the loader adds each split's data and content hashes): the fields every mode has,
// then its builder's.
OrderFields order_fields(const Config& settled);

// val_fraction and val_seed: a split as a fraction of train's documents, chosen by hash
// (document_split.hpp), as the token stream and the episode modes both read it.
DocumentHashSplit document_hash_split(const Config& settled);

// The sampler of `split` in every mode: the epoch order (or random draws) and this rank's
// ids of each batch, from the settled sampling keys and data-parallel coordinates.
EpisodeSampler::Settings sampler_settings(const Config& settled, const std::string& split);

// The shape of the slots a loader with config `c` fills, with `rows` rows, for a split
// that does (`mask`) or does not return a loss mask, of `cols` positions (0: block_size; a
// sequence-length schedule's longest); with context_parallel_split, rows of cols / cp
// (this rank's share).
detail::BatchShape batch_shape_of(const Config& c, std::size_t rows, bool mask, std::size_t cols = 0);

// The DatasetSplit of the sampling layout that fits `config` (random or equal epochs)
// over `data` and `rows`, a source of whole rows sampled by id (sft_episode, token_stream)
// whose batches have `shape`. With context_parallel_split the split reads this rank's
// share of each row, cut from whole rows decoded into scratch slots (each sequence's share
// when they are padded for it, else the row's); its rows are then not the source's by id,
// so only without it does the split hand a mixture `rows` (DatasetSplit::sampled_rows).
std::unique_ptr<DatasetSplit> split_of_sampled_rows(const std::string& name, const Config& config,
                                                    std::unique_ptr<SplitData> data,
                                                    std::unique_ptr<SampledRowSource> rows,
                                                    const detail::BatchShape& shape,
                                                    DatasetSplit::Description description);

}  // namespace tokenfeed
