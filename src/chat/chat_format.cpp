#include "tokenfeed/chat_format.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {
namespace {

std::string message_label(std::size_t index) { return "message " + std::to_string(index + 1); }

template <class Message>
std::optional<ChatDefect> check_roles(std::span<const Message> messages, const SpecialTokenIds& special) {
  if (messages.empty()) return ChatDefect{ChatProblem::empty_conversation, 0, "the conversation has no messages"};
  bool has_assistant = false;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::optional<ChatRole> role = parse_chat_role(messages[i].role);
    if (!role) {
      return ChatDefect{ChatProblem::unknown_role, i,
                        message_label(i) + " has unknown role \"" + messages[i].role +
                            "\" (expected system, developer, user, assistant or tool)"};
    }
    if (*role == ChatRole::system && i != 0) {
      return ChatDefect{ChatProblem::misplaced_system, i,
                        message_label(i) + " is a system message; only the first message may be one"};
    }
    if (*role == ChatRole::tool && !special.tool) {
      return ChatDefect{ChatProblem::no_tool_token, i,
                        message_label(i) + " is a tool message but the special tokens have no tool id"};
    }
    has_assistant = has_assistant || *role == ChatRole::assistant;
  }
  if (!has_assistant) {
    return ChatDefect{ChatProblem::no_assistant_turn, 0,
                      "the conversation has no assistant message (nothing to train on)"};
  }
  return std::nullopt;
}

template <class Message>
std::vector<std::uint8_t> loss_mask_of_turns(std::span<const Message> messages, std::span<const std::uint32_t> ids,
                                             const SpecialTokenIds& special) {
  std::vector<std::uint8_t> mask = sft_loss_mask_for_ids(ids, special);
  const auto turns = static_cast<std::size_t>(
      std::count_if(ids.begin(), ids.end(), [&](std::uint32_t id) { return is_role_token(special, id); }));
  if (turns != messages.size() && turns != messages.size() + 1) {
    throw Error(ErrorKind::usage, "chat_loss_mask: the ids hold " + std::to_string(turns) + " turns for " +
                                      std::to_string(messages.size()) + " messages");
  }
  const std::size_t injected = turns - messages.size();  // the default system turn, first
  std::size_t turn = 0;
  bool zero = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (is_role_token(special, ids[i])) {
      zero = turn >= injected && !messages[turn - injected].trained;
      ++turn;
    }
    if (zero) mask[i] = 0;
  }
  return mask;
}

std::uint32_t role_token(const SpecialTokenIds& special, ChatRole role) noexcept {
  switch (role) {
    case ChatRole::system:
      return special.system;
    case ChatRole::user:
      return special.user;
    case ChatRole::assistant:
      return special.assistant;
    case ChatRole::tool:
      return special.tool.value_or(special.eot);  // checked before use
  }
  return special.eot;
}

// Index of the first special id in ids[from, ...), or npos.
std::size_t find_special(const std::vector<std::uint32_t>& ids, std::size_t from, const SpecialTokenIds& special) {
  for (std::size_t i = from; i < ids.size(); ++i) {
    if (is_special_token(special, ids[i])) return i;
  }
  return std::string::npos;
}

// The end of the leading system turn [0, p), which truncation never drops: just past its
// end-of-turn, or the next role token; 0 without a leading system turn.
template <class Token>
std::size_t system_turn_end(std::span<const Token> ids, const SpecialTokenIds& special) {
  const std::size_t n = ids.size();
  if (ids[0] != special.system) return 0;
  for (std::size_t j = 1; j < n; ++j) {
    if (ids[j] == special.eot) return j + 1;
    if (is_role_token(special, ids[j])) return j;
  }
  return n;
}

