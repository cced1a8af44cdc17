#include "tokenfeed/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <unistd.h>

#include <pugixml.hpp>

#include "io/regular_file.hpp"
#include "config/config_values.hpp"
#include "config/mixture_schema.hpp"
#include "config/shape_schedule_schema.hpp"
#include "launch/launcher_ranks.hpp"
#include "launch/parallel_layout.hpp"
#include "tokenfeed/error.hpp"
#include "util/shortest_text.hpp"

namespace tokenfeed {
namespace {

constexpr std::int64_t kMaxBatchPositions = std::int64_t{1} << 34;
constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;
// A chain longer than this is a mistake (or built to exhaust the stack): refused.
constexpr std::size_t kMaxInheritsDepth = 32;

[[noreturn]] void config_error(const std::string& message) { throw Error(ErrorKind::config, message); }

std::string_view trim(std::string_view s) { return trim_config_text(s); }

}  // namespace

std::string_view trim_config_text(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::int64_t parse_config_int(std::string_view key, std::string_view text) {
  const std::string_view t = trim(text);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
    config_error("config key '" + std::string(key) + "': expected an integer, got '" + std::string(t) + "'");
  }
  return value;
}

double parse_config_number(std::string_view key, std::string_view text) {
  const std::string_view t = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value)) {
    config_error("config key '" + std::string(key) + "': expected a number, got '" + std::string(t) + "'");
  }
  return value;
}

namespace {

std::int64_t parse_int(std::string_view key, std::string_view text) { return parse_config_int(key, text); }

// Sizes that are absent until set: a value given must be positive (0 would read as "absent").
std::int64_t parse_positive(std::string_view key, std::string_view text) {
  const std::int64_t value = parse_int(key, text);
  if (value <= 0) {
    config_error("config key '" + std::string(key) + "' must be > 0, got " + std::to_string(value));
  }
  return value;
}

bool parse_bool(std::string_view key, std::string_view text) {
  const std::string_view t = trim(text);
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  config_error("config key '" + std::string(key) + "': expected true or false, got '" + std::string(t) + "'");
}

// The key's text: empty for every field (the default), else the names.
std::string fields_text(BatchFields fields) {
  return fields == kEveryBatchField ? std::string() : batch_field_list(fields);
}

// "x, y,mask": a comma-separated list of BatchField names, each once; empty: every field.
BatchFields parse_fields(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty()) return kEveryBatchField;
  std::string known;
  for (const std::string_view name : kBatchFieldNames) known += (known.empty() ? "" : ", ") + std::string(name);
  BatchFields fields = 0;
  for (std::size_t begin = 0; begin <= t.size();) {
    const std::size_t comma = std::min(t.find(',', begin), t.size());
    const std::string_view name = trim(t.substr(begin, comma - begin));
    const std::optional<BatchField> field = batch_field_named(name);
    if (!field) {
      config_error("config key 'fields': " +
                   (name.empty() ? std::string("an empty name") : "unknown field '" + std::string(name) + "'") +
                   " in '" + std::string(t) + "'; the fields are " + known);
    }
    if ((fields & batch_field_bit(*field)) != 0) {
      config_error("config key 'fields': '" + std::string(name) + "' is named twice in '" + std::string(t) + "'");
    }
    fields |= batch_field_bit(*field);
    begin = comma + 1;
  }
  return fields;
}

template <typename Enum>
Enum parse_enum(std::string_view key, std::string_view text,
                std::initializer_list<std::pair<std::string_view, Enum>> names) {
  const std::string_view t = trim(text);
  std::string allowed;
  for (const auto& [name, value] : names) {
    if (name == t) return value;
    allowed += allowed.empty() ? "" : " | ";
    allowed += name;
  }
  config_error("config key '" + std::string(key) + "': unknown value '" + std::string(t) + "' (expected " + allowed +
               ")");
}

// rank / world_size: a number, or "env" (from the launcher's environment).
std::int64_t parse_rank(std::string_view key, std::string_view text) {
  if (trim(text) == "env") return kFromLauncher;
  const std::int64_t value = parse_int(key, text);
  if (value < 0) {
    config_error("config key '" + std::string(key) + "' must be a non-negative integer or env, got " +
                 std::to_string(value));
  }
  return value;
}

// data_parallel_rank and the like: a non-negative number, or "auto" / "" (derived).
std::optional<std::int64_t> parse_optional_rank(std::string_view key, std::string_view text) {
  if (trim(text) == "auto" || trim(text).empty()) return std::nullopt;
  const std::int64_t value = parse_int(key, text);
  if (value < 0) {
    config_error("config key '" + std::string(key) + "' must be a non-negative integer or auto, got " +
                 std::to_string(value));
  }
  return value;
}

std::string rank_text(std::int64_t v) { return v == kFromLauncher ? "env" : std::to_string(v); }

