#include "splits/split_set.hpp"

#include "tokenfeed/error.hpp"

namespace tokenfeed {

SplitSet::~SplitSet() = default;

std::optional<std::uint64_t> SplitSet::source_epoch_after(std::string_view, std::size_t, std::uint64_t) const {
  throw Error(ErrorKind::usage, "source_epoch_after: the loader reads one dataset, not a mixture");
}

namespace {
[[noreturn]] void not_a_mixture(const std::string& call) {
  throw Error(ErrorKind::config, call +
                                     ": the loader reads one dataset; weights are set for a mixture's sources "
                                     "(<mixture> in the config)");
}
}  // namespace

std::uint64_t SplitSet::earliest_weight_step() const { not_a_mixture("earliest_weight_step"); }

void SplitSet::set_mixture_weights(const std::map<std::string, std::string>&, std::uint64_t, PipelineGate&) {
  not_a_mixture("set_mixture_weights");
}

const std::vector<WeightChange>& SplitSet::weight_changes() const noexcept {
  static const std::vector<WeightChange> none;
  return none;
}

// A single dataset's state has no changes; one that has them is a mixture's, which the
// fingerprint check refuses.
std::optional<PreparedWeights> SplitSet::adopt_state_changes(const std::vector<WeightChange>&) const {
  return std::nullopt;
}

void SplitSet::commit_weights(PreparedWeights, PipelineGate&) { not_a_mixture("set_mixture_weights"); }

LoaderSplit& SplitSet::find(std::string_view name) const {
  const auto it = splits_.find(name);
  if (it == splits_.end()) {
    throw Error(ErrorKind::usage,
                "split '" + std::string(name) + "' is not in the dataset '" + config().dataset_dir.string() + "'");
  }
  return *it->second;
}

}  // namespace tokenfeed
