// The Python Batch: numpy views of a tokenfeed::Batch's pooled buffers, never copies. One
// capsule owns the C++ batch; the Python Batch and every array made from it hold a
// reference to that capsule, so the buffers stay valid while any of them is alive (even
// after the Loader is gone) and go back to the pool as soon as the last one is released.
// Nothing here forms a reference cycle, so the release happens through reference counting
// at once, never later in the garbage collector (a trainer may hold at most
// Loader::kMaxHeldBatches batches of a split at a time).
//
// The arrays are writable: DLPack consumers (torch.from_dlpack) refuse read-only numpy
// arrays, and a write only changes the caller's own batch (the pipeline refills every
// buffer before it reuses it).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "bindings.hpp"
#include "tokenfeed/batch.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

enum Field : std::size_t {
  kX,
  kY,
  kMask,
  kLabels,
  kTokenWeights,
  kPositionIds,
  kCuSeqlens,
  kCuSeqlensPadded,
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
  nb::object cu_seqlens_padded() { return vector(kCuSeqlensPadded, batch().cu_seqlens_padded()); }
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
      static_assert(std::is_unsigned_v<decltype(PackedSegment::row)> &&
                    std::is_signed_v<decltype(PackedSegment::episode)>);
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
    if (!b.cu_seqlens_padded().empty()) d["cu_seqlens_padded"] = cu_seqlens_padded();
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

}  // namespace

nb::object wrap_batch(std::unique_ptr<tokenfeed::Batch> batch) {
  return nb::cast(PyBatch(std::move(batch)), nb::rv_policy::move);
}

nb::object wrap_batch(tokenfeed::Batch&& batch) {
  return wrap_batch(std::make_unique<tokenfeed::Batch>(std::move(batch)));
}

namespace {

// A property holding a numpy array of `dtype` (a numpy scalar type's name), as the stub
// says.
void array_property(nb::class_<PyBatch>& cls, const char* name, nb::object (PyBatch::*getter)(), const char* dtype,
                    const char* doc = nullptr) {
  const std::string sig = std::string("def ") + name + "(self) -> numpy.typing.NDArray[numpy." + dtype + "]";
  if (doc != nullptr) {
    cls.def_prop_ro(name, getter, nb::for_getter(nb::sig(sig.c_str())), doc);
  } else {
    cls.def_prop_ro(name, getter, nb::for_getter(nb::sig(sig.c_str())));
  }
}

}  // namespace

void bind_batch(nb::module_& m) {
  nb::class_<PyBatch> cls(m, "Batch", "One ready batch: numpy views of the loader's buffers (see the package docs).");
  array_property(cls, "x", &PyBatch::x, "int64");
  array_property(cls, "y", &PyBatch::y, "int64");
  array_property(cls, "mask", &PyBatch::mask, "float32");
  array_property(cls, "tokens", &PyBatch::x, "int64");
  array_property(cls, "labels", &PyBatch::labels, "int64");
  array_property(cls, "token_weights", &PyBatch::token_weights, "float32");
  array_property(cls, "position_ids", &PyBatch::position_ids, "int32");
  array_property(cls, "cu_seqlens", &PyBatch::cu_seqlens, "int32");
  array_property(cls, "cu_seqlens_padded", &PyBatch::cu_seqlens_padded, "int32",
                 "The sequences' offsets with their context-parallel padding (TransformerEngine's THD "
                 "cu_seqlens_padded; cu_seqlens then holds the real lengths); equal to cu_seqlens without it.");
  array_property(cls, "episode_ids", &PyBatch::episode_ids, "int64");
  array_property(cls, "window_ids", &PyBatch::episode_ids, "int64");
  array_property(cls, "doc_ids", &PyBatch::doc_ids, "int32");
  array_property(cls, "source_ids", &PyBatch::source_ids, "int32",
                 "A mixture: each row's source, its index in Loader.source_names; empty otherwise.");
  array_property(cls, "segments", &PyBatch::segments, "void",
                 "sft_packed and RL: the PackedSegment records, no copy: fields row, column, positions (uint32), "
                 "episode (int64; RL: the prompt's episode).");
  array_property(cls, "log_probs", &PyBatch::log_probs, "float32",
                 "RL: the sampler's log-probs aligned to labels (B x T, 0 elsewhere); empty otherwise.");
  array_property(cls, "rewards", &PyBatch::rewards, "float32",
                 "RL: one reward per sequence of cu_seqlens (0 for padding); empty otherwise.");
  array_property(cls, "group_ids", &PyBatch::group_ids, "int64",
                 "RL: one group id (the pull index) per sequence of cu_seqlens (-1 for padding); empty otherwise.");
  cls.def_prop_ro("split", [](const PyBatch& b) { return std::string(b.batch().split()); })
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
      .def("arrays", &PyBatch::arrays, nb::sig("def arrays(self) -> dict[str, numpy.typing.NDArray[typing.Any]]"),
           "Every non-empty array field by name (views, no copy), segments included.")
      .def("release", &PyBatch::release,
           "Drops this batch's hold on its buffers; they return to the pool once no array made from it is alive.")
      // tokenfeed.to_torch, the pure-Python function, as a method: its arguments are passed on
      // as they are.
      .def(
          "to_torch",
          [](nb::handle self, nb::handle fields, nb::handle copy) {
            return nb::module_::import_("tokenfeed").attr("to_torch")(self, fields, copy);
          },
          "fields"_a.none() = nb::none(), "copy"_a.none() = false,
          nb::sig("def to_torch(self, fields: collections.abc.Iterable[str] | None = None, copy: bool = False) -> "
                  "dict[str, typing.Any]"),
          "``tokenfeed.to_torch(self, fields, copy)``: the batch's arrays as torch tensors, over the batch's memory, "
          "or copies with ``copy=True`` (see ``tokenfeed.to_torch``).")
      .def("__repr__", &PyBatch::repr);
}

}  // namespace tokenfeed_python
