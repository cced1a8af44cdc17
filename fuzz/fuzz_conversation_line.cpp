// A JSONL conversation line as `tokenfeed prepare` reads it, and the chat-template
// serializer and loss mask behind it: text lines through the bytes tokenizer, pre-tokenized
// lines with fixed special ids. A defect or an Error is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "chat/conversation_jsonl.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  static const std::unique_ptr<Tokenizer> bytes = make_tokenizer("bytes");
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  ParsedConversation parsed;
  if (!parse_conversation_line(line, ConversationInput::text, parsed)) {
    std::vector<std::uint32_t> ids;
    try {
      if (!append_chat_ids(parsed.text, *bytes, kDefaultSystemText, ids)) {
        const std::vector<std::uint8_t> mask = sft_loss_mask_for_ids(ids, bytes->special_ids());
        if (mask.size() != ids.size()) std::abort();
      }
    } catch (const Error&) {
    }
  }
  if (!parse_conversation_line(line, ConversationInput::token_ids, parsed)) {
    SpecialTokenIds special;
    special.system = 1000;
    special.user = 1001;
    special.assistant = 1002;
    special.tool = 1003;
    special.eot = 1004;
    const std::uint32_t default_system[] = {7, 8};
    std::vector<std::uint32_t> ids;
    if (!append_tokenized_chat_ids(parsed.tokenized, special, default_system, 2000, ids)) {
      const std::vector<std::uint8_t> mask = sft_loss_mask_for_ids(ids, special);
      if (mask.size() != ids.size()) std::abort();
    }
  }
  return 0;
}
