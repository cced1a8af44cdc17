// tokenfeed.inspect(): the library's dataset inspection (src/inspect/, what `tokenfeed
// inspect` prints) as a dict of the same figures, for a dataset directory or a config that
// names one; with steps=N, a mixture's report over its first N steps (`tokenfeed inspect
// --config FILE --steps N`).
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "inspect/inspect_dataset.hpp"
#include "inspect/mixture_report.hpp"
#include "inspect/shape_schedule_report.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

using namespace tokenfeed;

// A dict of `entries`, in their order.
nb::dict dict_of(std::initializer_list<std::pair<const char*, nb::object>> entries) {
  nb::dict d;
  for (const auto& [key, value] : entries) d[key] = value;
  return d;
}

// None for an absent value, else the value converted.
template <typename T, typename F>
nb::object optional_of(const std::optional<T>& value, F&& convert) {
  return value ? nb::object(convert(*value)) : nb::none();
}
template <typename T>
nb::object optional_of(const std::optional<T>& value) {
  return optional_of(value, [](const T& v) { return nb::cast(v); });
}

nb::object refusal_dict(const std::optional<Refusal>& refusal) {
  return optional_of(refusal, [](const Refusal& r) {
    return dict_of({{"kind", nb::cast(to_string(r.kind))}, {"message", nb::cast(r.message)}});
  });
}

nb::dict lengths_dict(const LengthPercentiles& l) {
  return dict_of({{"min", nb::cast(l.min)},
                  {"median", nb::cast(l.median)},
                  {"p90", nb::cast(l.p90)},
                  {"p99", nb::cast(l.p99)},
                  {"max", nb::cast(l.max)}});
}

// Where a located value lies: the file, the offset in it and (episodes) the episode and
// the position in it.
template <typename First>
nb::dict first_dict(const First& first) {
  return dict_of({{"file", nb::cast(first.file)},
                  {"offset", nb::cast(first.offset)},
                  {"episode", nb::cast(optional_of(first.episode))},
                  {"position", nb::cast(optional_of(first.position))}});
}

nb::dict packing_dict(const PackingFigures& p) {
  nb::dict d = dict_of({{"packed_rows", nb::cast(p.packed_rows)},
                        {"packed_positions", nb::cast(p.packed_positions)},
                        {"packed_cells", nb::cast(p.packed_cells)},
                        {"episode_rows", nb::cast(p.episode_rows)},
                        {"episode_positions", nb::cast(p.episode_positions)},
                        {"episode_cells", nb::cast(p.episode_cells)},
                        {"episode_min_tokens", nb::cast(p.episode_min_tokens)}});
  d["split"] = optional_of(p.split, [](const PackingFigures::Cut& c) {
    return dict_of({{"documents", nb::cast(c.documents)}, {"cut", nb::cast(c.cut)}, {"pieces", nb::cast(c.pieces)}});
  });
  return d;
}

nb::dict block_dict(std::int64_t block_size, const EpisodeBlockFigures& b) {
  nb::dict truncation;
  for (const TruncationCost& cost : b.truncation) {
    truncation[to_string(cost.rule)] =
        dict_of({{"dropped_tokens", nb::cast(cost.dropped_tokens)},
                 {"lost_trained_tokens", nb::cast(optional_of(cost.lost_trained_tokens))}});
  }
  return dict_of({{"block_size", nb::cast(block_size)},
                  {"longer", nb::cast(b.longer)},
                  {"truncation", nb::cast(truncation)},
                  {"packing", nb::cast(optional_of(b.packing, packing_dict))}});
}

void add_episode_figures(const DatasetReport& report, const EpisodeFigures& f, nb::dict& d) {
  d["layout"] = f.flat ? "flat" : "sharded";
  d["shards"] = f.shards;
  d["episodes"] = f.episodes;
  d["kept_episodes"] = f.kept;
  d["min_tokens"] = f.min_tokens;
  d["tokens"] = f.tokens;
  d["token_dtype"] = to_string(f.dtype);
  d["token_dtype_source"] = to_string(f.dtype_source);
  d["mask"] = optional_of(f.mask, [](MaskDtype m) { return nb::str(to_string(m)); });
  d["lengths"] = optional_of(f.lengths, lengths_dict);
  d["block"] = optional_of(f.block, [&](const EpisodeBlockFigures& b) { return block_dict(report.block_size, b); });
}

