// Bindings for writing datasets: tokenfeed.DatasetWriter (the C++ EpisodeDatasetWriter),
// and the library's one dataset_metadata.json writer and reader
// (tokenfeed::write_dataset_metadata, tokenfeed::read_dataset_vocabulary), so that the
// Python package writes and reads the file as `tokenfeed prepare`, the DatasetWriter's
// checksums and the loader do.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "util/thread_annotations.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

template <typename Dtype, typename Parse>
std::optional<Dtype> dtype_argument(const std::optional<std::string>& text, const char* name, const char* allowed,
                                    Parse parse) {
  if (!text) return std::nullopt;
  const std::optional<Dtype> dtype = parse(*text);
  if (!dtype) {
    throw tokenfeed::Error(tokenfeed::ErrorKind::config, std::string("write_dataset_metadata: ") + name + " must be " +
                                                             allowed + ", not '" + *text + "'");
  }
  return dtype;
}

// The C++ writer (see dataset_writer.hpp: all or nothing, a non-empty split_dir refused
// unless overwrite) behind tokenfeed.DatasetWriter. Its calls run with the GIL released and
// one at a time under mutex_, so several Python threads may share a writer (the episodes
// are numbered in the order their add calls take the mutex) and finish() or discard()
// cannot free the C++ writer while another thread's add is using it.
class PyDatasetWriter {
 public:
  PyDatasetWriter(const std::string& split_dir, const std::string& token_dtype, bool write_mask,
                  std::uint64_t shard_tokens, bool overwrite)
      : write_mask_(write_mask) {
    const auto dtype = tokenfeed::parse_token_dtype(token_dtype);
    if (!dtype)
      throw tokenfeed::Error(tokenfeed::ErrorKind::config,
                             "DatasetWriter: token_dtype must be 'uint16' or 'uint32', not '" + token_dtype + "'");
    tokenfeed::EpisodeDatasetWriterOptions options;
    options.token_dtype = *dtype;
    options.write_mask = write_mask;
    options.shard_tokens = shard_tokens;
    options.overwrite = overwrite;
    nb::gil_scoped_release release;
    writer_ = std::make_unique<tokenfeed::EpisodeDatasetWriter>(split_dir, options);
  }

  void add(const U32Array& tokens, const std::optional<U8Array>& mask) {
    check_mask(tokens.shape(0), mask);
    const auto t = span_of(tokens);
    const std::span<const std::uint8_t> m = mask ? span_of(*mask) : std::span<const std::uint8_t>();
    nb::gil_scoped_release release;
    tokenfeed::MutexLock lock(mutex_);
    writer().add(t, m);
  }

  // Many episodes at once: `tokens` concatenated, `lengths` per episode.
  void add_many(const U32Array& tokens, const U64Array& lengths, const std::optional<U8Array>& mask) {
    check_mask(tokens.shape(0), mask);
    const auto t = span_of(tokens);
    const auto n = span_of(lengths);
    const std::span<const std::uint8_t> m = mask ? span_of(*mask) : std::span<const std::uint8_t>();
    std::uint64_t total = 0;
    for (const std::uint64_t len : n) {
      if (len > t.size() - std::min<std::uint64_t>(total, t.size())) {
        usage_error("DatasetWriter.add_many: the lengths add up to more than the " + std::to_string(t.size()) +
                    " tokens given");
      }
      total += len;
    }
    if (total != t.size()) {
      usage_error("DatasetWriter.add_many: the lengths add up to " + std::to_string(total) + " but " +
                  std::to_string(t.size()) + " tokens were given");
    }
    nb::gil_scoped_release release;
    tokenfeed::MutexLock lock(mutex_);
    tokenfeed::EpisodeDatasetWriter& w = writer();
    std::uint64_t at = 0;
    for (const std::uint64_t len : n) {
      w.add(t.subspan(at, len), m.empty() ? m : m.subspan(at, len));
      at += len;
    }
  }

  nb::dict finish() {
    tokenfeed::EpisodeDatasetWriterSummary summary;
    {
      nb::gil_scoped_release release;
      tokenfeed::MutexLock lock(mutex_);
      if (!summary_) {
        tokenfeed::EpisodeDatasetWriter& w = writer();
        try {
          summary_ = w.finish();
        } catch (...) {
          writer_.reset();  // the C++ writer discarded what it wrote
          throw;
        }
        writer_.reset();
      }
      summary = *summary_;
    }
    nb::dict d;
    d["episodes"] = summary.episodes;
    d["tokens"] = summary.tokens;
    d["masked_tokens"] = summary.masked_tokens;
    d["shards"] = summary.shards;
    return d;
  }

