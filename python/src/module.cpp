// tokenfeed._tokenfeed: the nanobind bindings behind `import tokenfeed` (python/tokenfeed/
// re-exports them and adds the pure-Python helpers).
//
// What crosses the boundary, and how:
//  - A Batch's arrays are numpy views of the loader's pooled buffers, never copies. One
//    capsule owns the C++ tokenfeed::Batch; the Python Batch and every array made from it
//    hold a reference to that capsule, so the buffers stay valid while any of them is
//    alive (even after the Loader is gone) and go back to the pool as soon as the last one
//    is released. Nothing here forms a reference cycle, so the release happens through
//    reference counting at once, never later in the garbage collector (a trainer may hold
//    at most Loader::kMaxHeldBatches batches of a split at a time).
//  - The arrays are writable: DLPack consumers (torch.from_dlpack) refuse read-only numpy
//    arrays, and a write only changes the caller's own batch (the pipeline refills every
//    buffer before it reuses it).
//  - Opening a dataset (Loader construction), get_batch, load_state and close run with the
//    GIL released; one mutex per Loader keeps the C++ loader's one-trainer-thread rule
//    when several Python threads share a loader. stop() takes only a shared reference to
//    the C++ loader (never that mutex, which a blocked get_batch holds), so it can wake
//    that get_batch while close() in another thread waits to free the loader. The
//    DatasetWriter's calls, GIL-free too, are serialized by a mutex of their own.
//  - tokenfeed::Error becomes the Python exception class of its kind (ConfigError, ...,
//    all subclasses of tokenfeed.Error), with the C++ message unchanged; the one exception
//    is an unusable in-memory conversation given to the chat template functions, which is
//    a ConversationError (a ValueError, not the OSError that FormatError is for files).
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "measure/measure.hpp"
#include "measure/nearest_rank.hpp"
#include "mixture.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "tokenfeed/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Clock = std::chrono::steady_clock;
using tokenfeed::Error;
using tokenfeed::ErrorKind;

// ---------------------------------------------------------------------------------------
// Exceptions

constexpr std::size_t kErrorKinds = 6;  // tokenfeed::ErrorKind's enumerators

// The Python class of each ErrorKind, created at import and kept for the process.
std::array<PyObject*, kErrorKinds> g_error_classes{};
// tokenfeed.ConversationError: what the chat template functions raise for a conversation
// they cannot serialize (an argument's content, so a ValueError; kind "format").
PyObject* g_conversation_error = nullptr;

std::size_t kind_index(ErrorKind kind) { return static_cast<std::size_t>(kind); }

PyObject* new_error_class(nb::module_& m, const char* name, const char* doc, nb::handle bases, const char* kind) {
  nb::dict attrs;
  if (kind != nullptr) attrs["kind"] = kind;
  const std::string qualified = std::string("tokenfeed.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), attrs.ptr());
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

void register_errors(nb::module_& m) {
  PyObject* base = new_error_class(m, "Error",
                                   "Base class of every error tokenfeed raises; `kind` names the C++ ErrorKind.",
                                   nb::handle(PyExc_Exception), nullptr);
  const auto make = [&](ErrorKind kind, const char* name, PyObject* python_base, const char* doc) {
    nb::tuple bases = nb::make_tuple(nb::handle(base), nb::handle(python_base));
    g_error_classes[kind_index(kind)] = new_error_class(m, name, doc, bases, tokenfeed::to_string(kind));
  };
  make(ErrorKind::config, "ConfigError", PyExc_ValueError, "A bad configuration key or value, or malformed XML.");
  make(ErrorKind::io, "IoError", PyExc_OSError, "A file or directory that cannot be opened, read or written.");
  make(ErrorKind::format, "FormatError", PyExc_OSError,
       "A file whose content is invalid (sizes, index records, headers), or an unusable conversation.");
  make(ErrorKind::state, "StateError", PyExc_ValueError,
       "A resume state that is malformed or belongs to another dataset or config.");
  make(ErrorKind::usage, "UsageError", PyExc_ValueError, "A call made where it is not allowed.");
  make(ErrorKind::pipeline, "PipelineError", PyExc_RuntimeError,
       "A failure inside a background stage that is none of the other kinds.");
  g_conversation_error = new_error_class(
      m, "ConversationError",
      "A conversation the chat template cannot serialize (no assistant turn, a special id in the content, an id "
      "past vocab_size, an unknown role): a ValueError, as the problem is in the argument, not in a file.",
      nb::make_tuple(nb::handle(base), nb::handle(PyExc_ValueError)), tokenfeed::to_string(ErrorKind::format));

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const std::size_t i = kind_index(e.kind());
      PyErr_SetString(i < kErrorKinds && g_error_classes[i] ? g_error_classes[i] : g_error_classes[kind_index(ErrorKind::pipeline)],
                      e.what());
    }
  });
}

using tokenfeed_python::usage_error;

[[noreturn]] void conversation_error(const std::string& message) {
  PyErr_SetString(g_conversation_error, message.c_str());
  throw nb::python_error();
}

// ---------------------------------------------------------------------------------------
// Arrays

// A numpy array of `shape` viewing `data`, kept alive by `owner`.
template <typename T>
nb::object numpy_view(const T* data, std::size_t ndim, const std::size_t* shape, nb::handle owner) {
  static T empty_element{};  // a valid address for zero-size arrays
  T* p = data != nullptr ? const_cast<T*>(data) : &empty_element;
  nb::ndarray<nb::numpy, T, nb::c_contig> array(p, ndim, shape, owner);
  return nb::cast(array, nb::rv_policy::reference);
}

// A numpy array that owns `values` (moved to the heap, no copy of the elements).
template <typename T>
nb::object numpy_owning(std::vector<T>&& values, std::initializer_list<std::size_t> shape = {}) {
  auto* heap = new std::vector<T>(std::move(values));
  if (heap->empty()) heap->reserve(1);  // a non-null data pointer even for zero size
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<std::size_t> dims(shape);
  if (dims.empty()) dims.push_back(heap->size());
  return numpy_view<T>(heap->data(), dims.size(), dims.data(), owner);
}

using tokenfeed_python::span_of;
using tokenfeed_python::U32Array;
using tokenfeed_python::U64Array;
using tokenfeed_python::U8Array;

// ---------------------------------------------------------------------------------------
// Batch