// The final assistant turn after `p`, at `role`, and the end-of-turn closing it, at `eot`
// (n for none).
struct FinalAssistantTurn {
  std::size_t role, eot;
};
template <class Token>
FinalAssistantTurn final_assistant_turn(std::span<const Token> ids, std::size_t p, const SpecialTokenIds& special) {
  const std::size_t n = ids.size();
  FinalAssistantTurn last{n, n};
  for (std::size_t i = n; i-- > p;) {
    if (ids[i] == special.assistant) {
      last.role = i;
      break;
    }
  }
  if (last.role == n) return last;
  for (std::size_t j = last.role + 1; j < n; ++j) {
    if (ids[j] == special.eot) {
      last.eot = j;
      break;
    }
    if (is_role_token(special, ids[j])) break;
  }
  return last;
}

// Rule 1 and 2: where the kept suffix starts, an exchange start q (p itself, or a user
// turn), no later than the exchange holding the final assistant turn: the first that fits
// S with the system turn, else the last one tried.
template <class Token>
std::size_t exchange_start(std::span<const Token> ids, std::size_t S, std::size_t p, const FinalAssistantTurn& last,
                           const SpecialTokenIds& special) {
  const std::size_t n = ids.size();
  const std::size_t q_limit = last.role < n ? last.role : n - 1;
  const auto fits = [&](std::size_t start) { return p + (n - start) <= S; };
  std::size_t q = p;
  if (fits(q)) return q;
  for (std::size_t i = p + 1; i <= q_limit && i < n; ++i) {
    if (ids[i] != special.user) continue;
    q = i;
    if (fits(q)) break;
  }
  return q;
}

// Rule 3: hard left-truncation of R = ids[0, p) ++ ids[q, n). When the last S tokens of R
// would cut into the final assistant turn, the turns after it go first: the window then
// ends with that turn's end-of-turn, so the stop token stays a target.
SftWindow hard_truncation(std::size_t n, std::size_t S, std::size_t p, std::size_t q, const FinalAssistantTurn& last) {
  SftWindow window;
  const std::size_t length = p + (n - q);
  std::size_t end = length;
  if (last.eot < n) {
    const std::size_t asst_in_r = p + (last.role - q);
    if (length - S > asst_in_r) end = p + (last.eot - q) + 1;
  }
  const std::size_t start = end > S ? end - S : 0;
  if (start < p) {
    window.head_begin = start;
    window.head_end = std::min(end, p);
  }
  if (end > p) {
    window.tail_begin = q + (std::max(start, p) - p);
    window.tail_end = q + (end - p);
  } else {
    window.tail_begin = window.tail_end = q;
  }
  return window;
}

template <class Token>
SftWindow plan_window(std::span<const Token> ids, std::size_t S, const SpecialTokenIds& special) {
  if (S == 0) throw Error(ErrorKind::usage, "plan_sft_window: S (= T + 1) must be at least 1");
  const std::size_t n = ids.size();
  SftWindow window;
  if (n <= S) {
    window.head_end = n;
    return window;
  }
  const std::size_t p = system_turn_end(ids, special);
  const FinalAssistantTurn last = final_assistant_turn(ids, p, special);
  const std::size_t q = exchange_start(ids, S, p, last, special);
  if (p + (n - q) > S) return hard_truncation(n, S, p, q, last);
  window.head_end = p;
  window.tail_begin = q;
  window.tail_end = n;
  return window;
}

}  // namespace

void check_special_token_ids(const SpecialTokenIds& ids, std::string_view what) {
  std::vector<std::pair<const char*, std::uint32_t>> all = {
      {"system", ids.system}, {"user", ids.user}, {"assistant", ids.assistant}, {"eot", ids.eot}};
  if (ids.tool) all.emplace_back("tool", *ids.tool);
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      if (all[i].second == all[j].second) {
        throw Error(ErrorKind::config, std::string(what) + ": special tokens '" + all[i].first + "' and '" +
                                           all[j].first + "' have the same id " + std::to_string(all[i].second));
      }
    }
  }
}

bool is_role_token(const SpecialTokenIds& ids, std::uint32_t id) noexcept {
  return id == ids.system || id == ids.user || id == ids.assistant || (ids.tool && id == *ids.tool);
}

