// The Python Loader: tokenfeed::Loader behind a mutex, with the GIL released while it
// works, and the iterators over its batches.
//
// Opening a dataset (Loader construction), get_batch, load_state and close run with the
// GIL released; one mutex per Loader keeps the C++ loader's one-trainer-thread rule when
// several Python threads share a loader. stop() takes only a shared reference to the C++
// loader (never that mutex, which a blocked get_batch holds), so it can wake that
// get_batch while close() in another thread waits to free the loader.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "mixture.hpp"
#include "stats.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "util/thread_annotations.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

using Clock = std::chrono::steady_clock;
using tokenfeed::Error;
using tokenfeed::ErrorKind;

class PyLoader {
 public:
  explicit PyLoader(tokenfeed::Config config) {  // called with the GIL released
    const auto start = Clock::now();
    auto loader = std::make_shared<tokenfeed::Loader>(std::move(config));
    open_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    tokenfeed::MutexLock ptr_lock(ptr_mutex_);
    loader_ = std::move(loader);
  }

  // Runs f with the GIL released and the loader's mutex held.
  template <typename F>
  auto locked(F&& f) {
    nb::gil_scoped_release release;
    tokenfeed::MutexLock lock(mutex_);
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
      tokenfeed::MutexLock timing_lock(timing_mutex_);
      timing_[split].record(start, end, *batch);
    }
    return wrap_batch(std::move(batch));
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
      tokenfeed::MutexLock ptr_lock(ptr_mutex_);
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
    tokenfeed::MutexLock lock(mutex_);  // after the get_batch that stop() woke has returned
    std::shared_ptr<tokenfeed::Loader> loader;
    {
      tokenfeed::MutexLock ptr_lock(ptr_mutex_);
      loader = std::move(loader_);
    }
    loader.reset();
  }
  bool closed() {
    tokenfeed::MutexLock ptr_lock(ptr_mutex_);
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
    return config_to_python(c);
  }
  std::string fingerprint() {
    return locked([](tokenfeed::Loader& l) { return l.fingerprint(); });
  }
  std::vector<std::vector<std::int64_t>> data_parallel_groups() {
    return locked([](tokenfeed::Loader& l) { return l.data_parallel_groups(); });
  }
  // Loader::parallel_layout() as a dict of its fields (-1: a rank the layout does not tell).
  nb::dict parallel_layout() {
    const tokenfeed::ParallelLayout p = locked([](tokenfeed::Loader& l) { return l.parallel_layout(); });
    nb::dict d;
    d["rank"] = p.rank;
    d["world_size"] = p.world_size;
    d["data_parallel_rank"] = p.data_parallel_rank;
    d["data_parallel_size"] = p.data_parallel_size;
    d["tensor_parallel_rank"] = p.tensor_parallel_rank;
    d["tensor_parallel_size"] = p.tensor_parallel_size;
    d["context_parallel_rank"] = p.context_parallel_rank;
    d["context_parallel_size"] = p.context_parallel_size;
    d["pipeline_parallel_rank"] = p.pipeline_parallel_rank;
    d["pipeline_parallel_size"] = p.pipeline_parallel_size;
    d["order"] = p.order;
    d["leader_rank"] = p.leader_rank;
    d["data_leader"] = p.data_leader;
    d["source"] = p.source;
    return d;
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
  tokenfeed::TokenIds token_ids() {
    return locked([](tokenfeed::Loader& l) { return l.token_ids(); });
  }
  tokenfeed::Config effective_config() {
    return locked([](tokenfeed::Loader& l) { return l.config(); });
  }

  tokenfeed::SplitInfo split_info(const std::string& split) {
    return locked([&](tokenfeed::Loader& l) { return l.split_info(split); });
  }

  std::tuple<std::size_t, std::size_t> batch_shape(std::uint64_t step, const std::string& split) {
    const tokenfeed::StepShape s = locked([&](tokenfeed::Loader& l) { return l.batch_shape(split, step); });
    return {s.rows, s.cols};
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

  // Loader.stats(split): see stats.hpp.
  nb::dict stats(const std::string& split) {
    const SplitSnapshot s = locked([&](tokenfeed::Loader& l) { return snapshot_split(l, split); });
    CallTiming t;
    {
      tokenfeed::MutexLock timing_lock(timing_mutex_);
      const auto it = timing_.find(split);
      if (it != timing_.end()) t = it->second;
    }
    return stats_dict(split, s, t, open_ms_);
  }

  // Starts a new measurement for `split` (every split when None): what stats() reports
  // from then on, as `tokenfeed bench --warmup` does after its warm-up batches.
  void reset_stats(const std::optional<std::string>& split) {
    if (split) split_info(*split);  // raises for an unknown split
    tokenfeed::MutexLock timing_lock(timing_mutex_);
    for (auto& [name, timing] : timing_) {
      if (!split || name == *split) timing.reset();
    }
  }

  // Loader.set_mixture_weights: the weights converted with the GIL held, then set.
  void set_mixture_weights(nb::handle weights, std::uint64_t at_step) {
    const std::map<std::string, std::string> texts = tokenfeed::python::mixture_weight_texts(weights);
    locked([&](tokenfeed::Loader& l) { l.set_mixture_weights(texts, at_step); });
  }
  std::uint64_t earliest_weight_step() {
    return locked([](tokenfeed::Loader& l) { return l.earliest_weight_step(); });
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
        if (is_instance(o, "collections.abc", "Mapping"))
          return nb::handle(reinterpret_cast<PyObject*>(&PyDict_Type))(o);
        throw Error(ErrorKind::state, "load_state_dict: the state holds a " +
                                          nb::cast<std::string>(nb::repr(o.type())) +
                                          ", which a saved state never does");
      });
      text = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(state, "default"_a = as_dict));
    } else {
      throw Error(ErrorKind::state,
                  "load_state_dict: expected the dict state_dict() returned (or its JSON text), got " +
                      nb::cast<std::string>(nb::repr(state.type())));
    }
    load_state(text);
  }

 private:
  tokenfeed::Loader& loader() TF_REQUIRES(mutex_) {
    if (!loader_) usage_error("the loader is closed");
    return *loader_;
  }

  tokenfeed::Mutex mutex_;      // one caller of the C++ loader at a time (get_batch, states, stats)
  tokenfeed::Mutex ptr_mutex_;  // guards loader_ itself; held only to copy or reset the pointer
  // Written under both mutexes (open, close), so either one is enough to read it: a rule
  // TF_GUARDED_BY cannot state (it names one mutex), so the analysis does not check it.
  std::shared_ptr<tokenfeed::Loader> loader_;
  tokenfeed::Mutex timing_mutex_;  // taken with the GIL held, never held while waiting for it
  std::map<std::string, CallTiming, std::less<>> timing_ TF_GUARDED_BY(timing_mutex_);
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

