// inspect_dataset: the library's `tokenfeed inspect` (inspect_report.hpp says what it
// reports). It cannot call resolve_options, which stops at the first refusal: it calls
// the rules' own functions (detect_split_layout, settle_dtype, kept_episodes, the per-split
// builders of ResolvedOptions over the run it assumes), so that a split opens as the
// loader opens it and --packed packs as a run with the same settings does.
//
// Thread-safety: reads files; no shared state.
#pragma once

#include "inspect/inspect_report.hpp"

namespace tokenfeed {

// Describes and validates `request.dataset_dir`. A refusal the loader would make is
// reported (DatasetReport::failure), not thrown. Throws Error(usage) for options that make
// no sense for the dataset (packed without block_size, val_fraction outside [0, 1)
// or val_seed negative, drop_oldest_turns without special_tokens, a .bin stream with no dtype known, a
// token_dtype the metadata contradicts), Error(io) for a missing directory or one with
// neither train nor val, Error(format) for an invalid dataset_metadata.json.
DatasetReport inspect_dataset(const InspectRequest& request);

}  // namespace tokenfeed
