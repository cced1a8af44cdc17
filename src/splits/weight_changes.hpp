// Weight changes from the trainer (Loader::set_mixture_weights): a change names some of a
// mixture's sources and their new weights from a global step on. The train split's
// schedule is the config's stages with every change merged in as a stage of its own:
//
//   - at a change's step the round-robin restarts, with the weights in effect at that step
//     (the config stage's, or an earlier change's still in effect) and the named sources'
//     replaced: exactly a config stage starting there;
//   - a change holds until the next config stage or change, whichever comes first; a config
//     stage applies as written (its weights in the config, not those of a change before it);
//   - changes at one step apply in call order (the later call wins for a source both name),
//     after a config stage starting at that step.
//
// The history (every change, in call order) is what a resume state records and what the
// fingerprint hashes, so a resume reproduces the batches and another history is refused.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "splits/fingerprint.hpp"
#include "sampling/mixture_schedule.hpp"

namespace tokenfeed {

struct WeightChange {
  std::uint64_t step = 0;
  // Source name -> weight, each as canonical exact decimal text ("1.5", never "1.50").
  std::map<std::string, std::string> weights;
  bool operator==(const WeightChange&) const = default;
};

// `weights` (source name -> weight text, parsed as a config weight by
// parse_mixture_weight) at `step`, checked against the mixture's `names` and made
// canonical. Throws Error(config) naming the source for an unknown source, a weight that is
// not a non-negative decimal (a sign, NaN, an exponent, more than 6 decimals), or no source.
WeightChange make_weight_change(const std::map<std::string, std::string>& weights, std::uint64_t step,
                                const std::vector<std::string>& names);

// The canonical text of an exact weight: no leading zeros, no trailing decimal zeros.
std::string canonical_weight_text(const ExactWeight& weight);

// "chat=3,code=1.5": a change's weights as the audit log and messages write them.
std::string weights_text(const WeightChange& change);

// The stages of `config_schedule` (the config's, every one given in full) with `changes`
// merged in as described above, and each stage's name for errors (a change's names its
// step: one that leaves every weight zero). REQUIRES: every change's sources are among
// `names`.
struct MergedStages {
  std::vector<MixtureSchedule::StageSpec> specs;
  std::vector<std::string> names;
};
MergedStages stages_with_changes(const MixtureSchedule& config_schedule, const std::vector<WeightChange>& changes,
                                 const std::vector<std::string>& names);

// `order` with one field per change, "weights_changed.<i>" = "step=N chat=3,code=1.5", so
// that the fingerprint covers the history and a refused state names the change that
// differs. Replaces such fields already there.
void set_change_fields(OrderFields& order, const std::vector<WeightChange>& changes);

// A change history made ready to commit (Mixture builds it, the loader commits it once
// every check passed): the train split's schedule with the changes, and the order fields
// and fingerprint that cover them.
struct PreparedWeights {
  std::vector<WeightChange> changes;
  std::shared_ptr<const MixtureSchedule> schedule;
  OrderFields order;
  std::string fingerprint;
  std::vector<std::string> earlier_fingerprints;  // SplitSet::earlier_fingerprints of `order`
};

// The prefix of those fields' keys.
inline constexpr const char* kWeightChangeField = "weights_changed.";

}  // namespace tokenfeed
