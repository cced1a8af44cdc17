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

namespace tokenfeed {

enum class TextInputFormat : std::uint8_t { jsonl, parquet, text };
enum class DocPer : std::uint8_t { file, line, blank_line };

const char* to_string(TextInputFormat format) noexcept;
const char* to_string(DocPer doc_per) noexcept;
// "file", "line", "blank-line". Throws Error(config) naming --doc-per for anything else.
DocPer parse_doc_per(std::string_view text);

struct TextInputFile {
  std::filesystem::path path;
  TextInputFormat format = TextInputFormat::text;
  std::uint64_t bytes = 0;    // size on disk
  std::int64_t mtime_ns = 0;  // modification time, for the resume manifest
};

// The format of `path` by its name (see above).
TextInputFormat text_input_format(const std::filesystem::path& path);

// Every file each pattern names: a path, or a glob (*, ?, [...]) matched by glob(3). All
// matches of all patterns, sorted by path (bytewise), each once. Throws Error(config) for a
// pattern that matches nothing or an empty list, Error(io) for a match that is not a regular
// file (a directory, a FIFO).
std::vector<TextInputFile> expand_text_inputs(const std::vector<std::string>& patterns);

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
};

// Reasons a record is bad, as counted in the summary.
inline constexpr std::string_view kTextReasonInvalidJson = "invalid_json";    // not JSON (or not UTF-8 JSON)
inline constexpr std::string_view kTextReasonNotObject = "not_an_object";     // JSON, but not an object
inline constexpr std::string_view kTextReasonMissingField = "missing_field";  // no text field
inline constexpr std::string_view kTextReasonNotString = "not_a_string";      // null or another type
inline constexpr std::string_view kTextReasonInvalidUtf8 = "invalid_utf8";    // plain text that is not UTF-8
inline constexpr std::string_view kTextReasonTooLong = "document_too_long";   // over max_document_bytes
inline constexpr std::string_view kTextReasonTokenizer = "tokenizer_error";   // the tokenizer refused it

// Turns a json_line record into a text, empty or bad one, and checks a text record's UTF-8.
// Cheap enough for the parallel stage; keeps only `field` of the object.
void parse_text_record(TextRecord& record, const std::string& field);

// Reads the rows of a parquet file's text column. Supplied by the caller (the Python package).
class ParquetTextReader {
 public:
  virtual ~ParquetTextReader() = default;
  // The next rows' values: a string, or nullopt for null or a value that is not a string.
  // Returns false at the end of the file.
  virtual bool next_batch(std::vector<std::optional<std::string>>& rows) = 0;
  // Bytes of the file read so far (compressed column chunks), for progress.
  virtual std::uint64_t bytes_read() const = 0;
};
// Opens `path` at row `first_row` (0-based). Throws Error(format) naming the file when it has
// no such column or the column holds no strings.
using ParquetOpener = std::function<std::unique_ptr<ParquetTextReader>(
    const std::filesystem::path& path, const std::string& column, std::uint64_t first_row)>;

struct TextReadOptions {
  std::string text_field = "text";
  DocPer doc_per = DocPer::file;
  std::size_t max_document_bytes = std::size_t{64} << 20;  // a longer line or document is bad
  ParquetOpener open_parquet;                              // required for parquet input
};

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
