#include "chat/conversation_jsonl.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/regular_file.hpp"
#include "tokenfeed/error.hpp"
#include "util/bounded_json.hpp"

namespace tokenfeed {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a value";
}

// A JSONL line is one JSON line: say "column N", not "line 1, column N".
std::string line_error_text(const JsonParseError& e) {
  std::string text = e.what();
  if (const auto at = text.find("at line 1, column "); at != std::string::npos) text.erase(at + 3, 8);
  return text;
}

// A conversation line keeps only what prepare reads: "messages" at the top, and "role",
// "content", "ids", "weight" and "tool_calls" in each message. Anything else (metadata,
// other payloads) is parsed but never stored, so an unread field costs no memory however
// large it is.
bool keep_conversation_key(std::size_t depth, std::string_view key) {
  if (depth == 1) return key == "messages";
  if (depth == 3) {
    return key == "role" || key == "content" || key == "ids" || key == "weight" || key == "tool_calls";
  }
  return true;
}

std::string label(std::size_t index) { return "message " + std::to_string(index + 1); }

json read_json_file(const std::filesystem::path& file) {
  const std::string text = read_regular_file(file, "JSON file");
  try {
    return parse_bounded_json(text);
  } catch (const JsonParseError& e) {
    throw Error(ErrorKind::config, file.string() + ": invalid JSON: " + e.what());
  }
}

std::uint32_t read_uint32(const json& v, const std::string& where) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    throw Error(ErrorKind::config, where + " must be a non-negative integer, got " + quote_json(v));
  }
  const auto value = v.get<std::uint64_t>();
  if (value > std::numeric_limits<std::uint32_t>::max()) {
    throw Error(ErrorKind::config, where + " must fit in 32 bits, got " + quote_json(v));
  }
  return static_cast<std::uint32_t>(value);
}

// A message's "content": a string, or a list of {"type": "text", "text": "..."} parts, joined
// without a separator (OpenAI's content parts are pieces of one text).
std::optional<LineDefect> read_text_content(const json& content, std::size_t index, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return LineDefect{std::string(kReasonWrongType), label(index) + " \"content\" is " + type_name(content) +
                                                         ", expected a string or a list of text parts"};
  }
  out.clear();
  for (std::size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string where = label(index) + " content part " + std::to_string(k + 1);
    if (!part.is_object()) {
      return LineDefect{std::string(kReasonWrongType),
                        where + " is " + type_name(part) + ", expected an object {\"type\": \"text\", \"text\": ...}"};
    }
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return LineDefect{std::string(kReasonWrongType), where + " has no string \"type\""};
    }
    if (type->get_ref<const std::string&>() != "text") {
      return LineDefect{std::string(kReasonWrongType),
                        where + " has type \"" + type->get<std::string>() + "\"; only \"text\" parts are supported"};
    }
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return LineDefect{std::string(kReasonWrongType), where + " has no string \"text\""};
    }
    out += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

// Appends an assistant message's "tool_calls" (OpenAI's format) to its text, one call per
// line after the content (and a newline when there is content):
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
// "arguments", a JSON-encoded string in OpenAI's format, is written as the JSON value it
// encodes (or as the string when it is not JSON), compact and with sorted keys, so the same
// call is always the same text. The call's "id" and "type" are left out: ids are random and
// the tool's reply is matched by position.
std::optional<LineDefect> append_tool_calls(const json& calls, std::size_t index, std::string& out) {
  if (!calls.is_array()) {
    return LineDefect{std::string(kReasonWrongType),
                      label(index) + " \"tool_calls\" is " + type_name(calls) + ", expected an array"};
  }
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const json& call = calls[k];
    const std::string where = label(index) + " tool call " + std::to_string(k + 1);
    const auto function = call.is_object() ? call.find("function") : call.end();
    if (!call.is_object() || function == call.end() || !function->is_object()) {
      return LineDefect{std::string(kReasonWrongType), where + " is not an object with a \"function\" object"};
    }
    if (const auto type = call.find("type"); type != call.end() && *type != "function") {
      return LineDefect{std::string(kReasonWrongType), where + " has type " + type->dump() + ", expected \"function\""};
    }
    const auto name = function->find("name");
    if (name == function->end() || !name->is_string()) {
      return LineDefect{std::string(kReasonWrongType), where + " has no string \"function\".\"name\""};
    }
    json arguments = json::object();
    if (const auto given = function->find("arguments"); given != function->end() && !given->is_null()) {
      if (given->is_string()) {
        arguments = json::parse(given->get_ref<const std::string&>(), nullptr, false);
        if (arguments.is_discarded()) arguments = *given;
      } else if (given->is_object()) {
        arguments = *given;
      } else {
        return LineDefect{std::string(kReasonWrongType),
                          where + " \"arguments\" is " + type_name(*given) + ", expected a JSON string or an object"};
      }
    }
    if (!out.empty()) out += '\n';
    out += "{\"name\": " + name->dump() + ", \"arguments\": " + arguments.dump() + "}";
  }
  return std::nullopt;
}

