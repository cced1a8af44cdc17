// DatatroveIndex: the document ends (NAME.ds.index) of a datatrove tokenized file NAME.ds,
// whose tokens tokenfeed reads in place as one flat token file and whose documents it
// takes from here; and the metadata file NAME.ds.metadata that names its tokenizer and
// token size.
//
// The format is datatrove's TokenizedFile (datatrove/pipeline/tokens/tokenizer.py, which
// DocumentTokenizer and DocumentTokenizerMerger write through):
//
//   NAME.ds            the tokens, little-endian, token_size bytes each ("<H" for 2, "<I"
//                      for 4), documents one after another, no header
//   NAME.ds.index      uint64 little-endian[documents]: each document's end, in tokens
//                      (cumulative: one past its last token), no header
//   NAME.ds.metadata   text, three lines: "TOKENIZER|TOKEN_SIZE" (the tokenizer's name or
//                      path; "Unknown Tokenizer" when none was given), the token count,
//                      and the count humanized ("1.2MT")
//   NAME.ds.loss       optional loss mask (one byte a token): not read
//
// What open() checks, before anything reads the tokens: the index's size (a multiple of
// 8), each end not below the previous one (an equal end is an empty document, invisible in
// the stream) and not past NAME.ds's tokens, the last one at NAME.ds's end (a file with
// tokens has at least one document). parse_datatrove_metadata checks the metadata: the
// "|" and a token size of 2 or 4 on the first line, a token count on the second that
// agrees with NAME.ds's size. Each refusal is Error(format) naming the file and the first
// bad entry.
//
// Thread-safety: immutable after open(); const members may be called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "dataset/token_stream.hpp"
#include "io/mapped_file.hpp"
#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

// What NAME.ds.metadata says.
struct DatatroveMetadata {
  std::string tokenizer;  // as written ("Unknown Tokenizer" when datatrove had none)
  TokenDtype dtype = TokenDtype::uint16;
  std::uint64_t tokens = 0;
};

// Parses the metadata text of `file`. Throws Error(format) naming it.
DatatroveMetadata parse_datatrove_metadata(std::string_view text, const std::string& file);

class DatatroveIndex final : public DocumentStarts {
 public:
  // Maps and validates `index_path` against `tokens`, the token count of its NAME.ds.
  // Throws Error(io) when it cannot be opened, Error(format) as described above.
  static DatatroveIndex open(const std::filesystem::path& index_path, std::uint64_t tokens);

  std::uint64_t documents() const noexcept { return documents_; }
  // Token offset where document `d` ends. REQUIRES: d < documents().
  std::uint64_t document_end(std::uint64_t d) const noexcept;
  // Where document `d` starts: where d - 1 ends (0 for the first).
  std::uint64_t document_start(std::uint64_t d) const noexcept override { return d == 0 ? 0 : document_end(d - 1); }

  std::uint64_t next_start_after(std::uint64_t token) const noexcept override;
  void check_intact() const override { map_.check_intact(); }

 private:
  MappedFile map_;
  std::uint64_t documents_ = 0;
  std::uint64_t tokens_ = 0;
};

}  // namespace tokenfeed
