// MegatronIndex: the index (NAME.idx) of a Megatron-LM indexed dataset, opened
// memory-mapped and validated against its data file NAME.bin, whose tokens tokenfeed reads
// in place as one flat token file and whose documents it takes from here.
//
// The format is megatron-core's MMIDIDX (megatron/core/datasets/indexed_dataset.py:
// _IndexWriter writes it, _IndexReader reads it), all little-endian:
//
//   offset 0   9 bytes    magic "MMIDIDX\0\0"
//          9   uint64     version, 1
//         17   uint8      dtype code of NAME.bin's elements (DType: 1 uint8, 2 int8, 3 int16,
//                         4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
//         18   uint64     S, the sequence count
//         26   uint64     D, the document-index count: len(document_indices), which is the
//                         number of documents + 1
//         34   int32[S]   sequence lengths, in elements
//              int64[S]   sequence pointers: byte offsets of the sequences into NAME.bin
//              int64[D]   document indices: the sequence each document starts at, the first
//                         0, the last S (one past the last document)
//
// A multimodal index (int8[S] sequence modes after the document indices) is refused: its
// size does not match S and D.
//
// What open() checks, in this order, before anything else reads the files: the header
// (magic, version, a known dtype code, one tokenfeed reads: uint16 or int32), the index's size
// (exactly 34 + 12 S + 8 D bytes), NAME.bin's size (a multiple of the element size), every
// sequence length (not negative) and pointer (each where the previous sequence ends, as
// _IndexWriter lays them out, the first 0, the last sequence ending at NAME.bin's end), and
// the document indices (D >= 1, the first 0, non-decreasing, the last S). Each refusal is
// Error(format) naming the file and the first bad entry. A document index that repeats the
// previous one is an empty document, which Megatron's builder writes for an empty input
// document; it starts where the next one does and is invisible in the token stream.
//
// Thread-safety: immutable after open(); const members may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "dataset/token_stream.hpp"
#include "io/mapped_file.hpp"
#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

// The fixed part of an MMIDIDX index, read and checked by parse_megatron_header.
struct MegatronHeader {
  static constexpr std::size_t kSize = 34;
  std::uint8_t dtype_code = 0;
  std::uint64_t sequences = 0;         // S
  std::uint64_t document_entries = 0;  // D = documents + 1
};

// Reads the header at the start of `idx` and checks it against the index's size: magic,
// version 1, a dtype code Megatron defines, 34 + 12 S + 8 D bytes in all. Throws
// Error(format) naming `file`. Does not look at the arrays.
MegatronHeader parse_megatron_header(std::span<const std::byte> idx, const std::string& file);

// Megatron's name of a dtype code ("int32"), or "unknown".
const char* megatron_dtype_name(std::uint8_t code) noexcept;
// The element size in bytes of a known dtype code (0 for an unknown one).
std::size_t megatron_dtype_size(std::uint8_t code) noexcept;
// The token dtype tokenfeed reads a code's .bin as: uint16 (code 8) and int32 (code 4, what
// Megatron's DType.optimal_dtype picks for vocabularies of 65500 ids and more); nullopt for
// the others. uint8, int8 and int16 tokens are not read: no Megatron writer picks them for
// tokens, and each would be a dtype of its own down every reader; int64 and the floats are
// not token ids a 32-bit batch id can hold faithfully.
std::optional<TokenDtype> megatron_token_dtype(std::uint8_t code) noexcept;

class MegatronIndex final : public DocumentStarts {
 public:
  // Maps and validates `idx_path` against `bin`, its data file (mapped by the caller).
  // Throws Error(io) when it cannot be opened, Error(format) as described above.
  static MegatronIndex open(const std::filesystem::path& idx_path, const MappedFile& bin);

  TokenDtype dtype() const noexcept { return dtype_; }
  std::uint64_t sequences() const noexcept { return header_.sequences; }
  std::uint64_t documents() const noexcept { return header_.document_entries - 1; }
  std::uint64_t tokens() const noexcept { return tokens_; }
  const std::filesystem::path& path() const noexcept { return map_.path(); }

  // Token offset in NAME.bin where document `d` starts; d == documents() gives tokens().
  // REQUIRES: d <= documents().
  std::uint64_t document_start(std::uint64_t d) const noexcept override;

  std::uint64_t next_start_after(std::uint64_t token) const noexcept override;
  void check_intact() const override { map_.check_intact(); }

 private:
  MappedFile map_;
  MegatronHeader header_;
  TokenDtype dtype_ = TokenDtype::uint16;
  std::uint64_t tokens_ = 0;

  std::int64_t pointer(std::uint64_t s) const noexcept;
  std::int64_t document_index(std::uint64_t d) const noexcept;
  // The checks of the arrays, each throwing Error(format) naming the first bad entry.
  void check_sequences(const MappedFile& bin) const;
  void check_documents() const;
};

}  // namespace tokenfeed
