// SplitPosition: where a split's stream of batches stands: the next batch's step and its
// place in its epoch. The loader keeps it as the trainer consumes batches, saves it in the
// resume state, and hands it to BatchSource::seek when a pipeline starts.
//
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>

namespace tokenfeed {

struct SplitPosition {
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint64_t batch_in_epoch = 0;
  std::uint64_t row_in_epoch = 0;  // sft_packed: the epoch row the next batch starts at
};

}  // namespace tokenfeed
