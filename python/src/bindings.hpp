// What module.cpp shares with the other binding files of tokenfeed._tokenfeed: the Python
// Batch and config conversion (so every file hands out batches and reads configs the same
// way), the array types taken from Python, and each file's bind_<topic>, called from the
// NB_MODULE in module.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed_python {

// 1-D C-contiguous CPU arrays taken from Python (numpy, torch, ...), and their elements as a span.
using U32Array = nanobind::ndarray<const std::uint32_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using U8Array = nanobind::ndarray<const std::uint8_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using U64Array = nanobind::ndarray<const std::uint64_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;

inline std::span<const std::uint32_t> span_of(const U32Array& a) { return {a.data(), a.shape(0)}; }
inline std::span<const std::uint8_t> span_of(const U8Array& a) { return {a.data(), a.shape(0)}; }
inline std::span<const std::uint64_t> span_of(const U64Array& a) { return {a.data(), a.shape(0)}; }

// A misuse of the API from Python: tokenfeed.UsageError.
[[noreturn]] inline void usage_error(const std::string& message) {
  throw tokenfeed::Error(tokenfeed::ErrorKind::usage, message);
}

// The Python Batch owning `batch`: numpy views of its buffers (see module.cpp).
nanobind::object wrap_batch(tokenfeed::Batch&& batch);

// A Config from an XML path or a mapping of keys, then `overrides`, as Loader(config, **overrides).
tokenfeed::Config config_from_python(nanobind::handle source, const nanobind::kwargs& overrides);

// A Config as a dict of its effective keys (Loader.config).
nanobind::dict config_to_python(const tokenfeed::Config& config);

void bind_rl(nanobind::module_& m);
// DatasetWriter and dataset_metadata.json (dataset_writer.cpp).
void bind_dataset_writer(nanobind::module_& m);

}  // namespace tokenfeed_python
