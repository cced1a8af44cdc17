#include "splits/split_set.hpp"

#include "tokenfeed/error.hpp"

namespace tokenfeed {

SplitSet::~SplitSet() = default;

LoaderSplit& SplitSet::find(std::string_view name) const {
  const auto it = splits_.find(name);
  if (it == splits_.end()) {
    throw Error(ErrorKind::usage,
                "split '" + std::string(name) + "' is not in the dataset '" + config().dataset_dir.string() + "'");
  }
  return *it->second;
}

}  // namespace tokenfeed
