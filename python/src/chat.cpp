// The chat template's functions behind tokenfeed.serialize_chat, serialize_chat_text,
// sft_loss_mask_for_ids, plan_sft_window, pack_sft_ids_and_mask and collate_sft_batch
// (python/tokenfeed/__init__.py checks and converts their arguments first).
//
// serialize_chat_text goes through the conversation parser that `tokenfeed prepare` uses
// (src/chat/conversation_jsonl.hpp), so that Python accepts and rejects exactly what the
// command does: one JSON object {"messages": [...]} in, the template's ids and loss mask
// out. A conversation the template cannot serialize raises ConversationError.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "chat/conversation_jsonl.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

std::vector<std::uint32_t> to_vector(const U32Array& a) {
  const auto s = span_of(a);
  return {s.begin(), s.end()};
}

// (ids, mask): the mask is chat_loss_mask's, 0 over the turns whose `trained` is false.
nb::tuple serialize_tokenized(const std::vector<std::string>& roles, const std::vector<U32Array>& contents,
                              const std::vector<bool>& trained, const tokenfeed::SpecialTokenIds& special,
                              const U32Array& default_system_ids, std::optional<std::uint32_t> vocab_size) {
  if (roles.size() != contents.size() || roles.size() != trained.size()) {
    usage_error("serialize_chat: roles, contents and weights differ in length");
  }
  std::vector<tokenfeed::TokenizedChatMessage> messages(roles.size());
  for (std::size_t i = 0; i < roles.size(); ++i) {
    messages[i].role = roles[i];
    messages[i].ids = to_vector(contents[i]);
    messages[i].trained = trained[i];
  }
  std::vector<std::uint32_t> out;
  const auto defect =
      tokenfeed::append_tokenized_chat_ids(messages, special, span_of(default_system_ids), vocab_size, out);
  if (defect) conversation_error(defect->detail);
  std::vector<std::uint8_t> mask = tokenfeed::chat_loss_mask(messages, out, special);
  return nb::make_tuple(numpy_owning(std::move(out)), numpy_owning(std::move(mask)));
}

nb::tuple pack_ids_and_mask(const U32Array& ids, const U8Array& mask, std::size_t S,
                            const tokenfeed::SpecialTokenIds& special, std::uint32_t pad_id) {
  tokenfeed::PackedSft packed = tokenfeed::pack_sft_ids_and_mask(span_of(ids), span_of(mask), S, special, pad_id);
  return nb::make_tuple(numpy_owning(std::move(packed.ids)), numpy_owning(std::move(packed.mask)));
}

nb::tuple collate_batch(const std::vector<std::tuple<U32Array, U8Array>>& rows, std::size_t T,
                        std::int64_t ignore_index) {
  std::vector<tokenfeed::PackedSft> packed(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto ids = span_of(std::get<0>(rows[i]));
    const auto mask = span_of(std::get<1>(rows[i]));
    packed[i].ids.assign(ids.begin(), ids.end());
    packed[i].mask.assign(mask.begin(), mask.end());
  }
  tokenfeed::SftBatch b = tokenfeed::collate_sft_batch(packed, T, ignore_index);
  return nb::make_tuple(numpy_owning(std::move(b.x), {b.rows, b.T}), numpy_owning(std::move(b.y), {b.rows, b.T}),
                        numpy_owning(std::move(b.loss_mask), {b.rows, b.T}));
}

// One conversation as a JSON object, through the same parser, serializer and mask as a line
// of `tokenfeed prepare`'s input. Returns (ids uint32, mask uint8).
nb::tuple serialize_json_chat(const std::string& line, const tokenfeed::Tokenizer& tokenizer,
                              const std::string& default_system_text) {
  tokenfeed::ParsedConversation conversation;
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> mask;
  {
    nb::gil_scoped_release release;
    if (auto defect = tokenfeed::parse_conversation_line(line, tokenfeed::ConversationInput::text, conversation)) {
      nb::gil_scoped_acquire acquire;
      conversation_error(defect->detail);
    }
    if (auto defect = tokenfeed::append_chat_ids(conversation.text, tokenizer, default_system_text, ids)) {
      nb::gil_scoped_acquire acquire;
      conversation_error(defect->detail);
    }
    mask = tokenfeed::chat_loss_mask(conversation.text, ids, tokenizer.special_ids());
  }
  return nb::make_tuple(numpy_owning(std::move(ids)), numpy_owning(std::move(mask)));
}

}  // namespace

void bind_chat(nb::module_& m) {
  m.def("_serialize_tokenized_chat", &serialize_tokenized, "roles"_a, "contents"_a, "trained"_a, "special"_a,
        "default_system_ids"_a, "vocab_size"_a.none());
  m.def(
      "_sft_loss_mask_for_ids",
      [](const U32Array& ids, const tokenfeed::SpecialTokenIds& special) {
        return numpy_owning(tokenfeed::sft_loss_mask_for_ids(span_of(ids), special));
      },
      "ids"_a, "special"_a,
      nb::sig("def _sft_loss_mask_for_ids(ids: numpy.typing.NDArray[numpy.uint32], special: SpecialTokenIds) -> "
              "numpy.typing.NDArray[numpy.uint8]"));
  m.def(
      "_plan_sft_window",
      [](const U32Array& ids, std::size_t S, const tokenfeed::SpecialTokenIds& special) {
        const tokenfeed::SftWindow w = tokenfeed::plan_sft_window(span_of(ids), S, special);
        return std::make_tuple(w.head_begin, w.head_end, w.tail_begin, w.tail_end);
      },
      "ids"_a, "S"_a, "special"_a);
  m.def("_pack_sft_ids_and_mask", &pack_ids_and_mask, "ids"_a, "mask"_a, "S"_a, "special"_a, "pad_id"_a);
  m.def("_collate_sft_batch", &collate_batch, "rows"_a, "T"_a, "ignore_index"_a);
  m.def("_serialize_json_chat", &serialize_json_chat, "conversation"_a, "tokenizer"_a, "default_system_text"_a);
}

}  // namespace tokenfeed_python
