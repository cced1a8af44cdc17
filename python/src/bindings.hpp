// What the binding files of tokenfeed._tokenfeed share: the array types taken from Python
// and the numpy arrays handed back, the errors, the Python Batch and config conversion (so
// every file hands out batches and reads configs the same way), and each file's
// bind_TOPIC, called in order from the NB_MODULE in module.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed_python {

// ---------------------------------------------------------------------------------------
// Arrays

// 1-D C-contiguous CPU arrays taken from Python (numpy, torch, ...), and their elements as a span.
using U32Array = nanobind::ndarray<const std::uint32_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using U8Array = nanobind::ndarray<const std::uint8_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using U64Array = nanobind::ndarray<const std::uint64_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;

inline std::span<const std::uint32_t> span_of(const U32Array& a) { return {a.data(), a.shape(0)}; }
inline std::span<const std::uint8_t> span_of(const U8Array& a) { return {a.data(), a.shape(0)}; }
inline std::span<const std::uint64_t> span_of(const U64Array& a) { return {a.data(), a.shape(0)}; }

// A writable numpy array of `shape` viewing `data`, no copy, kept alive by `owner`.
template <typename T>
nanobind::object numpy_view(const T* data, std::size_t ndim, const std::size_t* shape, nanobind::handle owner) {
  static T empty_element{};  // a valid address for zero-size arrays
  T* p = data != nullptr ? const_cast<T*>(data) : &empty_element;
  nanobind::ndarray<nanobind::numpy, T, nanobind::c_contig> array(p, ndim, shape, owner);
  return nanobind::cast(array, nanobind::rv_policy::reference);
}

// A numpy array that owns `values` (moved to the heap, no copy of the elements); 1-D unless
// `shape` is given.
template <typename T>
nanobind::object numpy_owning(std::vector<T>&& values, std::initializer_list<std::size_t> shape = {}) {
  auto* heap = new std::vector<T>(std::move(values));
  if (heap->empty()) heap->reserve(1);  // a non-null data pointer even for zero size
  nanobind::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<std::size_t> dims(shape);
  if (dims.empty()) dims.push_back(heap->size());
  return numpy_view<T>(heap->data(), dims.size(), dims.data(), owner);
}

// ---------------------------------------------------------------------------------------
// Paths and file text

// A path from Python (str, bytes or os.PathLike) as the file system's bytes (os.fsencode),
// so that a name that is not UTF-8 still names its file.
inline std::filesystem::path file_path(nanobind::handle path) {
  const nanobind::bytes raw =
      nanobind::borrow<nanobind::bytes>(nanobind::module_::import_("os").attr("fsencode")(path));
  return std::string(raw.c_str(), raw.size());
}

// A str of bytes from the file system: UTF-8, any other byte kept as a lone surrogate
// (surrogateescape, as os.fsdecode and Python's file reading with that handler give it).
inline nanobind::str file_text(std::string_view bytes) {
  PyObject* text = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "surrogateescape");
  if (text == nullptr) throw nanobind::python_error();
  return nanobind::steal<nanobind::str>(text);
}

// ---------------------------------------------------------------------------------------
// Errors (errors.cpp)

// A misuse of the API from Python: tokenfeed.UsageError.
[[noreturn]] inline void usage_error(const std::string& message) {
  throw tokenfeed::Error(tokenfeed::ErrorKind::usage, message);
}

// The tokenfeed::Error that carries a Python exception raised by a callback across C++ code
// (a tokenfeed.Error subclass keeps its kind; anything else is ErrorKind::pipeline with
// Python's message). REQUIRES: the GIL held.
tokenfeed::Error error_from_python(const nanobind::python_error& e);

// Raises tokenfeed.ConversationError: a conversation the chat template functions cannot
// serialize. REQUIRES: the GIL held, bind_errors done.
[[noreturn]] void conversation_error(const std::string& message);

// ---------------------------------------------------------------------------------------
// The Batch (batch.cpp) and configs (config.cpp), shared by the Loader and the RL loader

// The Python Batch owning `batch`: numpy views of its buffers.
nanobind::object wrap_batch(std::unique_ptr<tokenfeed::Batch> batch);
nanobind::object wrap_batch(tokenfeed::Batch&& batch);

// The types config_from_python takes, as the stubs spell them: a config value (None leaves
// the key at its default; a float is taken only when it is a whole number, so none is
// declared), and the config itself.
inline constexpr const char* kConfigValueType =
    "str | int | bool | numpy.integer[typing.Any] | numpy.bool_ | os.PathLike[str] | None";
inline std::string config_source_type() {
  return std::string("str | os.PathLike[str] | collections.abc.Mapping[str, ") + kConfigValueType + "]";
}

// A Config from an XML path or a mapping of keys, then `overrides`, as Loader(config, **overrides).
tokenfeed::Config config_from_python(nanobind::handle source, const nanobind::kwargs& overrides);

// A Config as a dict of its effective keys (Loader.config).
nanobind::dict config_to_python(const tokenfeed::Config& config);

// Whether `value` is an instance of module.type (collections.abc.Mapping, numpy.bool_).
bool is_instance(nanobind::handle value, const char* module, const char* type);

// ---------------------------------------------------------------------------------------
// Each file's bindings, in the order module.cpp calls them

// tokenfeed.Error and its subclasses, ConversationError; the C++ exception's translation.
void bind_errors(nanobind::module_& m);
// set_logging (logging.cpp).
void bind_logging(nanobind::module_& m);
// Batch (batch.cpp).
void bind_batch(nanobind::module_& m);
// Loader, BatchIterator, and Loader.stats() (loader.cpp, stats.cpp).
void bind_loader(nanobind::module_& m);
// DatasetWriter and dataset_metadata.json (dataset_writer.cpp).
void bind_dataset_writer(nanobind::module_& m);
// SpecialTokenIds, Tokenizer, make_tokenizer (tokenizers.cpp).
void bind_tokenizers(nanobind::module_& m);
// The chat template's functions (chat.cpp).
void bind_chat(nanobind::module_& m);
// RL prompts and the group batcher (rl.cpp).
void bind_rl(nanobind::module_& m);
// read_audit_log: the library's audit-log reader (audit.cpp).
void bind_audit(nanobind::module_& m);
// The rules of a preparation's output directory: its staging directory, the check that it
// is absent or empty, the token dtype (output_dir.cpp).
void bind_output_dir(nanobind::module_& m);
// _prepare_text: the library's prepare-text with Python's encoder and parquet reader, and the
// prepare commands' defaults (_prepare_defaults, _prepare_text_defaults) (prepare_text.cpp).
void bind_prepare_text(nanobind::module_& m);
// _inspect: the library's dataset inspection as a dict (inspect.cpp).
void bind_inspect(nanobind::module_& m);

}  // namespace tokenfeed_python