// What every message has, whatever the input: its role, whether it is trained, and its
// tool calls (null when absent or null).
struct MessageHead {
  std::string role;
  bool trained = true;
  const json* tool_calls = nullptr;
};

// Message `i`'s head: an object with a string "role", a "weight" of 0 or 1 when given, and
// "tool_calls" only on an assistant message.
std::optional<LineDefect> read_message_head(const json& m, std::size_t i, MessageHead& head) {
  if (!m.is_object()) {
    return LineDefect{std::string(kReasonWrongType),
                      label(i) + " is " + type_name(m) + ", expected an object with \"role\" and \"content\""};
  }
  const auto role = m.find("role");
  if (role == m.end()) return LineDefect{std::string(kReasonMissingField), label(i) + " has no \"role\""};
  if (!role->is_string()) {
    return LineDefect{std::string(kReasonWrongType),
                      label(i) + " \"role\" is " + type_name(*role) + ", expected a string"};
  }
  head.role = role->get<std::string>();
  if (const auto weight = m.find("weight"); weight != m.end()) {
    if (!weight->is_number_integer() || (weight->get<std::int64_t>() != 0 && weight->get<std::int64_t>() != 1)) {
      return LineDefect{std::string(kReasonWrongType),
                        label(i) + " \"weight\" is " + weight->dump() + ", expected 0 or 1"};
    }
    head.trained = weight->get<std::int64_t>() == 1;
  }
  const auto tool_calls = m.find("tool_calls");
  head.tool_calls = tool_calls != m.end() && !tool_calls->is_null() ? &*tool_calls : nullptr;
  if (head.tool_calls != nullptr && head.role != "assistant") {
    return LineDefect{std::string(kReasonWrongType), label(i) + " has \"tool_calls\" but is a " + head.role +
                                                         " message; only assistant messages "
                                                         "call tools"};
  }
  return std::nullopt;
}

// Message `i` of text input: its "content" (text or text parts) and its tool calls as text.
std::optional<LineDefect> read_text_message(const json& m, std::size_t i, MessageHead& head,
                                            std::vector<ChatMessage>& out) {
  const auto content = m.find("content");
  const bool has_tool_calls = head.tool_calls != nullptr;
  if (content == m.end() && !has_tool_calls) {
    return LineDefect{std::string(kReasonMissingField),
                      m.contains("ids") ? label(i) +
                                              " has \"ids\" but no \"content\"; pre-tokenized input needs "
                                              "--special-tokens FILE.json"
                                        : label(i) + " has no \"content\""};
  }
  ChatMessage message{std::move(head.role), {}, head.trained};
  // An assistant message that only calls tools has content null (or none).
  const bool no_content = content == m.end() || (content->is_null() && has_tool_calls);
  if (!no_content) {
    if (auto defect = read_text_content(*content, i, message.content)) return defect;
  }
  if (has_tool_calls) {
    if (auto defect = append_tool_calls(*head.tool_calls, i, message.content)) return defect;
  }
  out.push_back(std::move(message));
  return std::nullopt;
}

// Message `i` of pre-tokenized input: its "ids", each in [0, 2^32).
std::optional<LineDefect> read_tokenized_message(const json& m, std::size_t i, MessageHead& head,
                                                 std::vector<TokenizedChatMessage>& out) {
  const auto ids = m.find("ids");
  if (ids == m.end()) {
    return LineDefect{std::string(kReasonMissingField),
                      m.contains("content") ? label(i) +
                                                  " has \"content\" but no \"ids\"; with --special-tokens "
                                                  "every message must be pre-tokenized"
                                            : label(i) + " has no \"ids\""};
  }
  if (head.tool_calls != nullptr) {
    return LineDefect{std::string(kReasonWrongType),
                      label(i) + " has \"tool_calls\" in pre-tokenized input; put the calls' ids in \"ids\""};
  }
  if (!ids->is_array()) {
    return LineDefect{std::string(kReasonWrongType),
                      label(i) + " \"ids\" is " + type_name(*ids) + ", expected an array of token ids"};
  }
  TokenizedChatMessage message{std::move(head.role), {}, head.trained};
  message.ids.reserve(ids->size());
  for (const json& id : *ids) {
    const bool ok = id.is_number_unsigned() || (id.is_number_integer() && id.get<std::int64_t>() >= 0);
    if (!ok || id.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      return LineDefect{std::string(kReasonWrongType),
                        label(i) + " \"ids\" holds " + quote_json(id) + ", expected integers in [0, 2^32)"};
    }
    message.ids.push_back(static_cast<std::uint32_t>(id.get<std::uint64_t>()));
  }
  out.push_back(std::move(message));
  return std::nullopt;
}