enum Field : std::size_t {
  kX,
  kY,
  kMask,
  kLabels,
  kTokenWeights,
  kPositionIds,
  kCuSeqlens,
  kEpisodeIds,
  kDocIds,
  kSegments,
  kLogProbs,
  kRewards,
  kGroupIds,
  kSourceIds,
  kFieldCount
};

// The Python Batch: the capsule that owns the C++ batch, and each field's array, made on
// first access and then returned again (the same object, the same data pointer).
class PyBatch {
 public:
  explicit PyBatch(std::unique_ptr<tokenfeed::Batch> batch) : batch_(batch.get()) {
    owner_ = nb::capsule(batch.release(), [](void* p) noexcept { delete static_cast<tokenfeed::Batch*>(p); });
  }

  const tokenfeed::Batch& batch() const {
    if (batch_ == nullptr) usage_error("the batch was released");
    return *batch_;
  }
  bool valid() const noexcept { return batch_ != nullptr; }

  // Drops this object's references; the buffers return to the pool once no array made
  // from this batch is alive either.
  void release() {
    for (nb::object& a : cache_) a.reset();
    owner_.reset();
    batch_ = nullptr;
  }

  // A B x T field (or 1-D when it is not B x T, or empty).
  template <typename T>
  nb::object grid(Field f, std::span<const T> data) {
    nb::object& slot = cache_[f];
    if (!slot.is_valid()) {
      const tokenfeed::Batch& b = batch();
      const std::size_t shape2[2] = {b.rows(), b.cols()};
      const std::size_t shape1[1] = {data.size()};
      const bool is_grid = !data.empty() && data.size() == b.rows() * b.cols();
      slot = is_grid ? numpy_view<T>(data.data(), 2, shape2, owner_) : numpy_view<T>(data.data(), 1, shape1, owner_);
    }
    return slot;
  }
  template <typename T>
  nb::object vector(Field f, std::span<const T> data) {
    nb::object& slot = cache_[f];
    if (!slot.is_valid()) {
      batch();
      const std::size_t shape[1] = {data.size()};
      slot = numpy_view<T>(data.data(), 1, shape, owner_);
    }
    return slot;
  }

  nb::object x() { return grid(kX, batch().x()); }
  nb::object y() { return grid(kY, batch().y()); }
  nb::object mask() { return grid(kMask, batch().mask()); }
  nb::object labels() { return grid(kLabels, batch().labels()); }
  nb::object token_weights() { return grid(kTokenWeights, batch().token_weights()); }
  nb::object position_ids() { return grid(kPositionIds, batch().position_ids()); }
  nb::object doc_ids() { return grid(kDocIds, batch().doc_ids()); }
  nb::object cu_seqlens() { return vector(kCuSeqlens, batch().cu_seqlens()); }
  nb::object episode_ids() { return vector(kEpisodeIds, batch().episode_ids()); }
  // RL batches only (empty arrays otherwise).
  nb::object log_probs() { return grid(kLogProbs, batch().log_probs()); }
  nb::object rewards() { return vector(kRewards, batch().rewards()); }
  nb::object group_ids() { return vector(kGroupIds, batch().group_ids()); }
  nb::object source_ids() { return vector(kSourceIds, batch().source_ids()); }

  // The PackedSegment records themselves, no copy: a 1-D numpy structured array (fields
  // row, column, positions, episode; segment_dtype()) over the batch's buffer.
  nb::object segments() {
    nb::object& slot = cache_[kSegments];
    if (!slot.is_valid()) {
      const auto segs = batch().segments();
      const std::size_t bytes[1] = {segs.size_bytes()};
      nb::object raw = numpy_view<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(segs.data()), 1, bytes, owner_);
      slot = raw.attr("view")(segment_dtype());
    }
    return slot;
  }

  // numpy's dtype of tokenfeed::PackedSegment, made from the struct's own layout.
  static nb::handle segment_dtype() {
    static PyObject* dtype = nullptr;  // kept for the process, as the error classes
    if (dtype == nullptr) {
      using tokenfeed::PackedSegment;
      static_assert(std::is_standard_layout_v<PackedSegment>);
      static_assert(sizeof(PackedSegment::row) == 4 && sizeof(PackedSegment::column) == 4 &&
                    sizeof(PackedSegment::positions) == 4 && sizeof(PackedSegment::episode) == 8);
      static_assert(std::is_unsigned_v<decltype(PackedSegment::row)> && std::is_signed_v<decltype(PackedSegment::episode)>);
      nb::dict spec;
      spec["names"] = nb::make_tuple("row", "column", "positions", "episode");
      spec["formats"] = nb::make_tuple("<u4", "<u4", "<u4", "<i8");
      spec["offsets"] = nb::make_tuple(offsetof(PackedSegment, row), offsetof(PackedSegment, column),
                                       offsetof(PackedSegment, positions), offsetof(PackedSegment, episode));
      spec["itemsize"] = sizeof(PackedSegment);
      dtype = nb::module_::import_("numpy").attr("dtype")(spec).release().ptr();
    }
    return dtype;
  }

  // Every non-empty array field, by name (x and tokens, y and labels may share memory).
  nb::dict arrays() {
    nb::dict d;
    const tokenfeed::Batch& b = batch();
    d["x"] = x();
    d["y"] = y();
    if (b.has_mask()) d["mask"] = mask();
    d["tokens"] = x();
    // Empty with contract_fields=false.
    if (!b.labels().empty()) d["labels"] = labels();
    if (!b.token_weights().empty()) d["token_weights"] = token_weights();
    if (!b.position_ids().empty()) d["position_ids"] = position_ids();
    if (!b.cu_seqlens().empty()) d["cu_seqlens"] = cu_seqlens();
    d["episode_ids"] = episode_ids();
    if (!b.doc_ids().empty()) d["doc_ids"] = doc_ids();
    if (!b.segments().empty()) d["segments"] = segments();        // sft_packed, RL
    if (!b.log_probs().empty()) d["log_probs"] = log_probs();     // RL, when the sampler gave them
    if (!b.rewards().empty()) d["rewards"] = rewards();           // RL
    if (!b.group_ids().empty()) d["group_ids"] = group_ids();     // RL
    if (!b.source_ids().empty()) d["source_ids"] = source_ids();  // a mixture
    return d;
  }

  std::string repr() const {
    if (batch_ == nullptr) return "Batch(released)";
    const tokenfeed::Batch& b = *batch_;
    return "Batch(split='" + std::string(b.split()) + "', step=" + std::to_string(b.step()) +
           ", epoch=" + std::to_string(b.epoch()) + ", batch_in_epoch=" + std::to_string(b.batch_in_epoch()) +
           ", shape=(" + std::to_string(b.rows()) + ", " + std::to_string(b.cols()) +
           "), real_rows=" + std::to_string(b.real_rows()) + ", mask=" + (b.has_mask() ? "True" : "False") + ")";
  }

 private:
  tokenfeed::Batch* batch_ = nullptr;  // owned by owner_
  nb::object owner_;                   // the capsule every array references
  std::array<nb::object, kFieldCount> cache_;
};

