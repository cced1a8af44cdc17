// Bindings of the library's one dataset_metadata.json writer and reader
// (tokenfeed::write_dataset_metadata, tokenfeed::read_dataset_vocabulary), so that the
// Python package writes and reads the file as `tokenfeed prepare`, the DatasetWriter's
// checksums and the loader do.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

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

}  // namespace

void bind_metadata(nb::module_& m) {
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
