// The token-native chat template for supervised fine-tuning (SFT), with assistant-only
// loss masks, turn-aware truncation, padding and collation into (x, y, loss_mask).
//
// Template: a conversation serializes as a system turn first (a default system text when
// the conversation has none and that text is not empty), then its turns in order, each one
//
//     ROLE_TOKEN content END_OF_TURN
//
// where the role tokens (system, user, assistant, tool) and END_OF_TURN are single ids
// (SpecialTokenIds). Turn boundaries are found from these ids only: nothing here searches
// text for markers, and content may never encode to a special id.
//
// Loss mask: true on assistant content and on the end-of-turn token closing an assistant
// turn; false on every role token, on system, user and tool content, and on padding, and
// on the whole of an assistant turn whose message is not trained (OpenAI's "weight": 0).
//
// Masks are one byte per token, 0 or 1 (the layout of mask.bin and of a bool tensor).
//
// Thread-safety: every function here is pure (no shared state) and may be called
// concurrently; a Tokenizer passed in must be safe for concurrent const use, as the
// library's tokenizers are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/export.hpp"
#include "tokenfeed/special_tokens.hpp"

namespace tokenfeed {

class Tokenizer;

// The default system text injected when a conversation has no system message (the spec's
// DEFAULT_SYSTEM_TEXT).
inline constexpr std::string_view kDefaultSystemText = "you are a helpful assistant.";

// The value the collated targets hold where the loss mask is false.
inline constexpr std::int64_t kIgnoreIndex = -100;

enum class ChatRole : std::uint8_t { system, user, assistant, tool };

// Parses "system" | "user" | "assistant" | "tool" (lowercase only), and "developer" (OpenAI's
// newer name for the system role) as system; nullopt otherwise.
TOKENFEED_API std::optional<ChatRole> parse_chat_role(std::string_view name) noexcept;
TOKENFEED_API const char* to_string(ChatRole role) noexcept;

// One message of a conversation as text. `role` is kept as given so that an unknown role is
// reported rather than unrepresentable.
// `trained` false (OpenAI's "weight": 0) keeps the turn in the ids but out of the loss mask
// (chat_loss_mask); it changes nothing for turns that are not the assistant's.
struct ChatMessage {
  std::string role;
  std::string content;
  bool trained = true;
};

// One message whose content is already token ids (tokenized elsewhere).
struct TokenizedChatMessage {
  std::string role;
  std::vector<std::uint32_t> ids;
  bool trained = true;
};

// What makes a conversation unusable for the template. Names (to_string) are stable: they
// are the per-reason keys of `tokenfeed prepare`'s skip counts.
enum class ChatProblem : std::uint8_t {
  empty_conversation,        // no messages
  unknown_role,              // a role other than system, user, assistant, tool
  misplaced_system,          // a system message that is not the first message
  no_assistant_turn,         // nothing to train on
  no_tool_token,             // a tool message while SpecialTokenIds::tool is absent
  special_token_in_content,  // content that encodes to (or, pre-tokenized, holds) a special id
  id_out_of_range,           // pre-tokenized content id >= the vocabulary size
};
TOKENFEED_API const char* to_string(ChatProblem problem) noexcept;

struct ChatDefect {
  ChatProblem problem = ChatProblem::empty_conversation;
  std::size_t message_index = 0;  // 0-based index of the offending message (0 when n/a)
  std::string detail;             // one line, e.g. "message 3 has unknown role \"bot\"..."
};

// Checks the roles of a conversation: non-empty, known roles, system only first, at least one
// assistant message, tool messages only when a tool token exists. nullopt when fine.
TOKENFEED_API std::optional<ChatDefect> check_chat_roles(std::span<const ChatMessage> messages,
                                                         const SpecialTokenIds& special);
TOKENFEED_API std::optional<ChatDefect> check_chat_roles(std::span<const TokenizedChatMessage> messages,
                                                         const SpecialTokenIds& special);

// Serializes a text conversation with `tokenizer` (its special_ids()), appending to `out`.
// An empty `default_system_text` injects no system turn at all. Returns nullopt on success,
// else the defect (and `out` holds a partial result).
TOKENFEED_API std::optional<ChatDefect> append_chat_ids(std::span<const ChatMessage> messages,
                                                        const Tokenizer& tokenizer,
                                                        std::string_view default_system_text,
                                                        std::vector<std::uint32_t>& out);

// Serializes a pre-tokenized conversation, appending to `out`. `default_system_ids` is the
// content of the injected system turn. When `vocab_size` is set, every content id must be
// below it. Returns nullopt on success, else the defect.
TOKENFEED_API std::optional<ChatDefect> append_tokenized_chat_ids(std::span<const TokenizedChatMessage> messages,
                                                                  const SpecialTokenIds& special,
                                                                  std::span<const std::uint32_t> default_system_ids,
                                                                  std::optional<std::uint32_t> vocab_size,
                                                                  std::vector<std::uint32_t>& out);

// The spec's serialize_chat_to_ids: the ids of the whole conversation, system turn first.
// Throws Error(format) with the defect's detail when the conversation is unusable.
TOKENFEED_API std::vector<std::uint32_t> serialize_chat_to_ids(
    std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
    std::string_view default_system_text = kDefaultSystemText);
TOKENFEED_API std::vector<std::uint32_t> serialize_chat_to_ids(std::span<const TokenizedChatMessage> messages,
                                                               const SpecialTokenIds& special,
                                                               std::span<const std::uint32_t> default_system_ids);

// The spec's sft_loss_mask_for_ids, computed by scanning ids: an assistant role token starts
// an assistant span (the role token itself is 0); following tokens are 1 up to and including
// the end-of-turn that closes the span. Everything else is 0. Role tokens are always 0: on
// malformed input where another role token interrupts an unterminated assistant span, that
// token is 0 and ends the span.
TOKENFEED_API std::vector<std::uint8_t> sft_loss_mask_for_ids(std::span<const std::uint32_t> ids,
                                                              const SpecialTokenIds& special);
// As above, into `mask`. REQUIRES: mask.size() == ids.size().
TOKENFEED_API void sft_loss_mask_for_ids(std::span<const std::uint32_t> ids, const SpecialTokenIds& special,
                                         std::span<std::uint8_t> mask);

// The loss mask of a serialized conversation: sft_loss_mask_for_ids, then 0 over every turn
// whose message has trained == false. `ids` must be append_chat_ids' (or
// append_tokenized_chat_ids') output for `messages`: turns are matched to messages by their
// role tokens, after the injected system turn when there is one. Throws Error(usage) when
// the ids hold neither messages.size() nor messages.size() + 1 turns.
TOKENFEED_API std::vector<std::uint8_t> chat_loss_mask(std::span<const ChatMessage> messages,
                                                       std::span<const std::uint32_t> ids,
                                                       const SpecialTokenIds& special);
TOKENFEED_API std::vector<std::uint8_t> chat_loss_mask(std::span<const TokenizedChatMessage> messages,
                                                       std::span<const std::uint32_t> ids,
                                                       const SpecialTokenIds& special);

// Which tokens of an episode a packed row of length S keeps: ids[head_begin, head_end)
// followed by ids[tail_begin, tail_end), then padding up to S.
//
// Rules (S = T + 1):
//  1. when the episode is longer than S, drop whole oldest exchanges after the leading system
//     turn until it fits. An exchange is a user turn with the turns that follow it up to the
//     next user turn (the spec's user+assistant pair, with tool turns kept beside their
//     assistant turns); turns before the first user turn form an exchange of their own.
//  2. the exchange holding the final assistant turn is never dropped.
//  3. if still too long, keep the last S tokens of what remains; when that would cut into the
//     final assistant turn, the turns after it are cut first, so that the window ends with
//     the end-of-turn closing the final assistant turn (the stop token stays a target).
// Turns are found from the role and end-of-turn ids; a turn without its end-of-turn ends
// where the next role token starts.
struct SftWindow {
  std::size_t head_begin = 0, head_end = 0;
  std::size_t tail_begin = 0, tail_end = 0;
  std::size_t size() const noexcept { return (head_end - head_begin) + (tail_end - tail_begin); }
};

// Plans the window for an episode. Overloads for both on-disk token widths, so an episode can
// be planned in place in a memory-mapped shard. Throws Error(usage) when S == 0.
TOKENFEED_API SftWindow plan_sft_window(std::span<const std::uint32_t> ids, std::size_t S,
                                        const SpecialTokenIds& special);
TOKENFEED_API SftWindow plan_sft_window(std::span<const std::uint16_t> ids, std::size_t S,
                                        const SpecialTokenIds& special);

// Truncates (plan_sft_window) and right-pads with `pad_id` (mask 0) into exactly
// S = out_ids.size() tokens, copying the mask alongside (it is not recomputed, so a window
// that starts inside an assistant turn keeps its mask). Returns the number of episode tokens
// kept; the rest is padding. REQUIRES: mask.size() == ids.size() and
// out_mask.size() == out_ids.size() > 0, else Error(usage).
TOKENFEED_API std::size_t pack_sft_into(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask,
                                        const SpecialTokenIds& special, std::uint32_t pad_id,
                                        std::span<std::uint32_t> out_ids, std::span<std::uint8_t> out_mask);

struct PackedSft {
  std::vector<std::uint32_t> ids;  // exactly S
  std::vector<std::uint8_t> mask;  // exactly S, 0/1
};

// The spec's pack_sft_ids_and_mask: enforces length exactly S. Throws Error(usage) when S is 0
// or the sizes of ids and mask differ.
TOKENFEED_API PackedSft pack_sft_ids_and_mask(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask,
                                              std::size_t S, const SpecialTokenIds& special, std::uint32_t pad_id);

// Collates one packed row of S = T + 1 tokens: x[i] = ids[i], y[i] = ids[i + 1] where
// mask[i + 1] else ignore_index, loss_mask[i] = mask[i + 1].
// REQUIRES: ids.size() == mask.size() == T + 1 and x, y, loss_mask of size T (else Error(usage)).
TOKENFEED_API void collate_sft_row(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask,
                                   std::int64_t ignore_index, std::span<std::int64_t> x, std::span<std::int64_t> y,
                                   std::span<std::uint8_t> loss_mask);

// A batch of B rows of T positions, row-major.
struct SftBatch {
  std::size_t rows = 0, T = 0;
  std::vector<std::int64_t> x;          // (B, T)
  std::vector<std::int64_t> y;          // (B, T), ignore_index where loss_mask is 0
  std::vector<std::uint8_t> loss_mask;  // (B, T), bool as bytes 0/1
};

// The spec's collate_sft_batch. Throws Error(usage) when a row's length is not T + 1.
TOKENFEED_API SftBatch collate_sft_batch(std::span<const PackedSft> packed, std::size_t T,
                                         std::int64_t ignore_index = kIgnoreIndex);

}  // namespace tokenfeed