std::string optional_int_text(const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : ""; }
std::string optional_bool_text(const std::optional<bool>& v) { return v ? (*v ? "true" : "false") : ""; }

// One entry per key: how to set it from text and how to print its effective value.
struct KeyHandler {
  std::string_view name;
  std::function<void(Config&, std::string_view)> set;
  std::function<std::string(const Config&)> get;
};

const std::vector<KeyHandler>& key_handlers() {
  static const std::vector<KeyHandler> handlers = {
      {"dataset_dir", [](Config& c, std::string_view v) { c.dataset_dir = std::string(trim(v)); },
       [](const Config& c) { return c.dataset_dir.string(); }},
      {"dataset_mode",
       [](Config& c, std::string_view v) {
         c.dataset_mode = parse_enum<DatasetMode>("dataset_mode", v,
                                                  {{"sft_episode", DatasetMode::sft_episode},
                                                   {"sft_packed", DatasetMode::sft_packed},
                                                   {"token_stream", DatasetMode::token_stream}});
       },
       [](const Config& c) { return std::string(to_string(c.dataset_mode)); }},
      {"batch_size", [](Config& c, std::string_view v) { c.batch_size = parse_positive("batch_size", v); },
       [](const Config& c) { return c.batch_size == 0 ? std::string() : std::to_string(c.batch_size); }},
      {"block_size", [](Config& c, std::string_view v) { c.block_size = parse_positive("block_size", v); },
       [](const Config& c) { return c.block_size == 0 ? std::string() : std::to_string(c.block_size); }},
      {"use_loss_mask",
       [](Config& c, std::string_view v) {
         const std::string_view t = trim(v);
         if (t == "auto") {
           c.use_loss_mask.reset();
         } else if (t == "true" || t == "1" || t == "false" || t == "0") {
           c.use_loss_mask = parse_bool("use_loss_mask", t);
         } else {
           config_error("config key 'use_loss_mask': expected auto, true or false, got '" + std::string(t) + "'");
         }
       },
       [](const Config& c) {
         return std::string(!c.use_loss_mask ? "auto" : *c.use_loss_mask ? "true" : "false");
       }},
      {"batch_sampling_mode",
       [](Config& c, std::string_view v) {
         c.batch_sampling_mode = parse_enum<SamplingMode>(
             "batch_sampling_mode", v, {{"epoch", SamplingMode::epoch}, {"random", SamplingMode::random}});
       },
       [](const Config& c) {
         return c.batch_sampling_mode ? std::string(to_string(*c.batch_sampling_mode)) : std::string();
       }},
      {"epoch_shuffle", [](Config& c, std::string_view v) { c.epoch_shuffle = parse_bool("epoch_shuffle", v); },
       [](const Config& c) { return std::string(c.epoch_shuffle ? "true" : "false"); }},
      {"epoch_drop_last", [](Config& c, std::string_view v) { c.epoch_drop_last = parse_bool("epoch_drop_last", v); },
       [](const Config& c) { return std::string(c.epoch_drop_last ? "true" : "false"); }},
      {"train.epoch_shuffle",
       [](Config& c, std::string_view v) { c.train_overrides.epoch_shuffle = parse_bool("train.epoch_shuffle", v); },
       [](const Config& c) { return optional_bool_text(c.train_overrides.epoch_shuffle); }},
      {"train.epoch_drop_last",
       [](Config& c, std::string_view v) {
         c.train_overrides.epoch_drop_last = parse_bool("train.epoch_drop_last", v);
       },
       [](const Config& c) { return optional_bool_text(c.train_overrides.epoch_drop_last); }},
      {"val.epoch_shuffle",
       [](Config& c, std::string_view v) { c.val_overrides.epoch_shuffle = parse_bool("val.epoch_shuffle", v); },
       [](const Config& c) { return optional_bool_text(c.val_overrides.epoch_shuffle); }},
      {"val.epoch_drop_last",
       [](Config& c, std::string_view v) { c.val_overrides.epoch_drop_last = parse_bool("val.epoch_drop_last", v); },
       [](const Config& c) { return optional_bool_text(c.val_overrides.epoch_drop_last); }},
      {"val.batch_size",
       [](Config& c, std::string_view v) { c.val_overrides.batch_size = parse_positive("val.batch_size", v); },
       [](const Config& c) { return optional_int_text(c.val_overrides.batch_size); }},
      {"val.block_size",
       [](Config& c, std::string_view v) { c.val_overrides.block_size = parse_positive("val.block_size", v); },
       [](const Config& c) { return optional_int_text(c.val_overrides.block_size); }},
      {"epoch_seed", [](Config& c, std::string_view v) { c.epoch_seed = parse_int("epoch_seed", v); },
       [](const Config& c) { return std::to_string(c.epoch_seed); }},
      {"pad_token_id", [](Config& c, std::string_view v) { c.pad_token_id = parse_int("pad_token_id", v); },
       [](const Config& c) { return optional_int_text(c.pad_token_id); }},
      {"episode_min_tokens",
       [](Config& c, std::string_view v) { c.episode_min_tokens = parse_int("episode_min_tokens", v); },
       [](const Config& c) { return std::to_string(c.episode_min_tokens); }},
      {"token_dtype",
       [](Config& c, std::string_view v) {
         c.token_dtype =
             parse_enum<TokenDtype>("token_dtype", v, {{"uint16", TokenDtype::uint16}, {"uint32", TokenDtype::uint32}});
       },
       [](const Config& c) { return c.token_dtype ? std::string(to_string(*c.token_dtype)) : std::string(); }},
      {"mask_dtype",
       [](Config& c, std::string_view v) {
         c.mask_dtype =
             parse_enum<MaskDtype>("mask_dtype", v, {{"uint8", MaskDtype::uint8}, {"float32", MaskDtype::float32}});
       },
       [](const Config& c) { return c.mask_dtype ? std::string(to_string(*c.mask_dtype)) : std::string(); }},
      {"prefetch_depth",
       [](Config& c, std::string_view v) { c.prefetch_depth = trim(v) == "auto" ? 0 : parse_int("prefetch_depth", v); },
       [](const Config& c) { return c.prefetch_depth == 0 ? std::string("auto") : std::to_string(c.prefetch_depth); }},
      {"prefetch_memory_mb",
       [](Config& c, std::string_view v) { c.prefetch_memory_mb = parse_int("prefetch_memory_mb", v); },
       [](const Config& c) { return std::to_string(c.prefetch_memory_mb); }},
      {"max_held_batches", [](Config& c, std::string_view v) { c.max_held_batches = parse_int("max_held_batches", v); },
       [](const Config& c) { return std::to_string(c.max_held_batches); }},
      {"max_memory_mb",
       [](Config& c, std::string_view v) { c.max_memory_mb = trim(v) == "auto" ? 0 : parse_int("max_memory_mb", v); },
       [](const Config& c) { return c.max_memory_mb == 0 ? std::string("auto") : std::to_string(c.max_memory_mb); }},
      {"decode_threads", [](Config& c, std::string_view v) { c.decode_threads = parse_int("decode_threads", v); },
       [](const Config& c) { return std::to_string(c.decode_threads); }},
      {"rank", [](Config& c, std::string_view v) { c.rank = parse_rank("rank", v); },
       [](const Config& c) { return rank_text(c.rank); }},
      {"world_size", [](Config& c, std::string_view v) { c.world_size = parse_rank("world_size", v); },
       [](const Config& c) { return rank_text(c.world_size); }},
      {"tensor_parallel_size",
       [](Config& c, std::string_view v) { c.tensor_parallel_size = parse_positive("tensor_parallel_size", v); },
       [](const Config& c) { return std::to_string(c.tensor_parallel_size); }},
      {"context_parallel_size",
       [](Config& c, std::string_view v) { c.context_parallel_size = parse_positive("context_parallel_size", v); },
       [](const Config& c) { return std::to_string(c.context_parallel_size); }},
      {"pipeline_parallel_size",
       [](Config& c, std::string_view v) { c.pipeline_parallel_size = parse_positive("pipeline_parallel_size", v); },
       [](const Config& c) { return std::to_string(c.pipeline_parallel_size); }},
      {"parallel_order",
       [](Config& c, std::string_view v) {
         c.parallel_order = std::string(trim(v));
         parse_parallel_order(c.parallel_order);
       },
       [](const Config& c) { return c.parallel_order; }},
      {"data_parallel_rank",
       [](Config& c, std::string_view v) { c.data_parallel_rank = parse_optional_rank("data_parallel_rank", v); },
       [](const Config& c) { return optional_int_text(c.data_parallel_rank); }},
      {"data_parallel_size",
       [](Config& c, std::string_view v) { c.data_parallel_size = parse_optional_rank("data_parallel_size", v); },
       [](const Config& c) { return optional_int_text(c.data_parallel_size); }},
      {"context_parallel_rank",
       [](Config& c, std::string_view v) { c.context_parallel_rank = parse_optional_rank("context_parallel_rank", v); },
       [](const Config& c) { return optional_int_text(c.context_parallel_rank); }},
      {"data_loading",
       [](Config& c, std::string_view v) {
         c.data_loading = parse_enum<DataLoading>(
             "data_loading", v, {{"every_rank", DataLoading::every_rank}, {"group_leader", DataLoading::group_leader}});
       },
       [](const Config& c) { return std::string(to_string(c.data_loading)); }},
      {"context_parallel_split",
       [](Config& c, std::string_view v) { c.context_parallel_split = parse_bool("context_parallel_split", v); },
       [](const Config& c) { return std::string(c.context_parallel_split ? "true" : "false"); }},
      {"truncation",
       [](Config& c, std::string_view v) {
         c.truncation = parse_enum<Truncation>("truncation", v,
                                               {{"right", Truncation::right},
                                                {"drop_oldest_turns", Truncation::drop_oldest_turns},
                                                {"split", Truncation::split}});
       },
       [](const Config& c) { return std::string(to_string(c.truncation)); }},
      {"pack_lookahead", [](Config& c, std::string_view v) { c.pack_lookahead = parse_int("pack_lookahead", v); },
       [](const Config& c) { return std::to_string(c.pack_lookahead); }},
      {"balance_ranks",
       [](Config& c, std::string_view v) {
         c.balance_ranks = parse_enum<RankBalance>(
             "balance_ranks", v, {{"none", RankBalance::none}, {"attention", RankBalance::attention}});
       },
       [](const Config& c) { return std::string(to_string(c.balance_ranks)); }},
      {"contract_fields", [](Config& c, std::string_view v) { c.contract_fields = parse_bool("contract_fields", v); },
       [](const Config& c) { return std::string(c.contract_fields ? "true" : "false"); }},
      {"fields", [](Config& c, std::string_view v) { c.fields = parse_fields(v); },
       [](const Config& c) { return fields_text(c.fields); }},
      {"document_aware", [](Config& c, std::string_view v) { c.document_aware = parse_bool("document_aware", v); },
       [](const Config& c) { return std::string(c.document_aware ? "true" : "false"); }},
      {"eos_token_id", [](Config& c, std::string_view v) { c.eos_token_id = parse_int("eos_token_id", v); },
       [](const Config& c) { return optional_int_text(c.eos_token_id); }},
      {"val_prefix", [](Config& c, std::string_view v) { c.val_prefix = std::string(trim(v)); },
       [](const Config& c) { return c.val_prefix; }},
      {"val_fraction", [](Config& c, std::string_view v) { c.val_fraction = parse_config_number("val_fraction", v); },
       [](const Config& c) { return shortest_text(c.val_fraction); }},
      {"val_seed", [](Config& c, std::string_view v) { c.val_seed = parse_int("val_seed", v); },
       [](const Config& c) { return std::to_string(c.val_seed); }},
      {"ignore_index", [](Config& c, std::string_view v) { c.ignore_index = parse_int("ignore_index", v); },
       [](const Config& c) { return std::to_string(c.ignore_index); }},
      {"audit_log_dir", [](Config& c, std::string_view v) { c.audit_log_dir = std::string(trim(v)); },
       [](const Config& c) { return c.audit_log_dir.string(); }},
  };
  return handlers;
}