void add_stream_figures(const StreamFigures& f, nb::dict& d) {
  d["layout"] = f.flat ? "flat" : "sharded";
  nb::list files;
  for (const StreamFileFigures& file : f.files) {
    files.append(dict_of({{"name", nb::cast(file.name)},
                          {"tokens", nb::cast(file.tokens)},
                          {"token_dtype", nb::cast(to_string(file.dtype))},
                          {"token_dtype_source", nb::cast(to_string(file.dtype_source))},
                          {"documents", nb::cast(optional_of(file.documents))},
                          {"tokenizer", file.tokenizer.empty() ? nb::none() : nb::cast(file.tokenizer)}}));
  }
  d["files"] = files;
  d["tokens"] = f.tokens;
  d["windows"] = optional_of(f.windows, [](const StreamFigures::Windows& w) {
    return dict_of({{"epoch", nb::cast(w.epoch)}, {"random_starts", nb::cast(w.random_starts)}});
  });
  d["documents"] = optional_of(f.documents, [](const StreamFigures::Documents& doc) {
    return dict_of({{"eos_token_id", nb::cast(doc.eos)},
                    {"count", nb::cast(doc.count)},
                    {"trailing_tokens", nb::cast(doc.trailing)},
                    {"lengths", nb::cast(optional_of(doc.lengths, lengths_dict))}});
  });
  d["val_fraction"] = optional_of(f.by_hash, [](const StreamFigures::ByHash& h) {
    return dict_of({{"fraction", nb::cast(h.fraction)},
                    {"seed", nb::cast(h.seed)},
                    {"documents", nb::cast(h.documents)},
                    {"runs", nb::cast(h.runs)}});
  });
}

// deep: what the checks the loader does not make found (None for a check that did not run).
nb::dict deep_dict(const SplitReport& s) {
  nb::dict d;
  d["vocab"] = optional_of(s.vocab, [](const VocabCheck& v) {
    return dict_of({{"vocab_size", nb::cast(v.vocab_size)},
                    {"out_of_vocab", nb::cast(v.out_of_vocab)},
                    {"first", nb::cast(optional_of(v.first, [](const VocabCheck::First& f) {
                       nb::dict located = first_dict(f);
                       located["token"] = f.token;
                       return located;
                     }))}});
  });
  d["content_sha256"] = s.content_sha256.empty() ? nb::none() : nb::cast(s.content_sha256);
  d["checksums"] = optional_of(s.checksums, [](const ChecksumCheck& c) {
    return dict_of(
        {{"recorded", nb::cast(c.recorded)}, {"shards", nb::cast(c.shards)}, {"problems", nb::cast(c.problems)}});
  });
  const EpisodeFigures* episodes = s.episodes ? &*s.episodes : nullptr;
  d["mask_values"] = episodes == nullptr ? nb::none() : optional_of(episodes->mask_values, [](const MaskValueCheck& m) {
    return dict_of({{"out_of_range", nb::cast(m.count)},
                    {"first", nb::cast(optional_of(m.first, [](const MaskValueCheck::First& f) {
                       nb::dict located = first_dict(f);
                       located["value"] = f.value;
                       return located;
                     }))}});
  });
  d["all_zero_masks"] = episodes == nullptr ? nb::none() : optional_of(episodes->all_zero, [](const AllZeroMasks& z) {
    return dict_of(
        {{"count", nb::cast(z.count)}, {"kept_episodes", nb::cast(z.kept)}, {"first_ids", nb::cast(z.first_ids)}});
  });
  return d;
}

nb::dict split_dict(const DatasetReport& report, const SplitReport& s) {
  nb::dict d =
      dict_of({{"verdict", nb::cast(s.verdict)}, {"valid", nb::cast(s.valid())}, {"error", refusal_dict(s.refusal)}});
  if (s.episodes) add_episode_figures(report, *s.episodes, d);
  if (s.stream) add_stream_figures(*s.stream, d);
  if (!s.layout_free_fingerprint.empty()) d["layout_free_fingerprint"] = s.layout_free_fingerprint;
  const bool checked = s.vocab || s.checksums || (s.episodes && (s.episodes->mask_values || s.episodes->all_zero));
  d["deep"] = report.deep && (checked || s.stream) ? nb::object(deep_dict(s)) : nb::none();
  return d;
}

