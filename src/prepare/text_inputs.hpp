// The input of prepare-text: the files a corpus is read from, and the records (documents,
// empty documents, bad lines) each gives, in file order then line or row order.
//
// Formats, by file name (a .gz or .zst suffix is decompressed, whatever the format):
//   jsonl    *.jsonl, *.json, *.ndjson: one JSON object a line, the document its text field
//            (a string; "" is an empty document; null, another type, a missing field, a line
//            that is no JSON object are bad lines). Blank lines are counted and ignored.
//   parquet  *.parquet: the text column, read by row group through a ParquetTextReader the
//            caller supplies (the Python package, with pyarrow).
//   text     anything else: plain UTF-8 text, one document per file, per line, or per run of
//            lines separated by one or more empty lines (DocPer). Lines lose their line
//            ending ("\n" or "\r\n") only; a document of several lines keeps "\n" between
//            them; a UTF-8 byte order mark at the start of a file is dropped.
//
// A record's position is the number of units (lines, or rows for parquet, or 1 for a whole
// file) of its file consumed through it, so that a resumed run can skip exactly what an
// earlier run finished.
//
// Thread-safety: a TextFileReader is used by one thread; the free functions have no state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/prepare_text.hpp"

namespace tokenfeed {

// One record of the input, as read (before it is parsed).
struct TextRecord {
  enum class Kind : std::uint8_t {
    json_line,  // a JSONL line, to be parsed (parse_text_record)
    text,       // a document's text (plain text, or parquet)
    empty,      // an empty document
    blank,      // a blank JSONL line (whitespace only): no record at all, counted
    bad,        // a bad line: reason and detail say why
  };
  Kind kind = Kind::text;
  std::string text;               // json_line: the line; text: the document; bad: the raw bytes, if any
  std::string reason, detail;     // bad
  std::uint32_t file = 0;         // index into the input files
  std::uint64_t line = 0;         // first line (or row) of the record in its file, from 1
  std::uint64_t units_after = 0;  // units of the file consumed through this record
  // empty and blank: the consecutive empty lines the record stands for (a run of them is
  // read as one record, so that it costs what reading its bytes costs); 1 otherwise.
  std::uint64_t repeat = 1;
};

// The most empty lines one record stands for: a run of a billion still gives records often
// enough for the progress line and a resumable position to move.
inline constexpr std::uint64_t kMaxEmptyLineRun = std::uint64_t{1} << 16;

// Reasons a record is bad, as counted in the summary.
inline constexpr std::string_view kTextReasonInvalidJson = "invalid_json";    // not JSON (or not UTF-8 JSON)
inline constexpr std::string_view kTextReasonNotObject = "not_an_object";     // JSON, but not an object
inline constexpr std::string_view kTextReasonMissingField = "missing_field";  // no text field
inline constexpr std::string_view kTextReasonNotString = "not_a_string";      // null or another type
inline constexpr std::string_view kTextReasonInvalidUtf8 = "invalid_utf8";    // plain text that is not UTF-8
inline constexpr std::string_view kTextReasonTooLong = "document_too_long";   // over max_document_bytes
inline constexpr std::string_view kTextReasonTokenizer = "tokenizer_error";   // the tokenizer refused it

// The longest JSONL line read (a longer one is document_too_long, never held in memory): a
// text of max_document_bytes written with JSON escapes takes at most 6 bytes a byte
// ("\u0001"), and the object's other fields get 1 MiB. Saturates at SIZE_MAX.
inline constexpr std::size_t kJsonEscapeFactor = 6;
inline constexpr std::size_t kJsonOtherFieldsBytes = std::size_t{1} << 20;
std::size_t max_jsonl_line_bytes(std::size_t max_document_bytes) noexcept;

// Turns a json_line record into a text, empty or bad one (a decoded text over
// options.max_document_bytes is document_too_long), and checks a text record's UTF-8.
// Cheap enough for the parallel stage; keeps only options.text_field of the object.
void parse_text_record(TextRecord& record, const TextReadOptions& options);

// Reads the records of one input file, from a given unit on.
class TextFileReader {
 public:
  // Opens input `index` of `inputs` and skips its first `skip_units` units. Throws Error(io)
  // when it cannot be read, Error(config) for parquet without an opener.
  TextFileReader(const TextInputFile& input, std::uint32_t index, const TextReadOptions& options,
                 std::uint64_t skip_units);
  ~TextFileReader();
  TextFileReader(const TextFileReader&) = delete;
  TextFileReader& operator=(const TextFileReader&) = delete;

  // The next record, false at the end of the file. Throws Error(format) for corrupt
  // compressed data, Error(io) for read errors.
  bool next(TextRecord& record);
  // Raw bytes of the file consumed so far (compressed bytes for .gz and .zst).
  std::uint64_t bytes_read() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