bool is_special_token(const SpecialTokenIds& ids, std::uint32_t id) noexcept {
  return id == ids.eot || is_role_token(ids, id);
}

std::optional<ChatRole> parse_chat_role(std::string_view name) noexcept {
  if (name == "system" || name == "developer") return ChatRole::system;
  if (name == "user") return ChatRole::user;
  if (name == "assistant") return ChatRole::assistant;
  if (name == "tool") return ChatRole::tool;
  return std::nullopt;
}

const char* to_string(ChatRole role) noexcept {
  switch (role) {
    case ChatRole::system:
      return "system";
    case ChatRole::user:
      return "user";
    case ChatRole::assistant:
      return "assistant";
    case ChatRole::tool:
      return "tool";
  }
  return "?";
}

const char* to_string(ChatProblem problem) noexcept {
  switch (problem) {
    case ChatProblem::empty_conversation:
      return "empty_conversation";
    case ChatProblem::unknown_role:
      return "unknown_role";
    case ChatProblem::misplaced_system:
      return "misplaced_system";
    case ChatProblem::no_assistant_turn:
      return "no_assistant_turn";
    case ChatProblem::no_tool_token:
      return "no_tool_token";
    case ChatProblem::special_token_in_content:
      return "special_token_in_content";
    case ChatProblem::id_out_of_range:
      return "id_out_of_range";
  }
  return "?";
}

std::optional<ChatDefect> check_chat_roles(std::span<const ChatMessage> messages, const SpecialTokenIds& special) {
  return check_roles(messages, special);
}

std::optional<ChatDefect> check_chat_roles(std::span<const TokenizedChatMessage> messages,
                                           const SpecialTokenIds& special) {
  return check_roles(messages, special);
}

std::optional<ChatDefect> append_chat_ids(std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
                                          std::string_view default_system_text, std::vector<std::uint32_t>& out) {
  const SpecialTokenIds& special = tokenizer.special_ids();
  if (auto defect = check_roles(messages, special)) return defect;
  if (parse_chat_role(messages.front().role) != ChatRole::system && !default_system_text.empty()) {
    out.push_back(special.system);
    const std::size_t from = out.size();
    tokenizer.encode(default_system_text, out);
    if (const std::size_t at = find_special(out, from, special); at != std::string::npos) {
      return ChatDefect{ChatProblem::special_token_in_content, 0,
                        "the default system text encodes to the special token id " + std::to_string(out[at])};
    }
    out.push_back(special.eot);
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out.push_back(role_token(special, *parse_chat_role(messages[i].role)));
    const std::size_t from = out.size();
    tokenizer.encode(messages[i].content, out);
    if (const std::size_t at = find_special(out, from, special); at != std::string::npos) {
      return ChatDefect{ChatProblem::special_token_in_content, i,
                        message_label(i) + " content encodes to the special token id " + std::to_string(out[at]) +
                            " (it contains a special token string)"};
    }
    out.push_back(special.eot);
  }
  return std::nullopt;
}

std::optional<ChatDefect> append_tokenized_chat_ids(std::span<const TokenizedChatMessage> messages,
                                                    const SpecialTokenIds& special,
                                                    std::span<const std::uint32_t> default_system_ids,
                                                    std::optional<std::uint32_t> vocab_size,
                                                    std::vector<std::uint32_t>& out) {
  if (auto defect = check_roles(messages, special)) return defect;
  const auto check_content = [&](std::span<const std::uint32_t> ids, std::size_t index,
                                 const std::string& what) -> std::optional<ChatDefect> {
    for (const std::uint32_t id : ids) {
      if (vocab_size && id >= *vocab_size) {
        return ChatDefect{ChatProblem::id_out_of_range, index,
                          what + " holds id " + std::to_string(id) + ", not below the vocabulary size " +
                              std::to_string(*vocab_size)};
      }
      if (is_special_token(special, id)) {
        return ChatDefect{ChatProblem::special_token_in_content, index,
                          what + " holds the special token id " + std::to_string(id)};
      }
    }
    return std::nullopt;
  };
  if (parse_chat_role(messages.front().role) != ChatRole::system) {
    if (auto defect = check_content(default_system_ids, 0, "the default system ids")) return defect;
    out.push_back(special.system);
    out.insert(out.end(), default_system_ids.begin(), default_system_ids.end());
    out.push_back(special.eot);
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (auto defect = check_content(messages[i].ids, i, message_label(i))) return defect;
    out.push_back(role_token(special, *parse_chat_role(messages[i].role)));
    out.insert(out.end(), messages[i].ids.begin(), messages[i].ids.end());
    out.push_back(special.eot);
  }
  return std::nullopt;
}

