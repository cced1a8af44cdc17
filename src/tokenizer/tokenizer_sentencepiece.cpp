// The "sentencepiece:MODEL" tokenizer, through the SentencePiece C++ library.
#include <sentencepiece_processor.h>

#include <array>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tokenizer/sentencepiece_model.hpp"
#include "util/sha256.hpp"
#include "tokenizer/special_strings.hpp"
#include "io/regular_file.hpp"
#include "util/third_party.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {
namespace {

// Models hold up to a few million pieces; this is far above any real one.
constexpr std::size_t kMaxModelBytes = std::size_t{1} << 30;

// The piece types read from the model file, checked against what the API says of each id, so
// that a model the reader misunderstands is refused rather than misread.
std::vector<SentencePieceType> checked_piece_types(const sentencepiece::SentencePieceProcessor& sp,
                                                   std::string_view model_bytes, const std::string& what) {
  std::vector<SentencePieceType> types = read_sentencepiece_piece_types(model_bytes, what);
  if (types.size() != static_cast<std::size_t>(sp.GetPieceSize())) {
    throw Error(ErrorKind::format, what + ": " + std::to_string(types.size()) + " pieces read from the file, but " +
                                       std::to_string(sp.GetPieceSize()) + " loaded by SentencePiece");
  }
  for (std::size_t i = 0; i < types.size(); ++i) {
    const int id = static_cast<int>(i);
    const SentencePieceType t = types[i];
    if (sp.IsControl(id) != (t == SentencePieceType::control) ||
        sp.IsUnknown(id) != (t == SentencePieceType::unknown) || sp.IsUnused(id) != (t == SentencePieceType::unused) ||
        sp.IsByte(id) != (t == SentencePieceType::byte)) {
      throw Error(ErrorKind::format, what + ": the type of piece " + std::to_string(i) + " read from the file (" +
                                         std::to_string(static_cast<int>(t)) + ") disagrees with SentencePiece's");
    }
  }
  return types;
}

// Takes each special token from the model when the model defines it as a special symbol
// (user-defined or control), else appends it after the vocabulary. An ordinary piece with the
// same text does not qualify: it is what that text encodes to wherever it occurs, so taking it
// would make the text a turn marker in any content. Unknown, byte and unused pieces do not
// qualify either.
ResolvedSpecials model_specials(const sentencepiece::SentencePieceProcessor& sp,
                                const std::vector<SentencePieceType>& types, const SpecialTokenStrings& strings) {
  return resolve_specials(strings, static_cast<std::uint32_t>(sp.GetPieceSize()),
                          [&](const std::string& text) -> std::optional<std::uint32_t> {
                            const int id = sp.PieceToId(text);
                            const auto type =
                                id >= 0 ? types[static_cast<std::size_t>(id)] : SentencePieceType::unknown;
                            if (id >= 0 && sp.IdToPiece(id) == text &&
                                (type == SentencePieceType::control || type == SentencePieceType::user_defined)) {
                              return static_cast<std::uint32_t>(id);
                            }
                            return std::nullopt;
                          });
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, const SpecialTokenStrings& strings,
                         const ResolvedSpecials& specials, std::filesystem::path model, std::string model_sha256)
      : Tokenizer(strings, specials.ids, specials.vocab_size),
        sp_(std::move(sp)),
        sources_(specials.sources),
        base_vocab_size_(static_cast<std::uint32_t>(sp_->GetPieceSize())),
        model_(std::move(model)),
        model_sha256_(std::move(model_sha256)) {}

  TokenizerDescription describe() const override {
    TokenizerDescription d;
    d.kind = "sentencepiece";
    d.model_path = model_;
    d.model_sha256 = model_sha256_;
    d.base_vocab_size = base_vocab_size_;
    d.vocab_size = vocab_size();
    d.special_tokens = special_token_infos(sources_);
    return d;
  }

  std::optional<std::uint32_t> model_eos_id() const noexcept override { return valid_id(sp_->eos_id()); }
  std::optional<std::uint32_t> model_bos_id() const noexcept override { return valid_id(sp_->bos_id()); }

 protected:
  std::optional<std::uint32_t> do_piece_id(std::string_view piece) const override {
    // PieceToId answers the unknown id for a text that is no piece, unless it is the unknown piece's.
    const int id = sp_->PieceToId(piece);
    if (id < 0 || (sp_->IsUnknown(id) && sp_->IdToPiece(id) != piece)) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }

  void do_encode(std::string_view text, std::vector<std::uint32_t>& out) const override {
    std::vector<int> ids;
    const auto status = call_third_party(ErrorKind::format, "SentencePiece cannot encode the text",
                                         [&] { return sp_->Encode(text, &ids); });
    if (!status.ok()) {
      throw Error(ErrorKind::format, "SentencePiece cannot encode the text: " + std::string(status.message()));
    }
    out.reserve(out.size() + ids.size());
    for (const int id : ids) out.push_back(static_cast<std::uint32_t>(id));
  }

  std::string do_decode(std::span<const std::uint32_t> ids) const override {
    std::string text;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      std::string piece;
      const auto status = call_third_party(ErrorKind::format, "SentencePiece cannot decode the ids",
                                           [&] { return sp_->Decode(run, &piece); });
      if (!status.ok()) {
        throw Error(ErrorKind::format, "SentencePiece cannot decode the ids: " + std::string(status.message()));
      }
      text += piece;
      run.clear();
    };
    for (const std::uint32_t id : ids) {
      if (const std::string* special = special_string(id)) {
        flush();
        text += *special;
      } else if (id < base_vocab_size_) {
        run.push_back(static_cast<int>(id));
      } else {
        throw_undecodable_id("sentencepiece tokenizer", id, vocab_size());
      }
    }
    flush();
    return text;
  }

 private:
  std::optional<std::uint32_t> valid_id(int id) const noexcept {
    if (id < 0 || id >= sp_->GetPieceSize()) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::array<SpecialTokenSource, 5> sources_;
  std::uint32_t base_vocab_size_;
  std::filesystem::path model_;
  std::string model_sha256_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::filesystem::path& model,
                                                        const SpecialTokenStrings& strings) {
  check_special_token_strings(strings, "sentencepiece tokenizer");
  const std::string bytes = read_regular_file(model, "SentencePiece model", kMaxModelBytes);

  // Loading builds SentencePiece's tries, which throw on some malformed models.
  return call_third_party(ErrorKind::format, "cannot load SentencePiece model '" + model.string() + "'", [&] {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      throw Error(ErrorKind::io,
                  "cannot load SentencePiece model '" + model.string() + "': " + std::string(status.message()));
    }
    if (sp->GetPieceSize() <= 0 ||
        static_cast<std::uint64_t>(sp->GetPieceSize()) + 5 > std::numeric_limits<std::uint32_t>::max()) {
      throw Error(ErrorKind::format, "SentencePiece model '" + model.string() + "' has an unusable vocabulary size " +
                                         std::to_string(sp->GetPieceSize()));
    }
    const std::vector<SentencePieceType> types =
        checked_piece_types(*sp, bytes, "SentencePiece model '" + model.string() + "'");
    const ResolvedSpecials specials = model_specials(*sp, types, strings);
    Sha256 sha;
    sha.update(bytes);
    return std::unique_ptr<Tokenizer>(
        std::make_unique<SentencePieceTokenizer>(std::move(sp), strings, specials, model, Sha256::hex(sha.finish())));
  });
}

}  // namespace tokenfeed
