#include "inspect/mixture_sizes_report.hpp"

#include <utility>

#include "loader/mixture.hpp"
#include "loader/resolved_options.hpp"

namespace tokenfeed {

std::vector<SizedWeight> mixture_weights_from_sizes(const Config& config) {
  if (!has_weights_from_sizes(config)) return {};
  ResolvedOptions settled = resolve_options(config);
  const Mixture mixture(std::move(settled.config), std::move(settled.decode_threads_source));
  return mixture.weights_from_sizes();
}

}  // namespace tokenfeed