const KeyHandler& find_key(std::string_view key) {
  for (const auto& h : key_handlers()) {
    if (h.name == key) return h;
  }
  std::string known;
  for (const auto& h : key_handlers()) {
    known += known.empty() ? "" : ", ";
    known += h.name;
  }
  config_error("unknown config key '" + std::string(key) + "' (known keys: " + known + ")");
}

// A config is a few KiB; the limit stops `inherits="/dev/zero"`-like names, and FIFOs are
// refused rather than waited on.
std::string read_text_file(const std::filesystem::path& path) {
  return read_regular_file(path, "config file", kMaxConfigBytes);
}

// Applies a <train> or <val> element: epoch_shuffle and epoch_drop_last for that split.
void apply_split_element(Config& config, pugi::xml_node element, const std::string& origin) {
  const std::string split = element.name();
  std::set<std::string, std::less<>> seen;
  for (const pugi::xml_node child : element.children()) {
    if (child.type() == pugi::node_comment) continue;
    if (child.type() != pugi::node_element) config_error(origin + ": <" + split + "> holds keys, not text");
    const std::string name = child.name();
    const bool shape = name == "batch_size" || name == "block_size";  // val's own shape only
    if (name != "epoch_shuffle" && name != "epoch_drop_last" && !(shape && split == "val")) {
      config_error(origin + ": unknown key '" + name + "' in <" + split + "> (per-split keys: " +
                   (split == "val" ? "epoch_shuffle, epoch_drop_last, batch_size, block_size)"
                                   : "epoch_shuffle, epoch_drop_last; train's shape is the batch_size and "
                                     "block_size keys and shape_schedule)"));
    }
    if (!seen.insert(name).second) config_error(origin + ": config key '" + split + "." + name + "' is given twice");
    try {
      find_key(split + "." + name).set(config, child.text().get());
    } catch (const Error& e) {
      config_error(origin + ": " + e.what());
    }
  }
}