std::vector<std::uint32_t> serialize_chat_to_ids(std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
                                                 std::string_view default_system_text) {
  std::vector<std::uint32_t> ids;
  if (auto defect = append_chat_ids(messages, tokenizer, default_system_text, ids)) {
    throw Error(ErrorKind::format, std::string(to_string(defect->problem)) + ": " + defect->detail);
  }
  return ids;
}

std::vector<std::uint32_t> serialize_chat_to_ids(std::span<const TokenizedChatMessage> messages,
                                                 const SpecialTokenIds& special,
                                                 std::span<const std::uint32_t> default_system_ids) {
  std::vector<std::uint32_t> ids;
  if (auto defect = append_tokenized_chat_ids(messages, special, default_system_ids, std::nullopt, ids)) {
    throw Error(ErrorKind::format, std::string(to_string(defect->problem)) + ": " + defect->detail);
  }
  return ids;
}

std::vector<std::uint8_t> sft_loss_mask_for_ids(std::span<const std::uint32_t> ids, const SpecialTokenIds& special) {
  std::vector<std::uint8_t> mask(ids.size());
  sft_loss_mask_for_ids(ids, special, mask);
  return mask;
}

void sft_loss_mask_for_ids(std::span<const std::uint32_t> ids, const SpecialTokenIds& special,
                           std::span<std::uint8_t> mask) {
  if (mask.size() != ids.size()) {
    throw Error(ErrorKind::usage, "sft_loss_mask_for_ids: mask has " + std::to_string(mask.size()) + " entries for " +
                                      std::to_string(ids.size()) + " ids");
  }
  bool in_assistant = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint32_t id = ids[i];
    if (id == special.assistant) {
      in_assistant = true;
      mask[i] = 0;
    } else if (is_role_token(special, id)) {
      in_assistant = false;
      mask[i] = 0;
    } else if (in_assistant) {
      mask[i] = 1;
      if (id == special.eot) in_assistant = false;
    } else {
      mask[i] = 0;
    }
  }
}

std::vector<std::uint8_t> chat_loss_mask(std::span<const ChatMessage> messages, std::span<const std::uint32_t> ids,
                                         const SpecialTokenIds& special) {
  return loss_mask_of_turns(messages, ids, special);
}

std::vector<std::uint8_t> chat_loss_mask(std::span<const TokenizedChatMessage> messages,
                                         std::span<const std::uint32_t> ids, const SpecialTokenIds& special) {
  return loss_mask_of_turns(messages, ids, special);
}

SftWindow plan_sft_window(std::span<const std::uint32_t> ids, std::size_t S, const SpecialTokenIds& special) {
  return plan_window(ids, S, special);
}

SftWindow plan_sft_window(std::span<const std::uint16_t> ids, std::size_t S, const SpecialTokenIds& special) {
  return plan_window(ids, S, special);
}

