// The chat template's special ids (SpecialTokenIds) and the built-in tokenizers (bytes,
// SentencePiece, the native byte-level BPE of a Hugging Face tokenizer.json) behind
// tokenfeed.make_tokenizer.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "bindings.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/special_tokens.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

std::string special_repr(const tokenfeed::SpecialTokenIds& s) {
  return "SpecialTokenIds(system=" + std::to_string(s.system) + ", user=" + std::to_string(s.user) +
         ", assistant=" + std::to_string(s.assistant) + ", eot=" + std::to_string(s.eot) +
         ", tool=" + (s.tool ? std::to_string(*s.tool) : std::string("None")) + ")";
}

}  // namespace

void bind_tokenizers(nb::module_& m) {
  nb::class_<tokenfeed::SpecialTokenIds>(m, "SpecialTokenIds")
      .def(
          "__init__",
          [](tokenfeed::SpecialTokenIds* self, std::uint32_t system, std::uint32_t user, std::uint32_t assistant,
             std::uint32_t eot, std::optional<std::uint32_t> tool) {
            tokenfeed::SpecialTokenIds ids;
            ids.system = system;
            ids.user = user;
            ids.assistant = assistant;
            ids.eot = eot;
            ids.tool = tool;
            tokenfeed::check_special_token_ids(ids, "SpecialTokenIds");
            new (self) tokenfeed::SpecialTokenIds(ids);
          },
          "system"_a, "user"_a, "assistant"_a, "eot"_a, "tool"_a = nb::none())
      .def_ro("system", &tokenfeed::SpecialTokenIds::system)
      .def_ro("user", &tokenfeed::SpecialTokenIds::user)
      .def_ro("assistant", &tokenfeed::SpecialTokenIds::assistant)
      .def_ro("eot", &tokenfeed::SpecialTokenIds::eot)
      .def_ro("tool", &tokenfeed::SpecialTokenIds::tool)
      .def(
          "is_role_token",
          [](const tokenfeed::SpecialTokenIds& s, std::uint32_t id) { return tokenfeed::is_role_token(s, id); }, "id"_a)
      .def(
          "is_special_token",
          [](const tokenfeed::SpecialTokenIds& s, std::uint32_t id) { return tokenfeed::is_special_token(s, id); },
          "id"_a)
      .def("__repr__", &special_repr);

  nb::class_<tokenfeed::Tokenizer>(m, "Tokenizer", "A built-in tokenizer; make one with make_tokenizer().")
      .def(
          "encode",
          [](const tokenfeed::Tokenizer& t, const std::string& text) {
            std::vector<std::uint32_t> ids;
            {
              nb::gil_scoped_release release;
              t.encode(text, ids);
            }
            return numpy_owning(std::move(ids));
          },
          "text"_a, nb::sig("def encode(self, text: str) -> numpy.typing.NDArray[numpy.uint32]"))
      .def(
          "decode", [](const tokenfeed::Tokenizer& t, const U32Array& ids) { return t.decode(span_of(ids)); }, "ids"_a)
      .def_prop_ro("vocab_size", &tokenfeed::Tokenizer::vocab_size)
      .def_prop_ro("special_ids", [](const tokenfeed::Tokenizer& t) { return t.special_ids(); })
      .def_prop_ro("kind", [](const tokenfeed::Tokenizer& t) { return t.describe().kind; });
  m.def(
      "make_tokenizer", [](const std::string& spec) { return tokenfeed::make_tokenizer(spec); }, "spec"_a,
      "A built-in tokenizer: 'bytes' (UTF-8 bytes, special ids 256..260), 'sentencepiece:MODEL' or "
      "'hf-bpe:TOKENIZER_JSON' (a Hugging Face byte-level BPE encoded natively, with the tokenizers "
      "package's ids; a file using a feature it cannot reproduce raises ConfigError naming it).");
  m.def(
      "_hf_bpe_unsupported",
      [](const std::string& tokenizer_json) { return tokenfeed::hf_bpe_unsupported(tokenizer_json); },
      "tokenizer_json"_a,
      "Why the native hf-bpe: tokenizer cannot encode this tokenizer.json exactly ('' when it can).");
}

}  // namespace tokenfeed_python
