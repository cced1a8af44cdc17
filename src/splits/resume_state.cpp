#include "splits/resume_state.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "splits/resolved_options.hpp"
#include "splits/shape_plan.hpp"

#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"
#include "util/bounded_json.hpp"

namespace tokenfeed {
namespace {

using nlohmann::json;
constexpr const char* kFormat = "tokenfeed-state";
constexpr int kVersion = 1;

[[noreturn]] void state_error(const std::string& message) {
  throw Error(ErrorKind::state, "invalid resume state: " + message);
}

std::uint64_t read_count(const json& object, const char* field, const std::string& where) {
  if (!object.contains(field)) state_error(where + " lacks '" + field + "'");
  const json& v = object[field];
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    state_error(where + "." + field + " must be a non-negative integer, got " + quote_json(v));
  }
  return v.get<std::uint64_t>();
}

// The state's "weight_changes": [{"step": N, "weights": {"name": "text", ...}}, ...]; the
// names and weights are checked when a loader applies them.
std::vector<WeightChange> read_weight_changes(const json& list) {
  if (!list.is_array()) state_error("field 'weight_changes' must be a list");
  std::vector<WeightChange> changes;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = "weight_changes[" + std::to_string(i) + "]";
    if (!list[i].is_object()) state_error(where + " must be an object");
    WeightChange change;
    change.step = read_count(list[i], "step", where);
    if (!list[i].contains("weights") || !list[i]["weights"].is_object()) {
      state_error(where + ".weights must be an object of source names and weight texts");
    }
    for (const auto& [name, weight] : list[i]["weights"].items()) {
      if (!weight.is_string()) state_error(where + ".weights." + name + " must be a string, got " + quote_json(weight));
      change.weights[name] = weight.get<std::string>();
    }
    changes.push_back(std::move(change));
  }
  return changes;
}

}  // namespace

std::string serialize_resume_state(const ResumeState& state) {
  json splits = json::object();
  for (const auto& [name, pos] : state.splits) {
    splits[name] = {{"step", pos.step}, {"epoch", pos.epoch}, {"batch_in_epoch", pos.batch_in_epoch}};
    if (pos.row_in_epoch != 0) splits[name]["row_in_epoch"] = pos.row_in_epoch;
  }
  json doc = {{"format", kFormat}, {"version", kVersion}, {"fingerprint", state.fingerprint}, {"splits", splits}};
  if (!state.order.empty()) doc["order"] = state.order;
  if (!state.weight_changes.empty()) {
    json changes = json::array();
    for (const WeightChange& c : state.weight_changes) changes.push_back({{"step", c.step}, {"weights", c.weights}});
    doc["weight_changes"] = changes;
  }
  return doc.dump();
}

ResumeState parse_resume_state(std::string_view text) {
  json doc;
  try {
    doc = parse_bounded_json(text);
  } catch (const JsonParseError& e) {
    state_error(std::string("not JSON: ") + e.what());
  }
  if (!doc.is_object()) state_error("expected a JSON object");
  if (!doc.contains("format") || doc["format"] != kFormat) state_error("field 'format' must be \"tokenfeed-state\"");
  if (!doc.contains("version") || doc["version"] != kVersion) {
    state_error("unsupported version " +
                (doc.contains("version") ? quote_json(doc["version"]) : std::string("(none)")) +
                " (this build reads version 1)");
  }
  if (!doc.contains("fingerprint") || !doc["fingerprint"].is_string())
    state_error("field 'fingerprint' must be a string");
  if (!doc.contains("splits") || !doc["splits"].is_object()) state_error("field 'splits' must be an object");
  ResumeState state;
  state.fingerprint = doc["fingerprint"].get<std::string>();
  for (const auto& [name, value] : doc["splits"].items()) {
    if (!value.is_object()) state_error("splits." + name + " must be an object");
    const std::string where = "splits." + name;
    state.splits[name] = {read_count(value, "step", where), read_count(value, "epoch", where),
                          read_count(value, "batch_in_epoch", where),
                          value.contains("row_in_epoch") ? read_count(value, "row_in_epoch", where) : 0};
  }
  if (doc.contains("order")) {
    if (!doc["order"].is_object()) state_error("field 'order' must be an object");
    for (const auto& [key, value] : doc["order"].items()) {
      if (!value.is_string()) state_error("order." + key + " must be a string, got " + value.dump());
      state.order[key] = value.get<std::string>();
    }
  }
  if (doc.contains("weight_changes")) state.weight_changes = read_weight_changes(doc["weight_changes"]);
  return state;
}

}  // namespace tokenfeed

