#include "util/bounded_json.hpp"

namespace tokenfeed {
namespace {

using nlohmann::json;

// Thrown from the parser callback to stop at the first level past the limit, before the
// deeper levels are read.
struct TooDeep {};

constexpr std::size_t kMaxMessage = 300;

std::string shorten(std::string text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  std::size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
  text.resize(cut);
  text += "...";
  return text;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; keep what follows.
std::string reason(const json::exception& e) {
  std::string text = e.what();
  if (text.starts_with("[json.exception.")) {
    if (const auto close = text.find("] "); close != std::string::npos) text.erase(0, close + 2);
  }
  // nlohmann quotes what it last read, which can be a whole long string.
  return shorten(std::move(text), kMaxMessage);
}

std::string too_deep_message() {
  return "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects";
}

template <typename Input>
json parse(Input&& input, const JsonKeyFilter& keep) {
  const json::parser_callback_t callback = [&keep](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      // `depth` counts the containers already open around this one.
      if (static_cast<std::size_t>(depth) + 1 > kMaxJsonDepth) throw TooDeep{};
    } else if (event == json::parse_event_t::key && keep) {
      return keep(static_cast<std::size_t>(depth), parsed.get_ref<const std::string&>());
    }
    return true;
  };
  try {
    return json::parse(std::forward<Input>(input), callback);
  } catch (const TooDeep&) {
    throw JsonParseError(too_deep_message());
  } catch (const json::exception& e) {
    throw JsonParseError(reason(e));
  }
}

}  // namespace

json parse_bounded_json(std::string_view text, const JsonKeyFilter& keep) { return parse(text, keep); }

json parse_bounded_json(std::istream& in) { return parse(in, JsonKeyFilter{}); }

std::string quote_json(const json& value, std::size_t max_chars) {
  if (value.is_array()) return "an array of " + std::to_string(value.size()) + " elements";
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " members";
  return shorten(value.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

}  // namespace tokenfeed