std::size_t pack_sft_into(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask,
                          const SpecialTokenIds& special, std::uint32_t pad_id, std::span<std::uint32_t> out_ids,
                          std::span<std::uint8_t> out_mask) {
  if (mask.size() != ids.size()) {
    throw Error(ErrorKind::usage, "pack_sft: mask has " + std::to_string(mask.size()) + " entries for " +
                                      std::to_string(ids.size()) + " ids");
  }
  if (out_mask.size() != out_ids.size()) {
    throw Error(ErrorKind::usage, "pack_sft: output mask has " + std::to_string(out_mask.size()) + " entries for " +
                                      std::to_string(out_ids.size()) + " ids");
  }
  const std::size_t S = out_ids.size();
  const SftWindow window = plan_window(ids, S, special);
  std::size_t k = 0;
  for (std::size_t i = window.head_begin; i < window.head_end; ++i, ++k) {
    out_ids[k] = ids[i];
    out_mask[k] = mask[i] != 0 ? 1 : 0;
  }
  for (std::size_t i = window.tail_begin; i < window.tail_end; ++i, ++k) {
    out_ids[k] = ids[i];
    out_mask[k] = mask[i] != 0 ? 1 : 0;
  }
  const std::size_t kept = k;
  for (; k < S; ++k) {
    out_ids[k] = pad_id;
    out_mask[k] = 0;
  }
  return kept;
}

PackedSft pack_sft_ids_and_mask(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask, std::size_t S,
                                const SpecialTokenIds& special, std::uint32_t pad_id) {
  if (S == 0) throw Error(ErrorKind::usage, "pack_sft_ids_and_mask: S (= T + 1) must be at least 1");
  PackedSft packed;
  packed.ids.resize(S);
  packed.mask.resize(S);
  pack_sft_into(ids, mask, special, pad_id, packed.ids, packed.mask);
  return packed;
}

void collate_sft_row(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask, std::int64_t ignore_index,
                     std::span<std::int64_t> x, std::span<std::int64_t> y, std::span<std::uint8_t> loss_mask) {
  const std::size_t T = x.size();
  if (ids.size() != T + 1 || mask.size() != T + 1 || y.size() != T || loss_mask.size() != T) {
    throw Error(ErrorKind::usage, "collate_sft_row: expected ids and mask of T + 1 = " + std::to_string(T + 1) +
                                      " and outputs of T, got ids " + std::to_string(ids.size()) + ", mask " +
                                      std::to_string(mask.size()) + ", y " + std::to_string(y.size()) + ", loss_mask " +
                                      std::to_string(loss_mask.size()));
  }
  for (std::size_t i = 0; i < T; ++i) {
    const bool on = mask[i + 1] != 0;
    x[i] = ids[i];
    y[i] = on ? static_cast<std::int64_t>(ids[i + 1]) : ignore_index;
    loss_mask[i] = on ? 1 : 0;
  }
}

SftBatch collate_sft_batch(std::span<const PackedSft> packed, std::size_t T, std::int64_t ignore_index) {
  if (T == 0) throw Error(ErrorKind::usage, "collate_sft_batch: T must be at least 1");
  SftBatch batch;
  batch.rows = packed.size();
  batch.T = T;
  batch.x.resize(batch.rows * T);
  batch.y.resize(batch.rows * T);
  batch.loss_mask.resize(batch.rows * T);
  for (std::size_t r = 0; r < packed.size(); ++r) {
    if (packed[r].ids.size() != T + 1 || packed[r].mask.size() != T + 1) {
      throw Error(ErrorKind::usage, "collate_sft_batch: row " + std::to_string(r) + " has " +
                                        std::to_string(packed[r].ids.size()) + " ids and " +
                                        std::to_string(packed[r].mask.size()) +
                                        " mask entries, expected T + 1 = " + std::to_string(T + 1));
    }
    const std::span<std::int64_t> x(batch.x.data() + r * T, T);
    const std::span<std::int64_t> y(batch.y.data() + r * T, T);
    const std::span<std::uint8_t> m(batch.loss_mask.data() + r * T, T);
    collate_sft_row(packed[r].ids, packed[r].mask, ignore_index, x, y, m);
  }
  return batch;
}

}  // namespace tokenfeed