namespace tokenfeed {
namespace {

// No run reaches this many batches (2^53: 285 years at a million batches a second); a state
// past it is corrupt or forged, and refusing it keeps every step, row and counter
// computation far from overflow.
constexpr std::uint64_t kMaxResumeStep = 1ULL << 53;
// A packed epoch that forms no batch is skipped, at most 64 in a row before the loader
// refuses the split, so a run at step k is at most in epoch 64 * (k + 1).
constexpr std::uint64_t kMaxEmptyEpochsInARow = 64;
constexpr std::uint64_t kMaxNumpySeed = 0xffffffffULL;

[[noreturn]] void refuse(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::state, "invalid resume state: splits." + name + "." + what);
}

// What to set so that the global batch is `was` again.
std::string global_batch_fix(const std::string& was, const Config& config) {
  std::string fix = "set batch_size x the data-parallel size = " + was;
  std::uint64_t global = 0;
  const auto [end, ec] = std::from_chars(was.data(), was.data() + was.size(), global);
  const std::uint64_t world = data_parallel_size(config);
  if (ec == std::errc() && end == was.data() + was.size() && global > 0) {
    fix += global % world == 0 ? " (batch_size=" + std::to_string(global / world) + " at data-parallel size " +
                                     std::to_string(world) + ")"
                               : " (" + was + " is not a multiple of the data-parallel size " + std::to_string(world) +
                                     ": run with a data-parallel size that divides it)";
  }
  return fix;
}

// What one order field that differs between a state (`was`) and this loader (`is`) means.
std::string explain_field(const std::string& key, const std::string& was, const std::string& is, const Config& config) {
  if (key == "global_batch_size") {
    return "global_batch_size (batch_size x the data-parallel size) is " + was + " in the state but " + is +
           " here: " + global_batch_fix(was, config);
  }
  if (key == "shape_schedule") {
    return "the shape_schedule (stage first steps, global batch sizes and, when they change, block sizes) is '" + was +
           "' in the state but '" + is +
           "' here, and they differ at or before the state's step: a schedule may change only after it";
  }
  if (key.rfind("content.", 0) == 0 && was == "(absent)") {
    return "the state records no content hash of the '" + key.substr(8) +
           "' split (a tokenfeed before content hashing saved it): its order cannot be checked against this "
           "dataset's tokens; start the run afresh";
  }
  if (key.rfind("content.", 0) == 0) {
    return "the content of the dataset's '" + key.substr(8) + "' split differs (content hash " + was +
           " in the state, " + is + " here" +
           (config.dataset_mode == DatasetMode::token_stream ? ", over its files' names, sizes and bytes" : "") +
           ") though its lengths may not: point dataset_dir at the dataset the state "
           "was saved with";
  }
  if (key.rfind(kWeightChangeField, 0) == 0) {
    return "the mixture's weight change " + key.substr(std::string(kWeightChangeField).size()) + " is " + was +
           " in the state but " + is + " here (set_mixture_weights): the same calls make the same batches";
  }
  if (key.rfind("source.", 0) == 0) {
    return "mixture " + key + " differs (its fingerprint " + was + " in the state, " + is +
           " here): its dataset or its order settings changed";
  }
  if (key.rfind("data.", 0) == 0 && config.dataset_mode == DatasetMode::token_stream) {
    return "the files of the token stream's '" + key.substr(5) +
           "' split differ (their names, token counts and dtypes "
           "hash to " +
           was + " in the state, " + is +
           " here): a token stream's windows never cross a file, so even the same documents in other shards (a "
           "prepare-text --merge of N tasks and a one-process run) make other batches; point dataset_dir at the "
           "dataset the state was saved with";
  }
  if (key.rfind("data.", 0) == 0) {
    return "the dataset's '" + key.substr(5) + "' split differs (content fingerprint " + was + " in the state, " + is +
           " here): point dataset_dir at the dataset the state was saved with";
  }
  return key + " is " + was + " in the state but " + is + " here: set " + key + "=" + was;
}

// Names each order field that differs between a state and this loader, and what to set.
std::string explain_mismatch(const ResumeState& state, const OrderFields& order, const Config& config) {
  if (state.order.empty()) {
    return "the state does not record its order fields (an older tokenfeed wrote it); the order depends on the "
           "dataset content, the global batch (batch_size x world_size), batch_sampling_mode, epoch_seed, "
           "epoch_shuffle, epoch_drop_last and episode_min_tokens (sft_packed and token_stream: block_size; "
           "sft_packed: pack_lookahead, truncation; sft_episode with truncation=split: block_size, truncation)";
  }
  std::string out;
  std::set<std::string> keys;
  for (const auto& [key, value] : order) keys.insert(key);
  for (const auto& [key, value] : state.order) keys.insert(key);
  for (const std::string& key : keys) {
    const auto theirs = state.order.find(key);
    const auto ours = order.find(key);
    const std::string was = theirs == state.order.end() ? "(absent)" : theirs->second;
    const std::string is = ours == order.end() ? "(absent)" : ours->second;
    if (was != is) out += (out.empty() ? "" : "; ") + explain_field(key, was, is, config);
  }
  return out.empty() ? "the fingerprint differs but no order field does" : out;
}

// The shape at each stage start of an order's train schedule, as "GLOBAL_BATCH:BLOCK_SIZE":
// its shape_schedule field ("FIRST:G FIRST:G ..." or, when the block size changes,
// "FIRST:G:T ..."), or without one "0:global_batch_size"; a stage without T has the order's
// block_size.
std::map<std::uint64_t, std::string> schedule_points(const OrderFields& order) {
  std::map<std::uint64_t, std::string> points;
  const auto field = [&order](const char* key, const char* absent) {
    const auto it = order.find(key);
    return it != order.end() ? it->second : std::string(absent);
  };
  const std::string text =
      order.count("shape_schedule") ? field("shape_schedule", "") : "0:" + field("global_batch_size", "0");
  const std::string block = field("block_size", "");
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view stage(text.data() + at, end - at);
    const std::size_t colon = stage.find(':');
    std::uint64_t first = 0;
    if (colon == std::string_view::npos ||
        std::from_chars(stage.data(), stage.data() + colon, first).ec != std::errc()) {
      return {};  // not a schedule this loader wrote: never taken as agreeing
    }
    std::string shape(stage.substr(colon + 1));
    if (shape.find(':') == std::string::npos) shape += ":" + block;
    points[first] = shape;
    at = end + 1;
  }
  return points;
}