// ---- Mixtures: the XML's <mixture> as records for the schema (config/mixture_schema) ----

// An element's attributes as a record's keys.
ConfigRecord attribute_record(pugi::xml_node element) {
  ConfigRecord record;
  for (const pugi::xml_attribute attr : element.attributes()) record.keys.emplace_back(attr.name(), attr.value());
  return record;
}

// A <stage>: until_step as a key, each <weight source="NAME">W</weight> an entry.
ConfigRecord stage_record(pugi::xml_node stage, std::size_t index) {
  ConfigRecord record = attribute_record(stage);
  for (const pugi::xml_node w : stage.children()) {
    if (w.type() == pugi::node_comment) continue;
    if (w.type() != pugi::node_element || std::string_view(w.name()) != "weight") {
      config_error(mixture_stage_where(index) + ": a <stage> holds only <weight source=\"NAME\">W</weight> elements");
    }
    record.entries.emplace_back(w.attribute("source").value(), w.text().get());
  }
  return record;
}

// <mixture>'s own attributes (replacing an inherited mixture's); validate_mixture checks
// their values.
void apply_mixture_attributes(Config& config, pugi::xml_node mixture) {
  config.mixture_temperature.reset();
  config.mixture_planned_steps.reset();
  for (const pugi::xml_attribute attr : mixture.attributes()) {
    const std::string_view name = attr.name();
    if (name == "temperature") {
      set_mixture_temperature(config, attr.value());
    } else if (name == "planned_steps") {
      set_mixture_planned_steps(config, attr.value());
    } else {
      config_error("unknown attribute '" + std::string(name) +
                   "' on <mixture> (it takes temperature and planned_steps)");
    }
  }
}

