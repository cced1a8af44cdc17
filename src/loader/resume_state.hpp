// ResumeState: the loader's position, serialized as a small JSON text:
//
//   {"format": "tokenfeed-state", "version": 1, "fingerprint": "9c0f...",
//    "order": {"global_batch_size": "12", "epoch_seed": "1337", ...},
//    "splits": {"train": {"step": 1200, "epoch": 3, "batch_in_epoch": 17}}}
//
// `step` (batches the trainer consumed) is what restores, except in sft_packed, whose
// epochs differ in length: there `epoch`, `batch_in_epoch` and `row_in_epoch` (written
// when not 0) do. Steps count global batches, so a state resumes at any world size with
// the same global batch. `order` holds, by name, what the order depends on (the fingerprint
// is their hash), so that a refused state can say which field differs; states written
// before it existed lack it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "pipeline/stream_position.hpp"

namespace tokenfeed {

struct ResumeState {
  std::string fingerprint;
  std::map<std::string, std::string> order;  // empty when the state does not record it
  std::map<std::string, SplitPosition> splits;
};

std::string serialize_resume_state(const ResumeState& state);
// Throws Error(state) naming the field when the text is not a valid state.
ResumeState parse_resume_state(std::string_view text);

}  // namespace tokenfeed