// The shape at `step` of a schedule's points.
std::string shape_at(const std::map<std::uint64_t, std::string>& points, std::uint64_t step) {
  auto it = points.upper_bound(step);
  return it == points.begin() ? std::string() : std::prev(it)->second;
}

// Whether the state and this loader differ only in the train schedule's batch sizes after
// the state's train step: every step the state's run took had the same global batch under
// both, so the position carries over (a run extends its schedule).
bool differs_only_after(const ResumeState& state, const OrderFields& order) {
  if (state.order.empty()) return false;
  // Some schedule field must differ: a fingerprint that differs while every field agrees
  // is not this (a foreign or damaged state).
  const auto field = [](const OrderFields& fields, const char* key) {
    const auto it = fields.find(key);
    return it == fields.end() ? std::string("(absent)") : it->second;
  };
  if (field(state.order, "shape_schedule") == field(order, "shape_schedule") &&
      field(state.order, "global_batch_size") == field(order, "global_batch_size")) {
    return false;
  }
  for (const auto& [key, value] : order) {
    const auto theirs = state.order.find(key);
    if (key != "shape_schedule" && key != "global_batch_size" &&
        (theirs == state.order.end() || theirs->second != value))
      return false;
  }
  for (const auto& [key, value] : state.order) {
    if (key != "shape_schedule" && key != "global_batch_size" && order.find(key) == order.end()) return false;
  }
  const auto train = state.splits.find("train");
  if (train == state.splits.end()) return false;
  const std::uint64_t saved = train->second.step;
  const auto was = schedule_points(state.order), is = schedule_points(order);
  if (was.empty() || is.empty()) return false;
  // Piecewise constant: equal at every stage start before the saved step, equal on the
  // steps taken.
  for (const auto& points : {was, is}) {
    for (const auto& [first, shape] : points) {
      if (first < saved && shape_at(was, first) != shape_at(is, first)) return false;
    }
  }
  return true;
}

}  // namespace