// Reads <mixture> into config.mixture and config.stages (replacing an inherited mixture):
// the element structure is the XML's own; every value is the schema's.
void apply_mixture_xml(Config& config, pugi::xml_node mixture, const std::string& origin,
                       const std::filesystem::path& base_dir) {
  std::vector<ConfigRecord> sources;
  std::vector<ConfigRecord> stages;
  try {
    apply_mixture_attributes(config, mixture);
    for (const pugi::xml_node child : mixture.children()) {
      if (child.type() == pugi::node_comment) continue;
      const std::string_view tag = child.name();
      if (child.type() != pugi::node_element || (tag != "source" && tag != "stage")) {
        config_error("<mixture> holds only <source> and <stage> elements, found " +
                     (child.type() == pugi::node_element ? "<" + std::string(tag) + ">" : std::string("text")));
      }
      if (tag == "stage") {
        stages.push_back(stage_record(child, stages.size()));
      } else if (!stages.empty()) {
        config_error("<mixture>: every <source> must come before the <stage>s");
      } else {
        sources.push_back(attribute_record(child));
      }
    }
    if (sources.empty()) config_error("<mixture> has no <source>");
    set_mixture_sources(config, sources, base_dir);
    set_mixture_stages(config, stages);
  } catch (const Error& e) {
    config_error(origin + ": " + e.what());
  }
}

// Reads <shape_schedule> into config.shape_schedule (replacing an inherited one): each
// <stage .../> a record of its attributes; every value is the schema's.
void apply_shape_schedule_xml(Config& config, pugi::xml_node schedule, const std::string& origin) {
  std::vector<ConfigRecord> stages;
  try {
    if (schedule.first_attribute()) config_error("<shape_schedule> takes no attributes");
    for (const pugi::xml_node child : schedule.children()) {
      if (child.type() == pugi::node_comment) continue;
      if (child.type() != pugi::node_element || std::string_view(child.name()) != "stage" ||
          child.find_child([](pugi::xml_node n) { return n.type() != pugi::node_comment; })) {
        config_error(
            "<shape_schedule> holds only empty <stage .../> elements, found " +
            (child.type() == pugi::node_element ? "<" + std::string(child.name()) + ">" : std::string("text")));
      }
      stages.push_back(attribute_record(child));
    }
    if (stages.empty()) config_error("<shape_schedule> has no <stage>");
    set_shape_schedule(config, stages);
  } catch (const Error& e) {
    config_error(origin + ": " + e.what());
  }
}

