// open_dataset_split: opens one split of one dataset with its dataset mode's reader,
// sampler and batch source, as the DatasetSplit of its sampling layout. The one place
// that asks which dataset mode and which sampling layout a split has.
//
// Thread-safety: opens files and logs; call from one thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "splits/dataset_split.hpp"
#include "splits/resolved_options.hpp"

namespace tokenfeed {

// The shape of the slots a loader with config `c` fills, with `rows` rows, for a split
// that does (`mask`) or does not return a loss mask; with context_parallel_split, rows of
// block_size / cp (this rank's share).
detail::BatchShape batch_shape_of(const Config& c, std::size_t rows, bool mask);

// Opens split `name` of `settled`'s dataset (REQUIRES: it exists; settled.config has the
// token dtype once train opened). Throws Error for a split that does not open, or a train
// split that forms no batch; a val split that forms none opens unusable, with a warning.
// REQUIRES: settled outlives the split (it reads settled.config).
std::unique_ptr<DatasetSplit> open_dataset_split(const ResolvedOptions& settled, const std::string& name);

// Every split `settled`'s dataset has: train (required), and val when it is there. Writes
// back into settled.config what only the split files tell: the token dtype inferred from
// train when not given (val is validated with train's, so the two are never read at
// different widths), and for episodes the mask dtype and use_loss_mask=auto (from which
// splits have mask.bin; the choice is logged). Throws as open_dataset_split.
using OpenedSplits = std::map<std::string, std::unique_ptr<DatasetSplit>, std::less<>>;
OpenedSplits open_dataset_splits(ResolvedOptions& settled);

}  // namespace tokenfeed
