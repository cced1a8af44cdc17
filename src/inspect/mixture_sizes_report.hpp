// A mixture's weights from dataset sizes as `tokenfeed inspect --config FILE --steps N`
// shows them: the loader's own computation (loader/mixture_sizes), over the sources' splits
// opened as a loader opens them, but nothing else of a loader (no open line, no pipeline).
//
// Thread-safety: a free function; it opens files and starts no thread.
#pragma once

#include <vector>

#include "mixture/mixture_sizes.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// The weights a Loader over `config` computes at open, one per source with the figures they
// come from; empty when the config's weights are explicit. Throws the Error the loader would.
std::vector<SizedWeight> mixture_weights_from_sizes(const Config& config);

}  // namespace tokenfeed