// The dataset's vocabulary and the ids the loader settled.
void bind_vocabulary(nb::class_<PyLoader>& cls) {
  cls.def_prop_ro(
         "vocab_size", [](PyLoader& l) { return l.vocabulary().vocab_size; },
         "dataset_metadata.json's vocab_size, or None.")
      .def_prop_ro(
          "pad_token_id", [](PyLoader& l) { return l.effective_config().pad_token_id; },
          "The id padding rows hold: the config's, else dataset_metadata.json's pad_token_id, else its "
          "eot_token_id, else its eos_token_id (None when none applies, as in token_stream without them).")
      .def_prop_ro(
          "eot_token_id", [](PyLoader& l) { return l.token_ids().end_of_text; },
          "The end-of-text id the loader separates documents with (token_ids['end_of_text']): the config's "
          "eos_token_id, else dataset_metadata.json's eos_token_id, else its eot_token_id, else None.")
      .def_prop_ro(
          "token_ids",
          [](PyLoader& l) {
            const tokenfeed::TokenIds ids = l.token_ids();
            nb::dict d;
            d["pad"] = ids.pad;
            d["end_of_text"] = ids.end_of_text;
            d["eot"] = ids.eot;
            d["eos"] = ids.eos;
            return d;
          },
          "The ids the loader settled, each by its one rule: pad (what padding holds), end_of_text (what ends a "
          "document), eot and eos (dataset_metadata.json's, eos the config's first); None for none.")
      .def_prop_ro(
          "special_token_ids", [](PyLoader& l) { return l.vocabulary().special_tokens; },
          "The chat template's ids recorded in dataset_metadata.json (SpecialTokenIds), or None.");
}

