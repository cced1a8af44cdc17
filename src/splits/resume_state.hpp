// ResumeState: the loader's position, serialized as a small JSON text:
//
//   {"format": "tokenfeed-state", "version": 1, "fingerprint": "9c0f...",
//    "order": {"global_batch_size": "12", "epoch_seed": "1337", ...},
//    "splits": {"train": {"step": 1200, "epoch": 3, "batch_in_epoch": 17}},
//    "weight_changes": [{"step": 1000, "weights": {"chat": "3", "code": "1.5"}}]}
//
// `step` (batches the trainer consumed) is what restores, except in sft_packed, whose
// epochs differ in length: there `epoch`, `batch_in_epoch` and `row_in_epoch` (written
// when not 0) do. Steps count global batches, so a state resumes at any world size with
// the same global batch. `order` holds, by name, what the order depends on (the fingerprint
// is their hash), so that a refused state can say which field differs; states written
// before it existed lack it. `weight_changes` (a mixture's, in call order, written when
// there are any) is every change the trainer made, those for steps not reached yet too, so
// that a resume makes the same batches (weight_changes.hpp).
//
// The checks a loader runs on a parsed state are here too, each written once: that it
// belongs to this dataset and config (naming each order field that differs), and that a
// split's position is one a run could reach. What position a state resumes to is the
// split's own arithmetic (LoaderSplit::resume_position), which calls these checks.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "splits/fingerprint.hpp"
#include "splits/weight_changes.hpp"
#include "pipeline/stream_position.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

struct ResumeState {
  std::string fingerprint;
  OrderFields order;  // empty when the state does not record it
  std::map<std::string, SplitPosition> splits;
  std::vector<WeightChange> weight_changes;
};

std::string serialize_resume_state(const ResumeState& state);
// Throws Error(state) naming the field when the text is not a valid state.
ResumeState parse_resume_state(std::string_view text);

// Throws Error(state) unless `state` was saved by a loader of this dataset and order
// (`fingerprint`, with the `order` fields it hashes: the message names each field that
// differs and what to set) and records train. A state holding one of `earlier` (what an
// earlier tokenfeed gave the same data and order: SplitSet::earlier_fingerprints) matches
// too. REQUIRES: config's ranks settled.
void check_state_matches(const ResumeState& state, const std::string& fingerprint, const OrderFields& order,
                         const Config& config, const std::vector<std::string>& earlier = {});

// Throws Error(state) for a step of split `name` no run reaches (beyond 2^53 batches, or
// whose rows overflow the sample counter). REQUIRES: a validated config.
void check_resume_step(const std::string& name, const SplitPosition& saved, const Config& config);

// Packed epochs: throws Error(state) for an epoch or batch_in_epoch no run reaches in
// `saved.step` steps (a packed epoch that forms no batch is skipped, at most 64 in a row).
void check_packed_reachable(const std::string& name, const SplitPosition& saved);

// Epoch orders: throws Error(state) when split `name` resumes in an epoch whose seed,
// epoch_seed + epoch, is beyond numpy's seed range (only a shuffled split seeds its order).
void check_epoch_seed(const std::string& name, const Config& config, std::uint64_t epoch);

// Where the position follows from the step: throws Error(state) when the state's other
// fields say otherwise (a state that contradicts itself was not written by a Loader).
// Returns `resolved` with row_in_epoch 0.
SplitPosition check_follows_from_step(const std::string& name, const SplitPosition& saved, SplitPosition resolved);

}  // namespace tokenfeed
