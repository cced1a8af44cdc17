// RL batches for Python: the C++ GroupBatcher and RLPrompts (include/tokenfeed/rl.hpp)
// behind tokenfeed.RLLoader (python/tokenfeed/__init__.py), which calls the user's
// sampler and optionally prefetches groups on a Python thread.
//
// _GroupBatcher.next_batch(pull) calls pull(index) with the GIL held, as the Python
// callable it is, and expects a normalized group tuple (prompt int64 array, completions:
// list of int64 arrays, log_probs: None or list of float32 arrays, rewards float64 array,
// group_id, episode); RLLoader builds it. An exception raised by pull propagates unchanged
// (type and message) to the caller of next_batch. _RLPrompts.at releases the GIL while it
// reads the dataset, so a prefetch thread and the trainer do not serialize on it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "bindings.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/rl.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {

namespace {

using I64Array = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F32Array = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F64Array = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename A, typename T>
std::vector<T> to_vector(nb::handle value, const char* what) {
  A a;
  if (!nb::try_cast(value, a)) {
    throw tokenfeed::Error(tokenfeed::ErrorKind::usage,
                           std::string("RL group: ") + what + " is not a contiguous 1-D array of the expected dtype");
  }
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

tokenfeed::ScoredGroup to_group(nb::handle value) {
  nb::tuple t;
  if (!nb::try_cast(value, t) || t.size() != 6) {
    throw tokenfeed::Error(tokenfeed::ErrorKind::usage, "RL group: expected the 6-tuple RLLoader makes");
  }
  tokenfeed::ScoredGroup g;
  g.prompt = to_vector<I64Array, std::int64_t>(t[0], "prompt");
  for (nb::handle c : t[1]) g.completions.push_back(to_vector<I64Array, std::int64_t>(c, "a completion"));
  if (!t[2].is_none()) {
    for (nb::handle lp : t[2]) g.log_probs.push_back(to_vector<F32Array, float>(lp, "log_probs"));
  }
  g.rewards = to_vector<F64Array, double>(t[3], "rewards");
  g.group_id = nb::cast<std::int64_t>(t[4]);
  g.episode = nb::cast<std::int64_t>(t[5]);
  return g;
}

nb::dict metrics_dict(const tokenfeed::RLMetrics& m) {
  nb::dict d;
  d["batches"] = m.batches;
  d["attempts"] = m.attempts;
  d["attempts_per_batch"] = m.attempts_per_batch();
  d["zero_var_groups"] = m.zero_var_groups;
  d["valid_groups"] = m.valid_groups;
  d["sequences"] = m.sequences;
  d["truncated_sequences"] = m.truncated_sequences;
  d["failed_runs"] = m.failed_runs;
  d["mean_reward"] = m.mean_reward();
  d["mean_advantage"] = m.mean_advantage();
  d["mean_abs_advantage"] = m.mean_abs_advantage();
  return d;
}

}  // namespace

void bind_rl(nb::module_& m) {
  nb::class_<tokenfeed::RLPrompts>(m, "_RLPrompts")
      .def(
          "__init__",
          [](tokenfeed::RLPrompts* self, nb::handle config, std::size_t max_tokens, const nb::kwargs& overrides) {
            tokenfeed::Config c = config_from_python(config, overrides);
            nb::gil_scoped_release release;
            new (self) tokenfeed::RLPrompts(std::move(c), max_tokens);
          },
          "config"_a, "max_tokens"_a, "overrides"_a)
      .def(
          "at",
          [](const tokenfeed::RLPrompts& p, std::uint64_t index) {
            tokenfeed::Prompt prompt;
            {
              nb::gil_scoped_release release;
              prompt = p.at(index);
            }
            return nb::make_tuple(prompt.epoch, prompt.episode, numpy_owning(std::move(prompt.tokens)));
          },
          "index"_a)
      .def_prop_ro("size", &tokenfeed::RLPrompts::size)
      .def_prop_ro("per_epoch", &tokenfeed::RLPrompts::per_epoch)
      .def_prop_ro("pad_token_id", &tokenfeed::RLPrompts::pad_token_id)
      .def_prop_ro("vocab_size", &tokenfeed::RLPrompts::vocab_size)
      .def_prop_ro("ignore_index", [](const tokenfeed::RLPrompts& p) { return p.config().ignore_index; })
      .def_prop_ro("fingerprint", &tokenfeed::RLPrompts::fingerprint)
      .def_prop_ro("config", [](const tokenfeed::RLPrompts& p) { return config_to_python(p.config()); });

  nb::class_<tokenfeed::GroupBatcher>(m, "_GroupBatcher")
      .def(
          "__init__",
          [](tokenfeed::GroupBatcher* self, std::size_t batch_size, std::size_t block_size, std::size_t group_size,
             double eps, const std::string& advantage, std::uint64_t max_attempts, std::int64_t pad_token_id,
             std::int64_t ignore_index, std::uint64_t vocab_size, bool skip_failed_prompts,
             const tokenfeed::RLPrompts* prompts) {
            tokenfeed::GroupBatcherOptions o;
            if (prompts != nullptr) {  // the prompts' config's shape_schedule, over its data-parallel ranks
              o.shape_schedule = prompts->config().shape_schedule;
              const tokenfeed::Config& c = prompts->config();  // settled: its data-parallel size is derived
              o.data_parallel_size = static_cast<std::size_t>(c.data_parallel_size.value_or(c.world_size));
            }
            o.batch_size = batch_size;
            o.block_size = block_size;
            o.group_size = group_size;
            o.eps = eps;
            o.advantage = tokenfeed::parse_advantage(advantage);
            o.max_attempts = max_attempts;
            o.pad_token_id = pad_token_id;
            o.ignore_index = ignore_index;
            o.vocab_size = vocab_size;
            o.skip_failed_prompts = skip_failed_prompts;
            new (self) tokenfeed::GroupBatcher(o);
          },
          "batch_size"_a, "block_size"_a, "group_size"_a, "eps"_a, "advantage"_a, "max_attempts"_a, "pad_token_id"_a,
          "ignore_index"_a, "vocab_size"_a, "skip_failed_prompts"_a, "prompts"_a.none())
      .def(
          "next_batch",
          [](tokenfeed::GroupBatcher& b, nb::callable pull) {
            tokenfeed::Batch batch = b.next_batch([&](std::uint64_t index) { return to_group(pull(index)); });
            return wrap_batch(std::move(batch));
          },
          "pull"_a,
          nb::sig("def next_batch(self, pull: collections.abc.Callable[[int], tuple[typing.Any, ...]]) -> Batch"))
      .def("batch_metrics", [](const tokenfeed::GroupBatcher& b) { return metrics_dict(b.batch_metrics()); })
      .def("total_metrics", [](const tokenfeed::GroupBatcher& b) { return metrics_dict(b.total_metrics()); })
      .def_prop_ro("cursor", &tokenfeed::GroupBatcher::cursor)
      .def("save_state", &tokenfeed::GroupBatcher::save_state)
      .def(
          "load_state", [](tokenfeed::GroupBatcher& b, const std::string& s) { b.load_state(s); }, "state"_a);
}

}  // namespace tokenfeed_python
