// What module.cpp shares with the other binding files of tokenfeed._tokenfeed: the Python
// Batch and config conversion (so every file hands out batches and reads configs the same
// way), and each file's bind_<topic>, called from the NB_MODULE in module.cpp.
#pragma once

#include <nanobind/nanobind.h>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed_python {

// The Python Batch owning `batch`: numpy views of its buffers (see module.cpp).
nanobind::object wrap_batch(tokenfeed::Batch&& batch);

// A Config from an XML path or a mapping of keys, then `overrides`, as Loader(config, **overrides).
tokenfeed::Config config_from_python(nanobind::handle source, const nanobind::kwargs& overrides);

// A Config as a dict of its effective keys (Loader.config).
nanobind::dict config_to_python(const tokenfeed::Config& config);

void bind_rl(nanobind::module_& m);
void bind_metadata(nanobind::module_& m);

}  // namespace tokenfeed_python
