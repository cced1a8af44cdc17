#include "loader/resume_state.hpp"

#include <nlohmann/json.hpp>

#include "tokenfeed/error.hpp"
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

}  // namespace

std::string serialize_resume_state(const ResumeState& state) {
  json splits = json::object();
  for (const auto& [name, pos] : state.splits) {
    splits[name] = {{"step", pos.step}, {"epoch", pos.epoch}, {"batch_in_epoch", pos.batch_in_epoch}};
    if (pos.row_in_epoch != 0) splits[name]["row_in_epoch"] = pos.row_in_epoch;
  }
  json doc = {{"format", kFormat}, {"version", kVersion}, {"fingerprint", state.fingerprint}, {"splits", splits}};
  if (!state.order.empty()) doc["order"] = state.order;
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
  if (!doc.contains("fingerprint") || !doc["fingerprint"].is_string()) state_error("field 'fingerprint' must be a string");
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
  return state;
}

}  // namespace tokenfeed