// ---------------------------------------------------------------------------------------
// Config

bool is_instance(nb::handle value, const char* module, const char* type) {
  const int r = PyObject_IsInstance(value.ptr(), nb::module_::import_(module).attr(type).ptr());
  if (r < 0) throw nb::python_error();
  return r == 1;
}

// A config value as its XML text: str, int (numpy integers too), bool (numpy's too), an
// integer-valued float, or a path.
std::string value_text(std::string_view key, nb::handle value) {
  PyObject* v = value.ptr();
  if (PyBool_Check(v)) return v == Py_True ? "true" : "false";
  if (is_instance(value, "numpy", "bool_")) return PyObject_IsTrue(v) == 1 ? "true" : "false";
  if (PyUnicode_Check(v)) return nb::cast<std::string>(value);
  if (PyLong_Check(v) || PyIndex_Check(v)) {  // int, numpy integers
    PyObject* index = PyNumber_Index(v);
    if (index == nullptr) throw nb::python_error();
    return nb::cast<std::string>(nb::str(nb::steal(index)));
  }
  if (PyFloat_Check(v) && nb::cast<bool>(value.attr("is_integer")())) {
    return nb::cast<std::string>(nb::str(nb::int_(value)));
  }
  if (nb::hasattr(value, "__fspath__")) return nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(value));
  throw Error(ErrorKind::config, "config key '" + std::string(key) + "': unsupported value " +
                                     nb::cast<std::string>(nb::repr(value)) +
                                     " (give a str, int, bool or path; a float only when it is a whole number)");
}

// Applies key/value pairs; a relative dataset_dir given from Python resolves against the
// working directory (an XML file's own keys resolve against the file's directory).
void apply_items(tokenfeed::Config& config, nb::handle mapping) {
  for (auto [k, v] : nb::borrow<nb::dict>(mapping)) {
    if (!PyUnicode_Check(k.ptr())) throw Error(ErrorKind::config, "config keys must be strings, got " + nb::cast<std::string>(nb::repr(k)));
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;  // absent: the default
    if (tokenfeed::python::apply_mixture_key(config, key, v, value_text)) continue;
    tokenfeed::set_config_value(config, key, value_text(key, v));
    if (key == "dataset_dir" && config.dataset_dir.is_relative()) {
      config.dataset_dir = std::filesystem::absolute(config.dataset_dir).lexically_normal();
    }
  }
}

tokenfeed::Config make_config(nb::handle source, const nb::kwargs& overrides) {
  tokenfeed::Config config;
  if (PyDict_Check(source.ptr())) {
    apply_items(config, source);
  } else if (PyUnicode_Check(source.ptr()) || nb::hasattr(source, "__fspath__")) {
    const std::string path = nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(source));
    nb::gil_scoped_release release;
    config = tokenfeed::load_config_file(path);
  } else if (is_instance(source, "collections.abc", "Mapping")) {
    apply_items(config, nb::handle(reinterpret_cast<PyObject*>(&PyDict_Type))(source));  // dict(source)
  } else {
    throw nb::type_error("Loader(config): config must be a path to an XML file or a mapping (dict) of config keys");
  }
  apply_items(config, overrides);
  return config;
}

nb::dict config_dict(const tokenfeed::Config& config) {
  nb::dict d;
  for (const auto& [key, value] : tokenfeed::config_entries(config)) d[key.c_str()] = value;
  return d;
}

// ---------------------------------------------------------------------------------------
// Loader

// get_batch as the Python trainer sees it, per split, with the definitions of
// `tokenfeed bench` (tools/cmd_bench.cpp): a call's duration runs from the method's entry
// to its return with the GIL held again (so it includes waiting for the loader's mutex and
// for the GIL); a step "waited for data" when its batch's wait_us() is over 50 us; a call
// is "slow" when it took over 50 us for any reason. The measurement starts with the first
// call after the loader opened or after reset_stats(), whose calls count as warm-up.
struct CallTiming {
  static constexpr std::size_t kWindow = 8192;  // calls kept for the percentiles
  static constexpr double kStallUs = tokenfeed::measure::kStallUs;
  std::vector<float> recent_us;  // the last kWindow durations (a ring once full)
  std::size_t next = 0;
  std::uint64_t warmup = 0;      // calls made before the last reset_stats()
  std::uint64_t calls = 0;
  std::uint64_t data_waits = 0;  // batches whose wait_us() > kStallUs
  std::uint64_t slow_calls = 0;  // calls that took > kStallUs
  std::uint64_t waits = 0;       // batches that found the ring empty (wait_us() > 0)
  double total_wait_us = 0, max_wait_us = 0;
  double sum_us = 0, max_us = 0;
  std::uint64_t positions = 0, real_positions = 0;
  Clock::time_point start, last_return;  // the first measured call's start, the last one's return
  // CPU time at the first measured call: the whole process's, and the calling (trainer's)
  // thread's through its CPU clock, which stats() reads from any thread.
  double process_cpu0 = 0, trainer_cpu0 = 0;
  clockid_t trainer_clock{};
  bool has_trainer_clock = false;