// Resume states, mixture weight changes and the bench figures.
void bind_state_and_stats(nb::class_<PyLoader>& cls) {
  cls.def("save_state", &PyLoader::save_state)
      .def("load_state", &PyLoader::load_state, "state"_a)
      .def("state_dict", &PyLoader::state_dict, nb::sig("def state_dict(self) -> dict[str, typing.Any]"))
      .def("load_state_dict", &PyLoader::load_state_dict, "state"_a,
           nb::sig("def load_state_dict(self, state: collections.abc.Mapping[str, typing.Any] | str | bytes) -> None"))
      .def("set_mixture_weights", &PyLoader::set_mixture_weights, "weights"_a, "at_step"_a,
           nb::sig("def set_mixture_weights(self, weights: collections.abc.Mapping[str, int | float | str], "
                   "at_step: int) -> None"),
           "A mixture: from train step at_step on, the named sources take these weights (int, float by its repr, "
           "or str, as in the config), the others keep theirs, as if the config had a stage starting there. "
           "at_step must be >= earliest_weight_step(). Recorded in state_dict(), the fingerprint and the audit log.")
      .def("earliest_weight_step", &PyLoader::earliest_weight_step,
           "The earliest step set_mixture_weights accepts: the train step plus the largest prefetch depth.")
      .def("stats", &PyLoader::stats, "split"_a = "train",
           nb::sig("def stats(self, split: str = 'train') -> dict[str, typing.Any]"),
           "`tokenfeed bench --json`'s figures under its names (stall_fraction: steps whose batch waited > 50 us for "
           "data; slow_call_fraction: calls that took > 50 us), since the first call or the last reset_stats().")
      .def("reset_stats", &PyLoader::reset_stats, "split"_a = nb::none(),
           "Starts a new measurement for stats() (every split when None), as bench's --warmup.");
}

// What the splits hold, the effective config and the parallel layout.
void bind_facts(nb::class_<PyLoader>& cls) {
  cls.def("info", &PyLoader::info, "split"_a = "train",
          nb::sig("def info(self, split: str = 'train') -> dict[str, typing.Any]"))
      .def(
          "num_episodes", [](PyLoader& l, const std::string& split) { return l.split_info(split).kept_episodes; },
          "split"_a = "train")
      .def(
          "num_windows", [](PyLoader& l, const std::string& split) { return l.split_info(split).windows; },
          "split"_a = "train")
      .def("batch_shape", &PyLoader::batch_shape, "step"_a, "split"_a = "train",
           "(rows, cols) of batch `step` of `split` on this rank: batch_size x block_size, or the train split's "
           "shape_schedule at that step.")
      .def(
          "batches_per_epoch",
          [](PyLoader& l, const std::string& split) { return l.split_info(split).batches_per_epoch; },
          "split"_a = "train")
      .def_prop_ro("config", &PyLoader::config, nb::for_getter(nb::sig("def config(self) -> dict[str, str]")))
      .def_prop_ro("fingerprint", &PyLoader::fingerprint)
      .def("data_parallel_groups", &PyLoader::data_parallel_groups,
           "The global ranks of each data-parallel group (indexed by data-parallel rank, each increasing: its first "
           "is the leader), as the layout derives them; [] when data_parallel_rank/size were given otherwise.")
      .def_prop_ro("parallel_layout", &PyLoader::parallel_layout,
                   nb::for_getter(nb::sig("def parallel_layout(self) -> dict[str, typing.Any]")),
                   nb::for_getter("This process in the parallel layout: rank, world_size, the data, tensor, context "
                                  "and pipeline parallel ranks and sizes (-1: a rank the layout does not tell), "
                                  "order, leader_rank and data_leader (its group's lowest rank decodes under "
                                  "data_loading=group_leader), source."))
      .def_prop_ro("source_names", &PyLoader::source_names,
                   "A mixture's sources in declaration order (what Batch.source_ids indexes); [] otherwise.");
}