nb::dict report_dict(const DatasetReport& report) {
  nb::dict splits;
  for (const SplitReport& s : report.splits) splits[s.name.c_str()] = split_dict(report, s);
  nb::dict config;
  for (const SuggestedKey& k : report.suggested_config) config[k.key.c_str()] = k.value;
  return dict_of({{"dataset_dir", nb::cast(report.dataset_dir)},
                  {"metadata", nb::cast(report.metadata_present)},
                  {"layout", nb::cast(report.layout == DatasetLayout::episodes ? "episodes" : "token_stream")},
                  {"valid", nb::cast(!report.failure)},
                  {"error", nb::cast(refusal_dict(report.failure))},
                  {"splits", nb::cast(splits)},
                  {"val_ignored", nb::cast(optional_of(report.val_ignored))},
                  {"missing_train", nb::cast(optional_of(report.missing_train))},
                  {"config", nb::cast(config)}});
}

// What to inspect: a dataset directory as it is, or the dataset a config names with the
// run its keys describe (block_size, token_dtype, eos_token_id; sft_packed's truncation,
// pack_lookahead, epoch_seed and context_parallel_size).
InspectRequest request_from_python(nb::handle source, bool deep) {
  InspectRequest r;
  r.deep = deep;
  if (PyUnicode_Check(source.ptr()) || nb::hasattr(source, "__fspath__")) {
    const std::string path = nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(source));
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      r.dataset_dir = path;
      return r;
    }
  }
  const Config config = config_from_python(source, nb::kwargs());
  if (!config.mixture.empty()) {
    usage_error(
        "inspect(config): the config has a mixture; give steps=N for its report over the first N steps, or "
        "inspect each source's dataset_dir");
  }
  if (config.dataset_dir.empty()) usage_error("inspect(config): the config has no dataset_dir");
  r.dataset_dir = config.dataset_dir.string();
  r.block_size = config.block_size;
  r.token_dtype = config.token_dtype;
  r.eos_id = config.eos_token_id;
  r.val_fraction = config.val_fraction;
  r.val_seed = config.val_seed;
  r.packed = config.dataset_mode == DatasetMode::sft_packed;
  if (r.packed) {
    r.truncation = config.truncation;
    r.pack_lookahead = config.pack_lookahead;
    r.seed = config.epoch_seed;
    r.context_parallel_size = config.context_parallel_size;
  }
  return r;
}

// A source's figures in one stage, as the command's stage table prints them.
nb::dict share_dict(const MixtureSourceShare& c) {
  return dict_of({{"rows", nb::cast(c.rows)},
                  {"row_share", nb::cast(c.row_share)},
                  {"real_tokens", nb::cast(c.real_tokens)},
                  {"real_share", nb::cast(c.real_share)},
                  {"trained_tokens", nb::cast(c.trained_tokens)},
                  {"trained_share", nb::cast(c.trained_share)}});
}

// The weights from dataset sizes, by source, as the command's table names its columns.
nb::dict sizes_dict(const MixtureWeightsFromSizes& figures) {
  nb::dict sources;
  for (const MixtureSizedSource& source : figures.sources) {
    const SizedWeight& w = source.sized;
    sources[w.name.c_str()] = dict_of({{"tokens", nb::cast(w.tokens)},
                                       {"rows_per_epoch", nb::cast(w.rows_per_epoch)},
                                       {"weight", nb::cast(w.weight.text)},
                                       {"capped", nb::cast(w.weight.capped)},
                                       {"epochs_planned", optional_of(w.weight.planned_epochs)},
                                       {"epochs_steps", optional_of(source.epochs_in_steps)}});
  }
  return dict_of({{"temperature", nb::cast(figures.temperature)},
                  {"planned_steps", optional_of(figures.planned_steps)},
                  {"sources", nb::cast(sources)}});
}

nb::dict mixture_dict(const MixtureReport& report) {
  nb::list stages;
  for (const MixtureStageFigures& stage : report.stages) {
    nb::dict sources;
    for (std::size_t i = 0; i < stage.sources.size(); ++i) {
      sources[report.sources[i].c_str()] = share_dict(stage.sources[i]);
    }
    stages.append(dict_of({{"first_step", nb::cast(stage.first_step)},
                           {"last_step", optional_of(stage.last_step)},
                           {"sources", nb::cast(sources)}}));
  }
  nb::dict epochs;
  for (std::size_t i = 0; i < report.sources.size(); ++i)
    epochs[report.sources[i].c_str()] = optional_of(report.epochs[i]);
  return dict_of({{"sources", nb::cast(report.sources)},
                  {"steps", nb::cast(report.steps)},
                  {"rank", nb::cast(report.rank)},
                  {"batch_size", nb::cast(report.batch_size)},
                  {"block_size", nb::cast(report.block_size)},
                  {"weights_from_sizes", optional_of(report.weights_from_sizes, sizes_dict)},
                  {"stages", nb::cast(stages)},
                  {"epochs", nb::cast(epochs)}});
}

