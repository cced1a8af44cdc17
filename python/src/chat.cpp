// Bindings of the conversation parser that `tokenfeed prepare` uses, so that Python's
// serialize_chat_text accepts and rejects exactly what the command does: one JSON object
// {"messages": [...]} in, the template's ids and loss mask out.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "chat/conversation_jsonl.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// tokenfeed.ConversationError, registered by module.cpp before bind_chat runs; the module
// keeps it alive for the process.
PyObject* g_conversation_error = nullptr;

[[noreturn]] void conversation_error(const std::string& message) {
  PyErr_SetString(g_conversation_error, message.c_str());
  throw nb::python_error();
}

template <class T>
nb::object owning_array(std::vector<T>&& values) {
  auto* heap = new std::vector<T>(std::move(values));
  if (heap->empty()) heap->reserve(1);  // a non-null data pointer even for zero size
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t shape[1] = {heap->size()};
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), 1, shape, owner));
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
  return nb::make_tuple(owning_array(std::move(ids)), owning_array(std::move(mask)));
}

}  // namespace

void bind_chat(nb::module_& m) {
  g_conversation_error = m.attr("ConversationError").ptr();
  m.def("_serialize_json_chat", &serialize_json_chat, "conversation"_a, "tokenizer"_a, "default_system_text"_a);
}