// Applies the <training> element of `xml` (from `origin`, for messages) onto `config`,
// after applying its `inherits` base. `chain` holds the files being loaded, for cycles.
void apply_xml(Config& config, std::string_view xml, const std::string& origin, const std::filesystem::path& base_dir,
               std::vector<std::filesystem::path>& chain) {
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed) {
    config_error(origin + ": malformed XML at offset " + std::to_string(parsed.offset) + ": " + parsed.description());
  }
  pugi::xml_node root = doc.document_element();
  pugi::xml_node training = std::string_view(root.name()) == "training" ? root : root.child("training");
  if (!training) config_error(origin + ": no <training> element (as the root or a child of the root)");
  if (std::string_view(root.name()) != "training" && training.next_sibling("training")) {
    config_error(origin + ": more than one <training> element");
  }

  for (const pugi::xml_attribute attr : training.attributes()) {
    if (std::string_view(attr.name()) != "inherits") {
      config_error(origin + ": unknown attribute '" + std::string(attr.name()) + "' on <training>");
    }
  }
  if (const pugi::xml_attribute inherits = training.attribute("inherits")) {
    const std::string_view target = trim(inherits.value());
    if (target.empty()) config_error(origin + ": <training inherits=\"\"> names no file");
    std::filesystem::path base = base_dir / std::filesystem::path(std::string(target));
    // The error_code forms: a name the file system refuses (too long, ...) is a config
    // error naming it, never a std::filesystem exception.
    std::error_code ec;
    if (!std::filesystem::exists(base, ec)) {
      config_error(origin + ": inherited config '" + base.string() + "' does not exist" +
                   (ec ? " (" + ec.message() + ")" : std::string()));
    }
    base = std::filesystem::weakly_canonical(base, ec);
    if (ec) config_error(origin + ": inherited config '" + base.string() + "': " + ec.message());
    if (std::find(chain.begin(), chain.end(), base) != chain.end()) {
      config_error(origin + ": inherits '" + base.string() + "', which forms a cycle");
    }
    if (chain.size() >= kMaxInheritsDepth) {
      config_error(origin + ": inherits chain deeper than " + std::to_string(kMaxInheritsDepth) + " files");
    }
    chain.push_back(base);
    apply_xml(config, read_text_file(base), base.string(), base.parent_path(), chain);
    chain.pop_back();
  }

  std::set<std::string, std::less<>> seen;
  for (const pugi::xml_node child : training.children()) {
    if (child.type() == pugi::node_comment) continue;
    if (child.type() != pugi::node_element) {
      config_error(origin + ": unexpected text directly inside <training>");
    }
    const std::string key = child.name();
    if (!seen.insert(key).second) config_error(origin + ": config key '" + key + "' is given twice");
    if (key == "train" || key == "val") {  // per-split settings: <val><epoch_shuffle>...</epoch_shuffle></val>
      apply_split_element(config, child, origin);
      continue;
    }
    if (key == "mixture") {
      apply_mixture_xml(config, child, origin, base_dir);
      continue;
    }
    if (key == "shape_schedule") {
      apply_shape_schedule_xml(config, child, origin);
      continue;
    }
    if (child.find_child([](pugi::xml_node n) { return n.type() == pugi::node_element; })) {
      config_error(origin + ": config key '" + key + "' must hold a value, not elements");
    }
    try {
      find_key(key).set(config, child.text().get());
    } catch (const Error& e) {
      config_error(origin + ": " + e.what());
    }
    if (key == "dataset_dir" && !config.dataset_dir.empty() && config.dataset_dir.is_relative()) {
      config.dataset_dir = (base_dir / config.dataset_dir).lexically_normal();
    }
  }
}

void require_positive(std::string_view key, std::int64_t value) {
  if (value == 0) config_error("config key '" + std::string(key) + "' is required (a positive integer)");
  if (value < 0) config_error("config key '" + std::string(key) + "' must be > 0, got " + std::to_string(value));
}

}  // namespace

std::uint64_t effective_max_memory_mb(const Config& config) noexcept {
  if (config.max_memory_mb > 0) return static_cast<std::uint64_t>(config.max_memory_mb);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::uint64_t{8} << 10;  // unknown: 8 GiB
  std::int64_t local_ranks = 1;
  try {
    local_ranks = resolve_local_ranks().count;
  } catch (const Error&) {
    // resolve_options refuses such a variable before any budget is taken.
  }
  const std::uint64_t half_mb = (static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) / 2) >> 20;
  return std::max<std::uint64_t>(1, half_mb / static_cast<std::uint64_t>(local_ranks));
}

const char* to_string(DatasetMode mode) noexcept {
  switch (mode) {
    case DatasetMode::auto_detect:
      return "";
    case DatasetMode::sft_episode:
      return "sft_episode";
    case DatasetMode::token_stream:
      return "token_stream";
    case DatasetMode::sft_packed:
      return "sft_packed";
  }
  return "";
}

const char* to_string(Truncation truncation) noexcept {
  switch (truncation) {
    case Truncation::right:
      return "right";
    case Truncation::drop_oldest_turns:
      return "drop_oldest_turns";
    case Truncation::split:
      return "split";
  }
  return "";
}

const char* to_string(RankBalance balance) noexcept { return balance == RankBalance::attention ? "attention" : "none"; }

const char* to_string(DataLoading loading) noexcept {
  return loading == DataLoading::group_leader ? "group_leader" : "every_rank";
}

const char* to_string(SamplingMode mode) noexcept { return mode == SamplingMode::epoch ? "epoch" : "random"; }

Config parse_config_xml(std::string_view xml, const std::filesystem::path& base_dir) {
  Config config;
  std::vector<std::filesystem::path> chain;
  apply_xml(config, xml, "config", base_dir, chain);
  return config;
}

Config load_config_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(ErrorKind::io, "config file '" + path.string() + "' does not exist" +
                                   (ec ? " (" + ec.message() + ")" : std::string()));
  }
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(path, ec);
  if (ec) throw Error(ErrorKind::io, "config file '" + path.string() + "': " + ec.message());
  Config config;
  std::vector<std::filesystem::path> chain{canonical};
  apply_xml(config, read_text_file(canonical), path.string(), canonical.parent_path(), chain);
  return config;
}