// The line as a JSON object with a "messages" array (`doc` holds it, `messages` points
// into it), or why it is not one.
std::optional<LineDefect> read_messages(std::string_view line, json& doc, const json*& messages) {
  try {
    doc = parse_bounded_json(line, keep_conversation_key);
  } catch (const JsonParseError& e) {
    return LineDefect{std::string(kReasonInvalidJson), line_error_text(e)};
  }
  if (!doc.is_object()) {
    return LineDefect{std::string(kReasonWrongType),
                      std::string("the line is ") + type_name(doc) + ", expected an object with \"messages\""};
  }
  const auto found = doc.find("messages");
  if (found == doc.end()) return LineDefect{std::string(kReasonMissingField), "no \"messages\" field"};
  if (!found->is_array()) {
    return LineDefect{std::string(kReasonWrongType),
                      std::string("\"messages\" is ") + type_name(*found) + ", expected an array"};
  }
  messages = &*found;
  return std::nullopt;
}

}  // namespace

std::optional<LineDefect> parse_conversation_line(std::string_view line, ConversationInput input,
                                                  ParsedConversation& out) {
  out.text.clear();
  out.tokenized.clear();
  json doc;
  const json* messages = nullptr;
  if (auto defect = read_messages(line, doc, messages)) return defect;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    MessageHead head;
    if (auto defect = read_message_head(m, i, head)) return defect;
    auto defect = input == ConversationInput::text ? read_text_message(m, i, head, out.text)
                                                   : read_tokenized_message(m, i, head, out.tokenized);
    if (defect) return defect;
  }
  return std::nullopt;
}

PretokenizedSpecials read_pretokenized_specials(const std::filesystem::path& file) {
  const json doc = read_json_file(file);
  const std::string name = file.string();
  if (!doc.is_object()) throw Error(ErrorKind::config, name + ": expected a JSON object");
  // A misspelt key must not pass silently: a typo in "tool" would drop every tool turn.
  static constexpr std::string_view kKeys[] = {"system", "user", "assistant", "tool", "eot", "default_system_ids",
                                               "vocab_size"};
  for (const auto& item : doc.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), item.key()) == std::end(kKeys)) {
      throw Error(ErrorKind::config, name + ": unknown key \"" + item.key() +
                                         "\" (expected system, user, assistant, tool, eot, default_system_ids, "
                                         "vocab_size)");
    }
  }
  const auto required = [&](const char* key) -> std::uint32_t {
    const auto it = doc.find(key);
    if (it == doc.end()) throw Error(ErrorKind::config, name + ": missing \"" + key + "\"");
    return read_uint32(*it, name + ": \"" + key + "\"");
  };
  PretokenizedSpecials s;
  s.ids.system = required("system");
  s.ids.user = required("user");
  s.ids.assistant = required("assistant");
  s.ids.eot = required("eot");
  s.vocab_size = required("vocab_size");
  if (const auto it = doc.find("tool"); it != doc.end() && !it->is_null()) {
    s.ids.tool = read_uint32(*it, name + ": \"tool\"");
  }
  if (const auto it = doc.find("default_system_ids"); it != doc.end() && !it->is_null()) {
    if (!it->is_array()) throw Error(ErrorKind::config, name + ": \"default_system_ids\" must be an array of ids");
    for (const json& id : *it) s.default_system_ids.push_back(read_uint32(id, name + ": \"default_system_ids\""));
  }
  check_special_token_ids(s.ids, name);
  const auto check_below = [&](std::uint32_t id, const std::string& what) {
    if (id >= s.vocab_size) {
      throw Error(ErrorKind::config, name + ": " + what + " id " + std::to_string(id) +
                                         " is not below \"vocab_size\" " + std::to_string(s.vocab_size));
    }
  };
  check_below(s.ids.system, "\"system\"");
  check_below(s.ids.user, "\"user\"");
  check_below(s.ids.assistant, "\"assistant\"");
  check_below(s.ids.eot, "\"eot\"");
  if (s.ids.tool) check_below(*s.ids.tool, "\"tool\"");
  for (const std::uint32_t id : s.default_system_ids) {
    check_below(id, "\"default_system_ids\"");
    if (is_special_token(s.ids, id)) {
      throw Error(ErrorKind::config,
                  name + ": \"default_system_ids\" holds the special token id " + std::to_string(id));
    }
  }
  return s;
}

SpecialTokenStrings read_special_token_strings(const std::filesystem::path& file) {
  const json doc = read_json_file(file);
  const std::string name = file.string();
  if (!doc.is_object()) throw Error(ErrorKind::config, name + ": expected a JSON object of special token strings");
  SpecialTokenStrings s;
  const std::pair<const char*, std::string*> fields[] = {
      {"system", &s.system}, {"user", &s.user}, {"assistant", &s.assistant}, {"tool", &s.tool}, {"eot", &s.eot}};
  for (const auto& [key, value] : doc.items()) {
    bool known = false;
    for (const auto& [field, target] : fields) {
      if (key != field) continue;
      if (!value.is_string()) throw Error(ErrorKind::config, name + ": \"" + key + "\" must be a string");
      *target = value.get<std::string>();
      known = true;
    }
    if (!known) {
      throw Error(ErrorKind::config,
                  name + ": unknown key \"" + key + "\" (expected system, user, assistant, tool, eot)");
    }
  }
  return s;
}

}  // namespace tokenfeed
