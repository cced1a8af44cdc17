#include "loader/split_set.hpp"

#include "tokenfeed/error.hpp"

namespace tokenfeed {

SplitSet::~SplitSet() = default;

std::optional<std::uint64_t> SplitSet::source_epoch_after(std::string_view, std::size_t, std::uint64_t) const {
  throw Error(ErrorKind::usage, "source_epoch_after: the loader reads one dataset, not a mixture");
}

LoaderSplit& SplitSet::find(std::string_view name) const {
  const auto it = splits_.find(name);
  if (it == splits_.end()) {
    throw Error(ErrorKind::usage,
                "split '" + std::string(name) + "' is not in the dataset '" + config().dataset_dir.string() + "'");
  }
  return *it->second;
}

}  // namespace tokenfeed
