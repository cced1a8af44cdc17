// Parsing one JSONL line of the common chat format into a conversation:
//
//   {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
//
// or, pre-tokenized (`tokenfeed prepare --special-tokens FILE.json`), messages carrying
// "ids": [int, ...] instead of "content". Other keys (in the line and in messages) are ignored.
// Roles are checked later, by the chat serializer.
//
// OpenAI's chat format in full: "content" may be a list of {"type": "text", "text": ...}
// parts (joined without a separator; other part types are refused); "weight": 0 keeps a
// message out of the loss mask (ChatMessage::trained), "weight": 1 is the default; an
// assistant message's "tool_calls" are written after its content, one call per line as
// {"name": ..., "arguments": {...}} (see append_tool_calls in the .cpp), and trained as the
// assistant's output; such a message may have "content": null. Any other null or non-string
// content is refused, naming the message (numbered from 1).
//
// Thread-safety: pure functions; safe to call concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

enum class ConversationInput : std::uint8_t {
  text,       // messages carry "content": string
  token_ids,  // messages carry "ids": [non-negative integers below 2^32]
};

// Stable reason keys for bad lines, beside to_string(ChatProblem).
inline constexpr std::string_view kReasonInvalidJson = "invalid_json";    // not JSON, or not UTF-8
inline constexpr std::string_view kReasonMissingField = "missing_field";  // "messages", "role", "content"/"ids"
inline constexpr std::string_view kReasonWrongType = "wrong_type";        // a field of the wrong JSON type
inline constexpr std::string_view kReasonLineTooLong = "line_too_long";   // over the line length limit

struct LineDefect {
  std::string reason;  // one of the reason keys
  std::string detail;  // one line, no line number
};

struct ParsedConversation {
  std::vector<ChatMessage> text;                // ConversationInput::text
  std::vector<TokenizedChatMessage> tokenized;  // ConversationInput::token_ids
};

// Parses one line. Returns nullopt and fills `out` (cleared first), or the defect.
std::optional<LineDefect> parse_conversation_line(std::string_view line, ConversationInput input,
                                                  ParsedConversation& out);

// The special tokens of pre-tokenized input, read from `--special-tokens FILE.json`:
//   {"system": ID, "user": ID, "assistant": ID, "tool": ID, "eot": ID,
//    "default_system_ids": [IDS], "vocab_size": N}
// "tool" and "default_system_ids" are optional (no tool turns; an empty injected system turn).
struct PretokenizedSpecials {
  SpecialTokenIds ids;
  std::vector<std::uint32_t> default_system_ids;
  std::uint32_t vocab_size = 0;
};

// Throws Error(io) when the file cannot be read, Error(config) naming the file and key when
// it is invalid (unknown keys, wrong types, ids not below vocab_size, equal special ids).
PretokenizedSpecials read_pretokenized_specials(const std::filesystem::path& file);

// read_special_token_strings (a JSON file of special token strings) is public:
// tokenfeed/tokenizer.hpp.

}  // namespace tokenfeed