void set_config_value(Config& config, std::string_view key, std::string_view value) {
  find_key(key).set(config, value);
}

namespace {

// rank and world_size, each a number or env (kFromLauncher).
void validate_ranks(const Config& c) {
  if (c.world_size != kFromLauncher && c.world_size < 1) {
    config_error("config key 'world_size' must be >= 1 or env, got " + std::to_string(c.world_size));
  }
  if (c.rank != kFromLauncher && c.rank < 0) {
    config_error("config key 'rank' must be >= 0 or env, got " + std::to_string(c.rank));
  }
  // With either from the launcher, the range is checked once both are known (at open).
  if (c.rank != kFromLauncher && c.world_size != kFromLauncher && c.rank >= c.world_size) {
    config_error("config key 'rank' must be in [0, world_size-1] = [0, " + std::to_string(c.world_size - 1) +
                 "], got " + std::to_string(c.rank));
  }
  validate_parallel_layout_keys(c);
}

// The keys that apply to some dataset modes only.
void validate_mode_keys(const Config& c) {
  if (c.document_aware && (c.dataset_mode == DatasetMode::sft_episode || c.dataset_mode == DatasetMode::sft_packed)) {
    config_error(std::string("config key 'document_aware' applies to dataset_mode=token_stream, not ") +
                 to_string(c.dataset_mode));
  }
  if (c.truncation == Truncation::split && c.dataset_mode == DatasetMode::token_stream) {
    config_error(
        "config key 'truncation' is split, which cuts episodes into pieces (sft_episode, sft_packed); "
        "dataset_mode=token_stream reads windows of a token stream, not episodes: remove the key");
  }
  if (c.context_parallel_split && c.context_parallel_size > 1 && c.data_loading == DataLoading::group_leader) {
    config_error(
        "config key 'context_parallel_split' is true, which gives each context-parallel rank its own share of the "
        "rows, but data_loading=group_leader hands every rank of a data-parallel group the leader's batches: use "
        "data_loading=every_rank, or context_parallel_split=false (each rank then splits the whole rows itself)");
  }
  constexpr BatchFields kContractOnly = batch_field_bit(BatchField::tokens) | batch_field_bit(BatchField::labels) |
                                        batch_field_bit(BatchField::token_weights) |
                                        batch_field_bit(BatchField::position_ids) |
                                        batch_field_bit(BatchField::cu_seqlens);
  if (!c.contract_fields && c.fields != kEveryBatchField && (c.fields & kContractOnly) != 0) {
    config_error("config key 'fields' names contract fields (" + batch_field_list(c.fields & kContractOnly) +
                 ") but contract_fields is false, which leaves them empty: drop them from 'fields', or set "
                 "contract_fields=true");
  }
  if (!c.contract_fields && c.dataset_mode == DatasetMode::sft_packed) {
    config_error(
        "config key 'contract_fields' cannot be false with dataset_mode=sft_packed: its batches are the "
        "contract fields (tokens, labels, token_weights, position_ids, cu_seqlens)");
  }
}

// The limits of one batch's shape (rows per rank, positions per row), named by the keys
// that gave them. REQUIRES: both > 0.
void check_batch_limits(const std::string& batch_key, std::int64_t batch, const std::string& block_key,
                        std::int64_t block) {
  // No batch is this large: refused before the product of the two can overflow a buffer size.
  if (block > kMaxBatchPositions || batch > kMaxBatchPositions / block) {
    config_error(batch_key + " * " + block_key + " = " + std::to_string(batch) + " * " + std::to_string(block) +
                 " exceeds 2^34 positions per batch");
  }
  // cu_seqlens holds offsets up to batch_size * block_size as int32.
  if (batch > (1LL << 24) || block > (1LL << 26) || batch * block >= (1LL << 31)) {
    config_error("config keys '" + batch_key + "' x '" + block_key + "' (" + std::to_string(batch) + " x " +
                 std::to_string(block) + ") exceed the supported batch size of 2^31 - 1 positions");
  }
}

// Val's own shape (val.batch_size, val.block_size): the keys' rules.
void check_val_shape(const Config& c) {
  const Config::SplitOverrides& val = c.val_overrides;
  if (!val.batch_size && !val.block_size) return;
  if (val.batch_size) require_positive("val.batch_size", *val.batch_size);
  if (val.block_size) require_positive("val.block_size", *val.block_size);
  check_batch_limits(val.batch_size ? "val.batch_size" : "batch_size", c.batch_size_for("val"),
                     val.block_size ? "val.block_size" : "block_size", c.block_size_for("val"));
}

}  // namespace