nb::dict shape_schedule_dict(const ShapeScheduleReport& report) {
  nb::list stages;
  for (const ShapeStageFigures& s : report.stages) {
    nb::object reached = nb::none();
    if (s.reached) {
      reached = nb::cast(dict_of({{"epoch", optional_of(s.reached->epoch)},
                                  {"batch_in_epoch", nb::cast(s.reached->batch_in_epoch)},
                                  {"unit", optional_of(s.reached->unit)},
                                  {"offset", optional_of(s.reached->offset)}}));
    }
    stages.append(dict_of({{"first_step", nb::cast(s.first_step)},
                           {"end_step", optional_of(s.end_step)},
                           {"global_batch_size", nb::cast(s.global_batch)},
                           {"rows", nb::cast(s.rows)},
                           {"block_size", nb::cast(s.block_size)},
                           {"rows_before", nb::cast(s.rows_before)},
                           {"tokens_before", nb::cast(s.tokens_before)},
                           {"reached", reached}}));
  }
  return dict_of({{"steps", nb::cast(report.steps)},
                  {"rank", nb::cast(report.rank)},
                  {"data_parallel_size", nb::cast(report.data_parallel_size)},
                  {"stages", nb::cast(stages)}});
}

// inspect(config, steps=N): a mixture's report and a shape_schedule's, from a config (a path
// or a mapping) with either; the count and the config checked before any batch is read.
nb::dict mixture_from_python(nb::handle source, bool deep, std::int64_t steps) {
  check_inspect_steps(steps, "inspect: steps");
  if (deep) {
    usage_error(
        "inspect(config, steps=N): deep checks a dataset's files, the mixture's report reads batches; inspect "
        "each source's dataset_dir with deep=True");
  }
  if (PyUnicode_Check(source.ptr()) || nb::hasattr(source, "__fspath__")) {
    const std::string path = nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(source));
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      usage_error("inspect(path, steps=N): '" + path +
                  "' is a dataset directory; steps is for a config with a mixture or a shape_schedule");
    }
  }
  const Config config = config_from_python(source, nb::kwargs());
  if (config.mixture.empty() && config.shape_schedule.empty()) {
    usage_error(
        "inspect(config, steps=N): the config has no mixture and no shape_schedule; inspect a single dataset "
        "without steps");
  }
  std::optional<MixtureReport> mixture;
  std::optional<ShapeScheduleReport> schedule;
  {
    nb::gil_scoped_release release;  // the reports read N steps of batches
    if (!config.shape_schedule.empty()) schedule.emplace(shape_schedule_report(config, steps, "inspect: steps"));
    if (!config.mixture.empty()) mixture.emplace(mixture_report(config, steps, "inspect: steps"));
  }
  nb::dict result = mixture ? mixture_dict(*mixture) : nb::dict();
  if (schedule) result["shape_schedule"] = shape_schedule_dict(*schedule);
  return result;
}

}  // namespace

void bind_inspect(nb::module_& m) {
  m.def(
      "_inspect",
      // steps as an object (None or an int): nanobind's std::optional<long> caster trips GCC's
      // -Wmaybe-uninitialized under -O2 -Werror.
      [](nb::handle path_or_config, bool deep, nb::handle steps) {
        if (!steps.is_none()) return mixture_from_python(path_or_config, deep, nb::cast<std::int64_t>(steps));
        const InspectRequest request = request_from_python(path_or_config, deep);
        std::optional<DatasetReport> report;
        {
          nb::gil_scoped_release release;  // deep reads every byte of the dataset
          report.emplace(inspect_dataset(request));
        }
        return report_dict(*report);
      },
      "path_or_config"_a, "deep"_a = false, "steps"_a = nb::none(),
      nb::sig(("def _inspect(path_or_config: " + config_source_type() +
               ", deep: bool = False, steps: int | None = None) -> dict[str, typing.Any]")
                  .c_str()),
      "tokenfeed.inspect() (tokenfeed/_inspection.py documents it): the dataset's figures and verdicts, or with "
      "steps a mixture's report.");
}

}  // namespace tokenfeed_python