  static double clock_seconds(clockid_t id) {
    timespec ts{};
    if (clock_gettime(id, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }

  void record(Clock::time_point call_start, Clock::time_point call_return, const tokenfeed::Batch& b) {
    const double us = std::chrono::duration<double, std::micro>(call_return - call_start).count();
    if (recent_us.size() < kWindow) {
      recent_us.push_back(static_cast<float>(us));
    } else {
      recent_us[next] = static_cast<float>(us);
      next = (next + 1) % kWindow;
    }
    if (calls == 0) {
      start = call_start;
      process_cpu0 = tokenfeed::measure::process_cpu_seconds();
      has_trainer_clock = pthread_getcpuclockid(pthread_self(), &trainer_clock) == 0;
      trainer_cpu0 = has_trainer_clock ? clock_seconds(trainer_clock) : 0;
    }
    last_return = call_return;
    ++calls;
    const double wait = b.wait_us();
    if (wait > kStallUs) ++data_waits;
    if (us > kStallUs) ++slow_calls;
    if (wait > 0) ++waits;
    total_wait_us += wait;
    max_wait_us = std::max(max_wait_us, wait);
    sum_us += us;
    max_us = std::max(max_us, us);
    positions += b.rows() * b.cols();
    real_positions += b.real_positions();
  }

  // Starts a new measurement; the calls so far become warm-up.
  void reset() {
    const std::uint64_t done = warmup + calls;
    *this = CallTiming();
    warmup = done;
  }
};

class PyLoader {
 public:
  explicit PyLoader(tokenfeed::Config config) {  // called with the GIL released
    const auto start = Clock::now();
    auto loader = std::make_shared<tokenfeed::Loader>(std::move(config));
    open_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::lock_guard ptr_lock(ptr_mutex_);
    loader_ = std::move(loader);
  }

  // Runs f with the GIL released and the loader's mutex held.
  template <typename F>
  auto locked(F&& f) {
    nb::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    return f(loader());
  }

  // Waits in slices of kSignalSlice with the GIL released, and checks for signals with the
  // GIL held between them, so that Ctrl-C raises KeyboardInterrupt within a slice even
  // while no batch comes. An interrupted wait consumes nothing: the loader stays usable.
  nb::object get_batch(const std::string& split) {
    static constexpr auto kSignalSlice = std::chrono::milliseconds(50);
    auto batch = std::make_unique<tokenfeed::Batch>();
    const auto start = Clock::now();
    while (true) {
      const bool got = locked([&](tokenfeed::Loader& l) {
        std::optional<tokenfeed::Batch> b = l.try_get_batch(split, kSignalSlice);
        if (b) *batch = std::move(*b);
        return b.has_value();
      });
      if (got) break;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
    const auto end = Clock::now();  // the GIL is held again: the call as the trainer sees it
    {
      std::lock_guard timing_lock(timing_mutex_);
      timing_[split].record(start, end, *batch);
    }
    return nb::cast(PyBatch(std::move(batch)), nb::rv_policy::move);
  }

  std::string save_state() {
    return locked([](tokenfeed::Loader& l) { return l.save_state(); });
  }
  void load_state(const std::string& text) {
    locked([&](tokenfeed::Loader& l) { l.load_state(text); });
  }

  // Wakes a get_batch blocked in another thread (which then raises UsageError). It cannot
  // take mutex_, which that get_batch holds: it takes a reference to the loader under
  // ptr_mutex_ instead, so a close() in a third thread cannot free the loader under it
  // (the last reference, wherever it is dropped, frees it).
  void stop() {
    std::shared_ptr<tokenfeed::Loader> loader;
    {
      std::lock_guard ptr_lock(ptr_mutex_);
      loader = loader_;
    }
    if (loader) {
      nb::gil_scoped_release release;
      loader->stop();
      loader.reset();
    }
  }

  // Stops the pipelines and frees the loader now (batches already handed out stay valid).
  void close() {
    stop();
    nb::gil_scoped_release release;
    std::lock_guard lock(mutex_);  // after the get_batch that stop() woke has returned
    std::shared_ptr<tokenfeed::Loader> loader;
    {
      std::lock_guard ptr_lock(ptr_mutex_);
      loader = std::move(loader_);
    }
    loader.reset();
  }
  bool closed() {
    std::lock_guard ptr_lock(ptr_mutex_);
    return loader_ == nullptr;
  }

  std::string repr() {
    if (closed()) return "Loader(closed)";
    const tokenfeed::Config c = locked([](tokenfeed::Loader& l) { return l.config(); });
    return "Loader(dataset_dir='" + c.dataset_dir.string() + "', dataset_mode=" + tokenfeed::to_string(c.dataset_mode) +
           ", batch_size=" + std::to_string(c.batch_size) + ", block_size=" + std::to_string(c.block_size) + ")";
  }

  nb::dict config() {
    const tokenfeed::Config c = locked([](tokenfeed::Loader& l) { return l.config(); });
    return config_dict(c);
  }
  std::string fingerprint() {
    return locked([](tokenfeed::Loader& l) { return l.fingerprint(); });
  }
  std::vector<std::string> source_names() {
    return locked([](tokenfeed::Loader& l) { return l.source_names(); });
  }
  std::vector<std::string> splits() {
    return locked([](tokenfeed::Loader& l) {
      std::vector<std::string> names;
      for (const char* s : {"train", "val"}) {
        if (l.has_split(s)) names.emplace_back(s);
      }
      return names;
    });
  }

  tokenfeed::DatasetVocabulary vocabulary() {
    return locked([](tokenfeed::Loader& l) { return l.vocabulary(); });
  }
  tokenfeed::Config effective_config() {
    return locked([](tokenfeed::Loader& l) { return l.config(); });
  }

  tokenfeed::SplitInfo split_info(const std::string& split) {
    return locked([&](tokenfeed::Loader& l) { return l.split_info(split); });
  }

  nb::dict info(const std::string& split) {
    const tokenfeed::SplitInfo i = split_info(split);
    const tokenfeed::Config c = locked([](tokenfeed::Loader& l) { return l.config(); });
    nb::dict d;
    d["split"] = i.name;
    d["dataset_mode"] = tokenfeed::to_string(c.dataset_mode);
    d["batch_sampling_mode"] = c.batch_sampling_mode ? tokenfeed::to_string(*c.batch_sampling_mode) : "";
    d["batch_size"] = c.batch_size;
    d["block_size"] = c.block_size;
    d["episodes"] = i.episodes;
    d["kept_episodes"] = i.kept_episodes;
    d["windows"] = i.windows;
    d["tokens"] = i.tokens;
    d["shards"] = i.shards;
    d["mask"] = i.mask;
    d["batches_per_epoch"] = i.batches_per_epoch;
    return d;
  }

  // The figures of `tokenfeed bench --json`, under its names and with its meanings, over
  // the calls measured so far (see CallTiming), plus the split's facts. Not reported:
  // bench's `config` and `consumer_us` (its own run's parameters).
  nb::dict stats(const std::string& split) {
    struct Snapshot {
      tokenfeed::SplitStats stats;
      tokenfeed::SplitInfo info;
      std::int64_t batch_size = 0, block_size = 0;
      std::int64_t prefetch_depth_setting = 0;  // 0: auto
      std::string dataset_mode;
    };
    const Snapshot s = locked([&](tokenfeed::Loader& l) {
      Snapshot snap;
      snap.stats = l.split_stats(split);
      snap.info = l.split_info(split);
      snap.batch_size = l.config().batch_size;
      snap.block_size = l.config().block_size;
      snap.prefetch_depth_setting = l.config().prefetch_depth;
      snap.dataset_mode = tokenfeed::to_string(l.config().dataset_mode);
      return snap;
    });
    CallTiming t;
    {
      std::lock_guard timing_lock(timing_mutex_);
      const auto it = timing_.find(split);
      if (it != timing_.end()) t = it->second;
    }
    const double seconds = t.calls > 0 ? std::chrono::duration<double>(t.last_return - t.start).count() : 0.0;
    const double n = static_cast<double>(t.calls);
    const double per_batch = static_cast<double>(s.batch_size * s.block_size);
    const auto fraction = [&](std::uint64_t count) { return t.calls > 0 ? static_cast<double>(count) / n : 0.0; };
    nb::dict d;
    d["split"] = split;
    d["dataset_mode"] = s.dataset_mode;
    d["batch_size"] = s.batch_size;
    d["block_size"] = s.block_size;
    d["mask"] = s.info.mask;
    d["batches"] = t.calls;
    d["warmup"] = t.warmup;
    d["seconds"] = seconds;
    d["batches_per_s"] = seconds > 0 ? n / seconds : 0.0;
    d["tokens_per_s"] = seconds > 0 ? n * per_batch / seconds : 0.0;
    d["real_tokens_per_s"] = seconds > 0 ? static_cast<double>(t.real_positions) / seconds : 0.0;
    nb::dict latency;
    std::vector<float> sorted_us = t.recent_us;
    std::sort(sorted_us.begin(), sorted_us.end());
    latency["p50"] = tokenfeed::nearest_rank(sorted_us, 0.50);
    latency["p99"] = tokenfeed::nearest_rank(sorted_us, 0.99);
    latency["max"] = t.max_us;
    latency["mean"] = t.calls > 0 ? t.sum_us / n : 0.0;
    d["get_batch_us"] = latency;
    d["stall_fraction"] = fraction(t.data_waits);
    d["slow_call_fraction"] = fraction(t.slow_calls);
    d["open_ms"] = open_ms_;
    d["prefetch_depth"] = s.stats.prefetch_depth;
    d["prefetch_depth_setting"] =
        s.prefetch_depth_setting == 0 ? std::string("auto") : std::to_string(s.prefetch_depth_setting);
    d["decode_threads"] = s.stats.decode_threads;
    d["rss_anon_mb"] = tokenfeed::measure::rss_anon_mb();
    // CPU since the first measured call, up to now (as bench: every thread per batch, and
    // the loader's background threads' share of one core, all threads but the trainer's).
    tokenfeed::measure::CpuUse cpu;
    double wall_s = 0;
    if (t.calls > 0) {
      cpu.process_s = tokenfeed::measure::process_cpu_seconds() - t.process_cpu0;
      cpu.trainer_s = t.has_trainer_clock ? CallTiming::clock_seconds(t.trainer_clock) - t.trainer_cpu0 : 0;
      wall_s = std::chrono::duration<double>(Clock::now() - t.start).count();
    }
    d["cpu_us_per_batch"] = cpu.us_per_batch(n);
    d["loader_threads_core_fraction"] = cpu.background_core_fraction(wall_s);
    // Beyond bench: the waits behind stall_fraction, the packing, and the split's facts.
    d["waits"] = t.waits;
    d["total_wait_us"] = t.total_wait_us;
    d["max_wait_us"] = t.max_wait_us;
    d["packing_efficiency"] =
        t.positions > 0 ? static_cast<double>(t.real_positions) / static_cast<double>(t.positions) : 0.0;
    d["episodes"] = s.info.episodes;
    d["kept_episodes"] = s.info.kept_episodes;
    d["windows"] = s.info.windows;
    d["tokens"] = s.info.tokens;
    d["batches_per_epoch"] = s.info.batches_per_epoch;
    return d;
  }

  // Starts a new measurement for `split` (every split when None): what stats() reports
  // from then on, as `tokenfeed bench --warmup` does after its warm-up batches.
  void reset_stats(const std::optional<std::string>& split) {
    if (split) split_info(*split);  // raises for an unknown split
    std::lock_guard timing_lock(timing_mutex_);
    for (auto& [name, timing] : timing_) {
      if (!split || name == *split) timing.reset();
    }
  }

  nb::object state_dict() {
    const std::string text = save_state();
    return nb::module_::import_("json").attr("loads")(text);
  }
  void load_state_dict(nb::handle state) {
    std::string text;
    if (PyUnicode_Check(state.ptr())) {
      text = nb::cast<std::string>(state);
    } else if (PyBytes_Check(state.ptr())) {
      text = nb::cast<std::string>(state.attr("decode")("utf-8"));
    } else if (PyDict_Check(state.ptr()) || is_instance(state, "collections.abc", "Mapping")) {
      // Any mapping, nested ones too (json.dumps takes dicts only: default= turns the
      // others into dicts).
      const nb::object as_dict = nb::cpp_function([](nb::handle o) -> nb::object {
        if (is_instance(o, "collections.abc", "Mapping")) return nb::handle(reinterpret_cast<PyObject*>(&PyDict_Type))(o);
        throw Error(ErrorKind::state, "load_state_dict: the state holds a " + nb::cast<std::string>(nb::repr(o.type())) +
                                          ", which a saved state never does");
      });
      text = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(state, "default"_a = as_dict));
    } else {
      throw Error(ErrorKind::state, "load_state_dict: expected the dict state_dict() returned (or its JSON text), got " +
                                        nb::cast<std::string>(nb::repr(state.type())));
    }
    load_state(text);
  }

 private:
  tokenfeed::Loader& loader() {  // REQUIRES: mutex_ held
    if (!loader_) usage_error("the loader is closed");
    return *loader_;
  }

  std::mutex mutex_;  // one caller of the C++ loader at a time (get_batch, states, stats)
  std::mutex ptr_mutex_;  // guards loader_ itself; held only to copy or reset the pointer
  // Written under both mutexes (open, close), so either one is enough to read it.
  std::shared_ptr<tokenfeed::Loader> loader_;
  std::mutex timing_mutex_;  // guards timing_; taken with the GIL held, never held while waiting for it
  std::map<std::string, CallTiming, std::less<>> timing_;
  double open_ms_ = 0;
};

// `for batch in loader.iter("train", steps=N)`: N batches, or without end when steps is None.
// loader.iter(split, steps) (steps batches, or for ever), iter(loader) (train for ever), and
// loader.epoch(split): the batches left in the epoch the next batch belongs to, ending when
// the loader's position leaves that epoch (so get_batch calls made meanwhile count too).
class BatchIterator {
 public:
  BatchIterator(nb::object loader, std::string split, std::optional<std::uint64_t> steps,
                std::optional<std::uint64_t> epoch = std::nullopt)
      : loader_(std::move(loader)), split_(std::move(split)), remaining_(steps), epoch_(epoch) {}

  nb::object next() {
    if (remaining_ && *remaining_ == 0) throw nb::stop_iteration();
    if (epoch_ && len() == 0) throw nb::stop_iteration();
    nb::object batch = nb::cast<PyLoader&>(loader_).get_batch(split_);
    if (remaining_) --*remaining_;
    return batch;
  }
  std::size_t len() const {
    if (epoch_) {
      const tokenfeed::SplitInfo i = nb::cast<PyLoader&>(loader_).split_info(split_);
      return i.next_epoch == *epoch_ ? static_cast<std::size_t>(i.batches_per_epoch - i.next_batch_in_epoch) : 0;
    }
    if (!remaining_) throw nb::type_error("len() of an endless iterator (iter() without steps)");
    return static_cast<std::size_t>(*remaining_);
  }

 private:
  nb::object loader_;
  std::string split_;
  std::optional<std::uint64_t> remaining_;
  std::optional<std::uint64_t> epoch_;
};

BatchIterator epoch_iterator(nb::handle self, const std::string& split) {
  PyLoader& loader = nb::cast<PyLoader&>(self);
  const tokenfeed::SplitInfo i = loader.split_info(split);
  if (i.batches_per_epoch == 0) {
    usage_error("epoch(\"" + split + "\"): batch_sampling_mode=random has no epochs; use iter(\"" + split +
                "\", steps=N)");
  }
  return BatchIterator(nb::borrow(self), split, std::nullopt, i.next_epoch);
}

// ---------------------------------------------------------------------------------------
// Chat formatting

std::vector<std::uint32_t> to_vector(const U32Array& a) {
  const auto s = span_of(a);
  return {s.begin(), s.end()};
}

// (ids, mask): the mask is chat_loss_mask's, 0 over the turns whose `trained` is false.
nb::tuple serialize_tokenized(const std::vector<std::string>& roles, const std::vector<U32Array>& contents,
                              const std::vector<bool>& trained, const tokenfeed::SpecialTokenIds& special,
                              const U32Array& default_system_ids, std::optional<std::uint32_t> vocab_size) {
  if (roles.size() != contents.size() || roles.size() != trained.size()) {
    usage_error("serialize_chat: roles, contents and weights differ in length");
  }
  std::vector<tokenfeed::TokenizedChatMessage> messages(roles.size());
  for (std::size_t i = 0; i < roles.size(); ++i) {
    messages[i].role = roles[i];
    messages[i].ids = to_vector(contents[i]);
    messages[i].trained = trained[i];
  }
  std::vector<std::uint32_t> out;
  const auto defect = tokenfeed::append_tokenized_chat_ids(messages, special, span_of(default_system_ids), vocab_size, out);
  if (defect) conversation_error(defect->detail);
  std::vector<std::uint8_t> mask = tokenfeed::chat_loss_mask(messages, out, special);
  return nb::make_tuple(numpy_owning(std::move(out)), numpy_owning(std::move(mask)));
}

nb::tuple pack_ids_and_mask(const U32Array& ids, const U8Array& mask, std::size_t S,
                            const tokenfeed::SpecialTokenIds& special, std::uint32_t pad_id) {
  tokenfeed::PackedSft packed = tokenfeed::pack_sft_ids_and_mask(span_of(ids), span_of(mask), S, special, pad_id);
  return nb::make_tuple(numpy_owning(std::move(packed.ids)), numpy_owning(std::move(packed.mask)));
}

nb::tuple collate_batch(const std::vector<std::tuple<U32Array, U8Array>>& rows, std::size_t T, std::int64_t ignore_index) {
  std::vector<tokenfeed::PackedSft> packed(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto ids = span_of(std::get<0>(rows[i]));
    const auto mask = span_of(std::get<1>(rows[i]));
    packed[i].ids.assign(ids.begin(), ids.end());
    packed[i].mask.assign(mask.begin(), mask.end());
  }
  tokenfeed::SftBatch b = tokenfeed::collate_sft_batch(packed, T, ignore_index);
  return nb::make_tuple(numpy_owning(std::move(b.x), {b.rows, b.T}), numpy_owning(std::move(b.y), {b.rows, b.T}),
                        numpy_owning(std::move(b.loss_mask), {b.rows, b.T}));
}

std::string special_repr(const tokenfeed::SpecialTokenIds& s) {
  return "SpecialTokenIds(system=" + std::to_string(s.system) + ", user=" + std::to_string(s.user) +
         ", assistant=" + std::to_string(s.assistant) + ", eot=" + std::to_string(s.eot) +
         ", tool=" + (s.tool ? std::to_string(*s.tool) : std::string("None")) + ")";
}

// Python's handler: the lines at `g_log_threshold` and above (set_logging's level).
std::atomic<tokenfeed::LogLevel> g_log_threshold{tokenfeed::LogLevel::info};

void write_log_line_to_stderr(tokenfeed::LogLevel level, std::string_view line) {
  if (level < g_log_threshold.load(std::memory_order_relaxed)) return;
  std::string text(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

void bind_chat(nb::module_& m);  // chat.cpp
namespace tokenfeed_python {

nb::object wrap_batch(tokenfeed::Batch&& batch) {
  return nb::cast(PyBatch(std::make_unique<tokenfeed::Batch>(std::move(batch))), nb::rv_policy::move);
}

tokenfeed::Config config_from_python(nb::handle source, const nb::kwargs& overrides) {
  return make_config(source, overrides);
}

nb::dict config_to_python(const tokenfeed::Config& config) { return config_dict(config); }

}  // namespace tokenfeed_python

NB_MODULE(_tokenfeed, m) {
  m.doc() = "tokenfeed's C++ core; use the `tokenfeed` package, which re-exports it.";
  m.attr("__version__") = tokenfeed::version();
  m.attr("MAX_HELD_BATCHES") = tokenfeed::Loader::kMaxHeldBatches;
  m.attr("IGNORE_INDEX") = tokenfeed::kIgnoreIndex;
  m.attr("DEFAULT_SYSTEM_TEXT") = std::string(tokenfeed::kDefaultSystemText);
  register_errors(m);

  m.def(
      "set_logging",
      [](bool enabled, const std::string& level) {
        const std::pair<const char*, tokenfeed::LogLevel> levels[] = {{"debug", tokenfeed::LogLevel::debug},
                                                                      {"info", tokenfeed::LogLevel::info},
                                                                      {"warning", tokenfeed::LogLevel::warning},
                                                                      {"error", tokenfeed::LogLevel::error}};
        const auto* found =
            std::find_if(std::begin(levels), std::end(levels), [&](const auto& l) { return level == l.first; });
        if (found == std::end(levels))
          usage_error("set_logging: level must be debug, info, warning or error, not '" + level + "'");
        g_log_threshold.store(found->second, std::memory_order_relaxed);
        tokenfeed::set_log_handler(enabled ? tokenfeed::LogHandler(write_log_line_to_stderr) : tokenfeed::LogHandler());
      },
      "enabled"_a = true, "level"_a = "info",
      "Turns tokenfeed's log lines on stderr on or off. level: the least printed: info (the default: one line "
      "per loader at open, warnings), debug (also each split at open and each epoch boundary), warning, error.");

  nb::class_<PyBatch>(m, "Batch", "One ready batch: numpy views of the loader's buffers (see the package docs).")
      .def_prop_ro("x", &PyBatch::x)
      .def_prop_ro("y", &PyBatch::y)
      .def_prop_ro("mask", &PyBatch::mask)
      .def_prop_ro("tokens", &PyBatch::x)
      .def_prop_ro("labels", &PyBatch::labels)
      .def_prop_ro("token_weights", &PyBatch::token_weights)
      .def_prop_ro("position_ids", &PyBatch::position_ids)
      .def_prop_ro("cu_seqlens", &PyBatch::cu_seqlens)
      .def_prop_ro("episode_ids", &PyBatch::episode_ids)
      .def_prop_ro("window_ids", &PyBatch::episode_ids)
      .def_prop_ro("doc_ids", &PyBatch::doc_ids)
      .def_prop_ro("source_ids", &PyBatch::source_ids)
      .def_prop_ro("segments", &PyBatch::segments)
      .def_prop_ro("log_probs", &PyBatch::log_probs)
      .def_prop_ro("rewards", &PyBatch::rewards)
      .def_prop_ro("group_ids", &PyBatch::group_ids)
      .def_prop_ro("split", [](const PyBatch& b) { return std::string(b.batch().split()); })
      .def_prop_ro("step", [](const PyBatch& b) { return b.batch().step(); })
      .def_prop_ro("epoch", [](const PyBatch& b) { return b.batch().epoch(); })
      .def_prop_ro("batch_in_epoch", [](const PyBatch& b) { return b.batch().batch_in_epoch(); })
      .def_prop_ro("rows", [](const PyBatch& b) { return b.batch().rows(); })
      .def_prop_ro("cols", [](const PyBatch& b) { return b.batch().cols(); })
      .def_prop_ro("shape", [](const PyBatch& b) { return std::make_tuple(b.batch().rows(), b.batch().cols()); })
      .def_prop_ro("real_rows", [](const PyBatch& b) { return b.batch().real_rows(); })
      .def_prop_ro("real_positions", [](const PyBatch& b) { return b.batch().real_positions(); })
      .def_prop_ro("num_sequences", [](const PyBatch& b) { return b.batch().num_sequences(); })
      .def_prop_ro("max_seqlen", [](const PyBatch& b) { return b.batch().max_seqlen(); })
      .def_prop_ro("has_mask", [](const PyBatch& b) { return b.batch().has_mask(); })
      .def_prop_ro("wait_us", [](const PyBatch& b) { return b.batch().wait_us(); })
      .def_prop_ro("valid", &PyBatch::valid)
      .def("arrays", &PyBatch::arrays, "Every non-empty array field by name (views, no copy), segments included.")
      .def("release", &PyBatch::release,
           "Drops this batch's hold on its buffers; they return to the pool once no array made from it is alive.")
      .def("__repr__", &PyBatch::repr);

  nb::class_<PyLoader>(m, "Loader",
                       "Loader(config, **overrides): batches of an XML config's dataset (or a mapping of its keys), "
                       "prepared on background threads.\n\n"
                       "get_batch(split) returns a Batch whose arrays view the loader's pooled buffers. A batch stays "
                       "held while it, or any array or tensor made from it without a copy, is alive; holding "
                       "MAX_HELD_BATCHES (4) batches of a split, the next get_batch raises UsageError. Gradient "
                       "accumulation reaches that limit: autograd keeps each micro-batch's input tensors until "
                       "backward(), so over more than 4 micro-batches take batch.to_torch(copy=True).\n\n"
                       "stats(split) reports `tokenfeed bench`'s figures under its names (stall_fraction: steps whose "
                       "batch waited > 50 us for data; slow_call_fraction: calls that took > 50 us); reset_stats() "
                       "after a warm-up, as bench's --warmup.")
      .def(
          "__init__",
          [](PyLoader* self, nb::handle config, const nb::kwargs& overrides) {
            tokenfeed::Config c = make_config(config, overrides);
            nb::gil_scoped_release release;
            new (self) PyLoader(std::move(c));
          },
          "config"_a, "overrides"_a)
      .def("get_batch", &PyLoader::get_batch, "split"_a = "train")
      .def(
          "iter",
          [](nb::handle self, const std::string& split, std::optional<std::uint64_t> steps) {
            return BatchIterator(nb::borrow(self), split, steps);
          },
          "split"_a = "train", "steps"_a = nb::none())
      .def("epoch", &epoch_iterator, "split"_a = "train",
           "The batches left in the current epoch of `split` (all of the next one at an epoch boundary); "
           "len() is their number.")
      .def(
          "__iter__", [](nb::handle self) { return BatchIterator(nb::borrow(self), "train", std::nullopt); },
          "The train split for ever, as iter(\"train\").")
      .def_prop_ro(
          "vocab_size", [](PyLoader& l) { return l.vocabulary().vocab_size; },
          "dataset_metadata.json's vocab_size, or None.")
      .def_prop_ro(
          "pad_token_id", [](PyLoader& l) { return l.effective_config().pad_token_id; },
          "The id padding rows hold: the config's, else the metadata's eot_token_id, else eos_token_id "
          "(None when neither applies, as in token_stream without them).")
      .def_prop_ro(
          "eot_token_id",
          [](PyLoader& l) {
            const tokenfeed::DatasetVocabulary v = l.vocabulary();
            return v.eot_token_id ? v.eot_token_id : v.eos_token_id;
          },
          "The end-of-text id: dataset_metadata.json's eot_token_id, else eos_token_id, else None.")
      .def_prop_ro(
          "special_token_ids", [](PyLoader& l) { return l.vocabulary().special_tokens; },
          "The chat template's ids recorded in dataset_metadata.json (SpecialTokenIds), or None.")
      .def("save_state", &PyLoader::save_state)
      .def("load_state", &PyLoader::load_state, "state"_a)
      .def("state_dict", &PyLoader::state_dict)
      .def("load_state_dict", &PyLoader::load_state_dict, "state"_a)
      .def("stats", &PyLoader::stats, "split"_a = "train")
      .def("reset_stats", &PyLoader::reset_stats, "split"_a = nb::none())
      .def("info", &PyLoader::info, "split"_a = "train")
      .def(
          "num_episodes", [](PyLoader& l, const std::string& split) { return l.split_info(split).kept_episodes; },
          "split"_a = "train")
      .def(
          "num_windows", [](PyLoader& l, const std::string& split) { return l.split_info(split).windows; },
          "split"_a = "train")
      .def(
          "batches_per_epoch",
          [](PyLoader& l, const std::string& split) { return l.split_info(split).batches_per_epoch; },
          "split"_a = "train")
      .def_prop_ro("config", &PyLoader::config)
      .def_prop_ro("fingerprint", &PyLoader::fingerprint)
      .def_prop_ro("source_names", &PyLoader::source_names)
      .def_prop_ro("splits", &PyLoader::splits)
      .def_prop_ro("closed", &PyLoader::closed)
      .def("__repr__", &PyLoader::repr)
      .def("stop", &PyLoader::stop)
      .def("close", &PyLoader::close)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](PyLoader& l, nb::handle, nb::handle, nb::handle) { l.close(); }, "exc_type"_a.none(),
          "exc"_a.none(), "traceback"_a.none());

  nb::class_<BatchIterator>(m, "BatchIterator")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &BatchIterator::next)
      .def("__len__", &BatchIterator::len);

  tokenfeed_python::bind_dataset_writer(m);

  nb::class_<tokenfeed::SpecialTokenIds>(m, "SpecialTokenIds")
      .def(
          "__init__",
          [](tokenfeed::SpecialTokenIds* self, std::uint32_t system, std::uint32_t user, std::uint32_t assistant,
             std::uint32_t eot, std::optional<std::uint32_t> tool) {
            tokenfeed::SpecialTokenIds ids;
            ids.system = system;
            ids.user = user;
            ids.assistant = assistant;
            ids.eot = eot;
            ids.tool = tool;
            tokenfeed::check_special_token_ids(ids, "SpecialTokenIds");
            new (self) tokenfeed::SpecialTokenIds(ids);
          },
          "system"_a, "user"_a, "assistant"_a, "eot"_a, "tool"_a = nb::none())
      .def_ro("system", &tokenfeed::SpecialTokenIds::system)
      .def_ro("user", &tokenfeed::SpecialTokenIds::user)
      .def_ro("assistant", &tokenfeed::SpecialTokenIds::assistant)
      .def_ro("eot", &tokenfeed::SpecialTokenIds::eot)
      .def_ro("tool", &tokenfeed::SpecialTokenIds::tool)
      .def(
          "is_role_token", [](const tokenfeed::SpecialTokenIds& s, std::uint32_t id) { return tokenfeed::is_role_token(s, id); },
          "id"_a)
      .def(
          "is_special_token",
          [](const tokenfeed::SpecialTokenIds& s, std::uint32_t id) { return tokenfeed::is_special_token(s, id); }, "id"_a)
      .def("__repr__", &special_repr);

  nb::class_<tokenfeed::Tokenizer>(m, "Tokenizer", "A built-in tokenizer; make one with make_tokenizer().")
      .def(
          "encode",
          [](const tokenfeed::Tokenizer& t, const std::string& text) {
            std::vector<std::uint32_t> ids;
            {
              nb::gil_scoped_release release;
              t.encode(text, ids);
            }
            return numpy_owning(std::move(ids));
          },
          "text"_a)
      .def("decode", [](const tokenfeed::Tokenizer& t, const U32Array& ids) { return t.decode(span_of(ids)); }, "ids"_a)
      .def_prop_ro("vocab_size", &tokenfeed::Tokenizer::vocab_size)
      .def_prop_ro("special_ids", [](const tokenfeed::Tokenizer& t) { return t.special_ids(); })
      .def_prop_ro("kind", [](const tokenfeed::Tokenizer& t) { return t.describe().kind; });
  m.def(
      "make_tokenizer", [](const std::string& spec) { return tokenfeed::make_tokenizer(spec); }, "spec"_a,
      "A built-in tokenizer: 'bytes' (UTF-8 bytes, special ids 256..260) or 'sentencepiece:MODEL'.");

  m.def("_serialize_tokenized_chat", &serialize_tokenized, "roles"_a, "contents"_a, "trained"_a, "special"_a,
        "default_system_ids"_a, "vocab_size"_a.none());
  m.def(
      "_sft_loss_mask_for_ids",
      [](const U32Array& ids, const tokenfeed::SpecialTokenIds& special) {
        return numpy_owning(tokenfeed::sft_loss_mask_for_ids(span_of(ids), special));
      },
      "ids"_a, "special"_a);
  m.def(
      "_plan_sft_window",
      [](const U32Array& ids, std::size_t S, const tokenfeed::SpecialTokenIds& special) {
        const tokenfeed::SftWindow w = tokenfeed::plan_sft_window(span_of(ids), S, special);
        return std::make_tuple(w.head_begin, w.head_end, w.tail_begin, w.tail_end);
      },
      "ids"_a, "S"_a, "special"_a);
  m.def("_pack_sft_ids_and_mask", &pack_ids_and_mask, "ids"_a, "mask"_a, "S"_a, "special"_a, "pad_id"_a);
  m.def("_collate_sft_batch", &collate_batch, "rows"_a, "T"_a, "ignore_index"_a);
  bind_chat(m);

  tokenfeed_python::bind_rl(m);
}