// Closing, stopping and the context manager.
void bind_lifetime(nb::class_<PyLoader>& cls) {
  cls.def_prop_ro("splits", &PyLoader::splits)
      .def_prop_ro("closed", &PyLoader::closed)
      .def("__repr__", &PyLoader::repr)
      .def("stop", &PyLoader::stop)
      .def("close", &PyLoader::close)
      .def(
          "__enter__", [](nb::handle self) { return nb::borrow(self); }, nb::sig("def __enter__(self) -> Loader"))
      .def(
          "__exit__", [](PyLoader& l, nb::handle, nb::handle, nb::handle) { l.close(); }, "exc_type"_a.none(),
          "exc"_a.none(), "traceback"_a.none(),
          nb::sig("def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, "
                  "traceback: types.TracebackType | None) -> None"));
}

}  // namespace

void bind_loader(nb::module_& m) {
  nb::class_<PyLoader> cls(
      m, "Loader",
      "Loader(config, **overrides): batches of an XML config's dataset (or a mapping of its keys), "
      "prepared on background threads.\n\n"
      "get_batch(split) returns a Batch whose arrays view the loader's pooled buffers. A batch stays "
      "held while it, or any array or tensor made from it without a copy, is alive; holding "
      "MAX_HELD_BATCHES (4) batches of a split, the next get_batch raises UsageError. Gradient "
      "accumulation reaches that limit: autograd keeps each micro-batch's input tensors until "
      "backward(), so over more than 4 micro-batches take batch.to_torch(copy=True).\n\n"
      "stats(split) reports `tokenfeed bench`'s figures under its names (stall_fraction: steps whose "
      "batch waited > 50 us for data; slow_call_fraction: calls that took > 50 us); reset_stats() "
      "after a warm-up, as bench's --warmup.");
  cls.def(
         "__init__",
         [](PyLoader* self, nb::handle config, const nb::kwargs& overrides) {
           tokenfeed::Config c = config_from_python(config, overrides);
           nb::gil_scoped_release release;
           new (self) PyLoader(std::move(c));
         },
         "config"_a, "overrides"_a,
         nb::sig(
             ("def __init__(self, config: " + config_source_type() + ", **overrides: " + kConfigValueType + ") -> None")
                 .c_str()))
      .def("get_batch", &PyLoader::get_batch, "split"_a = "train",
           nb::sig("def get_batch(self, split: str = 'train') -> Batch"))
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
          "The train split for ever, as iter(\"train\").");
  bind_vocabulary(cls);
  bind_state_and_stats(cls);
  bind_facts(cls);
  bind_lifetime(cls);

  nb::class_<BatchIterator>(m, "BatchIterator")
      .def(
          "__iter__", [](nb::handle self) { return nb::borrow(self); }, nb::sig("def __iter__(self) -> BatchIterator"))
      .def("__next__", &BatchIterator::next, nb::sig("def __next__(self) -> Batch"))
      .def("__len__", &BatchIterator::len);
}

}  // namespace tokenfeed_python