void validate_config(const Config& c) {
  validate_mixture(c);
  validate_shape_schedule(c);
  if (c.dataset_dir.empty() && c.mixture.empty()) config_error("config key 'dataset_dir' is required");
  require_positive("batch_size", c.batch_size);
  require_positive("block_size", c.block_size);
  if (c.episode_min_tokens < 2) {
    config_error("config key 'episode_min_tokens' must be >= 2 (y needs one token), got " +
                 std::to_string(c.episode_min_tokens));
  }
  if (c.epoch_seed < 0 || c.epoch_seed > 0xffffffffLL) {
    config_error("config key 'epoch_seed' must be in [0, 2^32-1] (numpy RandomState seeds), got " +
                 std::to_string(c.epoch_seed));
  }
  if (!(c.val_fraction >= 0.0 && c.val_fraction < 1.0)) {
    config_error("config key 'val_fraction' must be in [0, 1) (the fraction of documents that form val), got " +
                 shortest_text(c.val_fraction));
  }
  if (c.val_seed < 0) config_error("config key 'val_seed' must be >= 0, got " + std::to_string(c.val_seed));
  if (c.val_fraction > 0.0 && !c.val_prefix.empty()) {
    config_error(
        "config keys 'val_prefix' and 'val_fraction' are both set: val is either the pairs named by the "
        "prefix or a fraction of the documents, not both");
  }
  if (c.prefetch_depth < 0 || c.prefetch_depth > 4096) {
    config_error("config key 'prefetch_depth' must be auto (0) or in [1, 4096], got " +
                 std::to_string(c.prefetch_depth));
  }
  if (c.prefetch_memory_mb < 1 || c.prefetch_memory_mb > (1LL << 20)) {
    config_error("config key 'prefetch_memory_mb' must be in [1, 1048576] (MiB), got " +
                 std::to_string(c.prefetch_memory_mb));
  }
  if (c.max_memory_mb < 0 || c.max_memory_mb > (1LL << 30)) {
    config_error("config key 'max_memory_mb' must be auto (0) or in [1, 1073741824] (MiB), got " +
                 std::to_string(c.max_memory_mb));
  }
  check_batch_limits("batch_size", c.batch_size, "block_size", c.block_size);
  check_val_shape(c);
  if (c.decode_threads < 0 || c.decode_threads > 256) {
    config_error("config key 'decode_threads' must be in [0, 256] (0 = one per hardware thread), got " +
                 std::to_string(c.decode_threads));
  }
  if (c.max_held_batches < 1 || c.max_held_batches > 1024) {
    config_error("config key 'max_held_batches' must be in [1, 1024], got " + std::to_string(c.max_held_batches));
  }
  validate_ranks(c);
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id > 0xffffffffLL)) {
    config_error("config key 'pad_token_id' must be a token id in [0, 2^32-1], got " + std::to_string(*c.pad_token_id));
  }
  if (c.eos_token_id && (*c.eos_token_id < 0 || *c.eos_token_id > 0xffffffffLL)) {
    config_error("config key 'eos_token_id' must be a token id in [0, 2^32-1], got " + std::to_string(*c.eos_token_id));
  }
  validate_mode_keys(c);
  if (c.pack_lookahead < 1 || c.pack_lookahead > 65536) {
    config_error("config key 'pack_lookahead' must be in [1, 65536], got " + std::to_string(c.pack_lookahead));
  }
  // Labels equal to ignore_index mean "no loss": a value a token id can take would silently
  // drop the loss on that token.
  if (c.ignore_index >= 0) {
    config_error(
        "config key 'ignore_index' must be negative (token ids are >= 0, so that a label can never be "
        "mistaken for it), got " +
        std::to_string(c.ignore_index));
  }
}

std::vector<std::pair<std::string, std::string>> config_entries(const Config& config) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& h : key_handlers()) entries.emplace_back(std::string(h.name), h.get(config));
  if (!config.mixture.empty()) {
    // name:weight per source, then each stage as until_step:name=weight,...
    std::string sources;
    for (const MixtureSource& s : config.mixture) {
      sources += (sources.empty() ? "" : " ") + s.name + ":" + s.weight;
      if (s.max_epochs) sources += ":max_epochs=" + shortest_text(*s.max_epochs);
    }
    entries.emplace_back("mixture", sources);
    if (config.mixture_temperature)
      entries.emplace_back("mixture_temperature", shortest_text(*config.mixture_temperature));
    if (config.mixture_planned_steps) {
      entries.emplace_back("mixture_planned_steps", std::to_string(*config.mixture_planned_steps));
    }
    std::string stages;
    for (const MixtureStage& st : config.stages) {
      std::string text = st.until_step ? std::to_string(*st.until_step) : std::string("end");
      for (const auto& [name, w] : st.weights) text += "," + name + "=" + w;
      stages += (stages.empty() ? "" : " ") + text;
    }
    entries.emplace_back("stages", stages);
  }
  if (!config.shape_schedule.empty())
    entries.emplace_back("shape_schedule", shape_schedule_text(config.shape_schedule));
  return entries;
}

}  // namespace tokenfeed
