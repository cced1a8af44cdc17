#include "tokenizer/sentencepiece_model.hpp"

#include <string>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
enum WireType : std::uint64_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Reads the protobuf wire format of one message, field by field, bounds-checked.
class WireReader {
 public:
  WireReader(std::string_view bytes, std::string_view what) : data_(bytes), what_(what) {}

  // Reads the message to its end: calls on_field(wire_type) at each occurrence of `field`
  // (on_field reads the value), and skips every other field.
  template <typename OnField>
  void for_each(std::uint64_t field, OnField&& on_field) {
    while (pos_ != data_.size()) {
      const std::uint64_t tag = varint();
      const std::uint64_t number = tag >> 3, wire_type = tag & 7;
      if (number == 0) fail("a field number 0");
      if (number == field) {
        on_field(wire_type);
      } else {
        skip(wire_type);
      }
    }
  }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) fail("a truncated varint");
      const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
      value |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return value;
    }
    fail("a varint longer than 10 bytes");
  }

  std::string_view length_delimited() {
    const std::uint64_t length = varint();
    if (length > data_.size() - pos_) fail("a length past the end of the data");
    const std::string_view field = data_.substr(pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return field;
  }

  // Skips a field's value of the given wire type.
  void skip(std::uint64_t wire_type) {
    switch (wire_type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        advance(8);
        return;
      case kLengthDelimited:
        length_delimited();
        return;
      case kFixed32:
        advance(4);
        return;
      default:
        fail("wire type " + std::to_string(wire_type));
    }
  }

  [[noreturn]] void fail(const std::string& what_found) const {
    throw Error(ErrorKind::format, std::string(what_) + ": not a SentencePiece model (" + what_found +
                                       " at byte " + std::to_string(pos_) + " of its protobuf data)");
  }

 private:
  void advance(std::size_t n) {
    if (n > data_.size() - pos_) fail("a value past the end of the data");
    pos_ += n;
  }

  std::string_view data_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

constexpr std::uint64_t kModelPiecesField = 1;  // ModelProto.pieces
constexpr std::uint64_t kPieceTypeField = 3;    // ModelProto.SentencePiece.type

SentencePieceType piece_type(std::string_view piece, std::string_view what) {
  WireReader reader(piece, what);
  auto type = SentencePieceType::normal;  // the field's default
  reader.for_each(kPieceTypeField, [&](std::uint64_t wire_type) {
    if (wire_type != kVarint) reader.fail("a piece type that is not a varint");
    const std::uint64_t value = reader.varint();
    if (value < 1 || value > 6) reader.fail("an unknown piece type " + std::to_string(value));
    type = static_cast<SentencePieceType>(value);
  });
  return type;
}

}  // namespace

std::vector<SentencePieceType> read_sentencepiece_piece_types(std::string_view serialized_model,
                                                              std::string_view what) {
  std::vector<SentencePieceType> types;
  WireReader reader(serialized_model, what);
  reader.for_each(kModelPiecesField, [&](std::uint64_t wire_type) {
    if (wire_type != kLengthDelimited) reader.fail("a piece that is not a message");
    types.push_back(piece_type(reader.length_delimited(), what));
  });
  return types;
}

}  // namespace tokenfeed
