// The type of each piece of a SentencePiece model (normal, unknown, control, user-defined,
// unused, byte), read from the model file itself.
//
// Why: the SentencePiece C++ API (0.1.97, Debian bookworm's) answers IsControl, IsUnknown,
// IsUnused and IsByte but has no IsUserDefined, and the generated ModelProto header it would
// take to read the type is not installed. The model file is a serialized protobuf ModelProto
// (sentencepiece_model.proto), stable since SentencePiece's first release:
//   ModelProto     { repeated SentencePiece pieces = 1; ... (other fields skipped) }
//   SentencePiece  { string piece = 1; float score = 2; Type type = 3 [default = NORMAL]; }
// so this reads field 1 and, in each, field 3, with the protobuf wire format and nothing
// else. The tokenizer cross-checks the result against the API (piece count, and IsControl /
// IsUnknown / IsUnused / IsByte for every id), so a model this misreads is refused.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tokenfeed {

// The values of ModelProto.SentencePiece.Type.
enum class SentencePieceType : std::uint8_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// The type of every piece, in id order. Throws Error(format) naming `what` when the bytes are
// not a well-formed ModelProto (truncated, bad wire types, an unknown type value).
std::vector<SentencePieceType> read_sentencepiece_piece_types(std::string_view serialized_model,
                                                              std::string_view what);

}  // namespace tokenfeed