  // Removes what was written (nothing after finish()).
  void discard() {
    nb::gil_scoped_release release;
    tokenfeed::MutexLock lock(mutex_);
    writer_.reset();  // the C++ writer's destructor discards unless it finished
  }

  bool finished() {
    nb::gil_scoped_release release;
    tokenfeed::MutexLock lock(mutex_);
    return summary_.has_value();
  }

 private:
  tokenfeed::EpisodeDatasetWriter& writer() TF_REQUIRES(mutex_) {
    if (!writer_) {
      usage_error(summary_ ? "DatasetWriter: add() after finish()"
                           : "DatasetWriter: the writer was discarded (discard(), or a failed finish())");
    }
    return *writer_;
  }
  void check_mask(std::size_t tokens, const std::optional<U8Array>& mask) const {
    if (write_mask_ && !mask)
      usage_error("DatasetWriter.add: a mask is required (the writer was made with write_mask=True)");
    if (mask && mask->shape(0) != tokens) {
      usage_error("DatasetWriter.add: the mask has " + std::to_string(mask->shape(0)) + " values for " +
                  std::to_string(tokens) + " tokens");
    }
  }

  const bool write_mask_;
  tokenfeed::Mutex mutex_;
  std::unique_ptr<tokenfeed::EpisodeDatasetWriter> writer_ TF_GUARDED_BY(mutex_);
  std::optional<tokenfeed::EpisodeDatasetWriterSummary> summary_ TF_GUARDED_BY(mutex_);
};

}  // namespace

void bind_dataset_writer(nb::module_& m) {
  nb::class_<PyDatasetWriter>(m, "_DatasetWriter")
      .def(nb::init<const std::string&, const std::string&, bool, std::uint64_t, bool>(), "split_dir"_a,
           "token_dtype"_a, "write_mask"_a, "shard_tokens"_a, "overwrite"_a)
      .def("add", &PyDatasetWriter::add, "tokens"_a, "mask"_a.none())
      .def("add_many", &PyDatasetWriter::add_many, "tokens"_a, "lengths"_a, "mask"_a.none())
      .def("finish", &PyDatasetWriter::finish)
      .def("discard", &PyDatasetWriter::discard)
      .def_prop_ro("finished", &PyDatasetWriter::finished);

  m.def(
      "_write_dataset_metadata",
      [](const std::string& dataset_dir, const std::optional<std::string>& token_dtype,
         const std::optional<std::string>& mask_dtype, std::optional<std::int64_t> vocab_size,
         std::optional<std::int64_t> eot_token_id, std::optional<std::int64_t> eos_token_id,
         std::optional<std::int64_t> pad_token_id, const std::optional<std::string>& special_tokens_json,
         const std::string& extra_json) {
        tokenfeed::DatasetMetadataFields fields;
        fields.token_dtype =
            dtype_argument<tokenfeed::TokenDtype>(token_dtype, "token_dtype", "'uint16' or 'uint32'",
                                                  [](const std::string& s) { return tokenfeed::parse_token_dtype(s); });
        fields.mask_dtype =
            dtype_argument<tokenfeed::MaskDtype>(mask_dtype, "mask_dtype", "'uint8' or 'float32'",
                                                 [](const std::string& s) { return tokenfeed::parse_mask_dtype(s); });
        fields.vocab_size = vocab_size;
        fields.eot_token_id = eot_token_id;
        fields.eos_token_id = eos_token_id;
        fields.pad_token_id = pad_token_id;
        fields.special_tokens_json = special_tokens_json.value_or("");
        fields.extra_json = extra_json;
        fields.keep_recorded_checksums = true;
        fields.ascii = true;  // as json.dump writes, which the package used before
        nb::gil_scoped_release release;
        return tokenfeed::write_dataset_metadata(dataset_dir, fields).string();
      },
      "dataset_dir"_a, "token_dtype"_a.none(), "mask_dtype"_a.none(), "vocab_size"_a.none(), "eot_token_id"_a.none(),
      "eos_token_id"_a.none(), "pad_token_id"_a.none(), "special_tokens_json"_a.none(), "extra_json"_a,
      "Writes dataset_dir/dataset_metadata.json through the library's one metadata writer (see "
      "tokenfeed.write_dataset_metadata).");
  m.def(
      "_special_tokens_from_metadata",
      [](const std::string& dataset_dir) {
        nb::gil_scoped_release release;
        return tokenfeed::read_dataset_vocabulary(dataset_dir).special_tokens;
      },
      "dataset_dir"_a,
      "The chat template's ids that dataset_dir/dataset_metadata.json records, read as the loader reads them, "
      "or None.");
}

}  // namespace tokenfeed_python
