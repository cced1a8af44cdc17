#include "inspect/mixture_sizes_report.hpp"

#include <memory>
#include <utility>

#include "mixture/mixture.hpp"
#include "splits/mode_builder.hpp"
#include "splits/resolved_options.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

std::vector<SizedWeight> mixture_weights_from_sizes(const Config& config) {
  if (!has_weights_from_sizes(config)) return {};
  const ResolvedOptions mixture = resolve_options(config);
  // Each source's splits as the mixture opens them (its member config, the same split
  // openers), without the rest of a loader's open: no fingerprint pass over the tokens, no
  // pipeline, no open line. A split reads its settled options for as long as it lives.
  std::vector<std::unique_ptr<ResolvedOptions>> settled;
  std::vector<OpenedSplits> opened;
  std::vector<const DatasetSplit*> trains;
  for (const MixtureSource& source : mixture.config.mixture) {
    try {
      settled.push_back(
          std::make_unique<ResolvedOptions>(resolve_options(mixture_member_config(mixture.config, source))));
      opened.push_back(open_dataset_splits(*settled.back()));
    } catch (const Error& e) {
      throw Error(e.kind(), "mixture source '" + source.name + "': " + e.what());
    }
    const auto train = opened.back().find("train");
    if (train == opened.back().end())
      throw Error(ErrorKind::io, "mixture source " + source.name + " has no train split");
    trains.push_back(train->second.get());
  }
  return weights_from_dataset_sizes(mixture.config, trains);
}

}  // namespace tokenfeed