void check_state_matches(const ResumeState& state, const std::string& fingerprint, const OrderFields& order,
                         const Config& config, const std::vector<std::string>& earlier) {
  if (std::find(earlier.begin(), earlier.end(), state.fingerprint) != earlier.end()) {
    log_line(LogLevel::info, "[tokenfeed] resume: the state was saved by an earlier tokenfeed, whose fingerprint " +
                                 state.fingerprint + " hashed this dataset's shard layout; accepted as " + fingerprint);
  } else if (state.fingerprint != fingerprint && differs_only_after(state, order)) {
    log_line(LogLevel::info, "[tokenfeed] resume: the shape_schedule differs from the state's only after its step " +
                                 std::to_string(state.splits.at("train").step) +
                                 " (the batches so far had the same sizes): accepted, the run continues on this "
                                 "loader's schedule");
  } else if (state.fingerprint != fingerprint) {
    throw Error(ErrorKind::state, "resume state belongs to another dataset or sampling config (state fingerprint " +
                                      state.fingerprint + ", this loader " + fingerprint +
                                      "): " + explain_mismatch(state, order, config));
  }
  // A Loader's state records every split; one without train would silently restart it.
  if (state.splits.find("train") == state.splits.end()) {
    throw Error(ErrorKind::state,
                "invalid resume state: it has no splits.train entry (save_state records every "
                "split, train always)");
  }
}

void check_resume_step(const std::string& name, const SplitPosition& saved, const Config& config) {
  if (saved.step > kMaxResumeStep) {
    refuse(name, "step=" + std::to_string(saved.step) + " is beyond any run (at most 2^53 batches)");
  }
  // The largest global batch of the split's schedule bounds every step's.
  const std::uint64_t rows_per_step = largest_batch_rows(config, name) * data_parallel_size(config);
  if (saved.step > (std::uint64_t{1} << 62) / rows_per_step) {
    refuse(name, "step=" + std::to_string(saved.step) + " times batch_size * world_size overflows the sample counter");
  }
}

void check_packed_reachable(const std::string& name, const SplitPosition& saved) {
  if (saved.epoch > kMaxEmptyEpochsInARow * (saved.step + 1)) {
    refuse(name,
           "epoch=" + std::to_string(saved.epoch) + " cannot be reached in " + std::to_string(saved.step) + " steps");
  }
  if (saved.batch_in_epoch > saved.step) {
    refuse(name,
           "batch_in_epoch=" + std::to_string(saved.batch_in_epoch) + " exceeds step=" + std::to_string(saved.step));
  }
}

void check_epoch_seed(const std::string& name, const Config& config, std::uint64_t epoch) {
  const std::uint64_t seed = static_cast<std::uint64_t>(config.epoch_seed) + epoch;
  if (!config.shuffle_for(name) || seed <= kMaxNumpySeed) return;
  throw Error(ErrorKind::state, "invalid resume state: splits." + name + " resumes in epoch " + std::to_string(epoch) +
                                    ", and epoch_seed + epoch = " + std::to_string(seed) +
                                    " exceeds numpy's seed range [0, 2^32-1]");
}

SplitPosition check_follows_from_step(const std::string& name, const SplitPosition& saved, SplitPosition resolved) {
  if (saved.epoch != resolved.epoch || saved.batch_in_epoch != resolved.batch_in_epoch || saved.row_in_epoch != 0) {
    throw Error(ErrorKind::state, "invalid resume state: splits." + name + " has epoch=" + std::to_string(saved.epoch) +
                                      " batch_in_epoch=" + std::to_string(saved.batch_in_epoch) +
                                      " row_in_epoch=" + std::to_string(saved.row_in_epoch) +
                                      ", but its step=" + std::to_string(saved.step) + " is epoch " +
                                      std::to_string(resolved.epoch) + ", batch_in_epoch " +
                                      std::to_string(resolved.batch_in_epoch) + ", row_in_epoch 0");
  }
  resolved.row_in_epoch = 0;
  return resolved;
}

}  // namespace tokenfeed
