#include "prepare/text_inputs.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <cstring>
#include <utility>

#include "io/line_reader.hpp"
#include "util/bounded_json.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// Length of the valid UTF-8 prefix of `s` (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
std::size_t valid_utf8_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII runs, eight bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ULL) != 0) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return n;
}

// The directory glob(3) could not read, and why: its error callback takes no user data.
struct GlobFailure {
  std::string path;
  int error = 0;
};
thread_local GlobFailure t_glob_failure;

int note_glob_failure(const char* path, int error) {
  if (t_glob_failure.error == 0) t_glob_failure = {path, error};
  return 0;  // GLOB_ERR stops the expansion
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// `s` with each byte that is not part of valid UTF-8 written as \xNN: a detail quotes the
// record (the JSON parser's "last read: ..."), and the message must stay text for a terminal
// and for Python, whose exceptions hold str.
std::string printable_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const std::size_t valid = valid_utf8_prefix(s);
    out.append(s.substr(0, valid));
    if (valid == s.size()) break;
    static constexpr char kHex[] = "0123456789abcdef";
    const auto byte = static_cast<unsigned char>(s[valid]);
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 0xF];
    s.remove_prefix(valid + 1);
  }
  return out;
}

void make_bad(TextRecord& r, std::string_view reason, const std::string& detail) {
  r.kind = TextRecord::Kind::bad;
  r.reason = reason;
  r.detail = printable_utf8(detail);
}

}  // namespace

const char* to_string(TextInputFormat format) noexcept {
  switch (format) {
    case TextInputFormat::jsonl:
      return "jsonl";
    case TextInputFormat::parquet:
      return "parquet";
    case TextInputFormat::text:
      return "text";
  }
  return "?";
}

const char* to_string(DocPer doc_per) noexcept {
  switch (doc_per) {
    case DocPer::file:
      return "file";
    case DocPer::line:
      return "line";
    case DocPer::blank_line:
      return "blank-line";
  }
  return "?";
}

DocPer parse_doc_per(std::string_view text) {
  if (text == "file") return DocPer::file;
  if (text == "line") return DocPer::line;
  if (text == "blank-line") return DocPer::blank_line;
  throw Error(ErrorKind::config, "--doc-per must be file, line or blank-line, not '" + std::string(text) + "'");
}

TextInputFormat text_input_format(const fs::path& path) {
  std::string name = path.filename().string();
  for (const char* compressed : {".gz", ".zst"}) {
    if (ends_with(name, compressed)) name.resize(name.size() - std::strlen(compressed));
  }
  if (ends_with(name, ".parquet")) return TextInputFormat::parquet;
  if (ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".ndjson"))
    return TextInputFormat::jsonl;
  return TextInputFormat::text;
}

std::vector<TextInputFile> expand_text_inputs(const std::vector<std::string>& patterns) {
  if (patterns.empty()) throw Error(ErrorKind::config, "no input: give one or more files or globs");
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    glob_t matches{};
    t_glob_failure = {};
    const int rc = ::glob(pattern.c_str(), GLOB_NOSORT | GLOB_ERR, note_glob_failure, &matches);
    // One rule, whether the pattern's directory exists or not: a missing input is a file
    // that cannot be read (ErrorKind::io, the command's exit status 3).
    if (rc == GLOB_NOMATCH || (rc == 0 && matches.gl_pathc == 0) ||
        (rc == GLOB_ABORTED && (t_glob_failure.error == ENOENT || t_glob_failure.error == ENOTDIR))) {
      ::globfree(&matches);
      throw Error(ErrorKind::io, "input '" + pattern + "' matches no file");
    }
    if (rc != 0) {
      ::globfree(&matches);
      throw Error(
          ErrorKind::io,
          "cannot expand input '" + pattern + "': directory '" + t_glob_failure.path + "' cannot be read" +
              (t_glob_failure.error != 0 ? ": " + std::string(std::strerror(t_glob_failure.error)) : std::string()));
    }
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::vector<TextInputFile> inputs;
  inputs.reserve(paths.size());
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      throw Error(ErrorKind::io, "cannot read input '" + p + "': " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      throw Error(ErrorKind::io, "input '" + p + "' is not a regular file" +
                                     (S_ISDIR(st.st_mode) ? " (a directory: give a glob such as DIR/*.jsonl)" : ""));
    }
    TextInputFile f;
    f.path = p;
    f.format = text_input_format(f.path);
    f.bytes = static_cast<std::uint64_t>(st.st_size);
    f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    inputs.push_back(std::move(f));
  }
  if (inputs.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw Error(ErrorKind::config, "too many input files (" + std::to_string(inputs.size()) + ")");
  }
  return inputs;
}

std::size_t max_jsonl_line_bytes(std::size_t max_document_bytes) noexcept {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  if (max_document_bytes > (kMax - kJsonOtherFieldsBytes) / kJsonEscapeFactor) return kMax;
  return max_document_bytes * kJsonEscapeFactor + kJsonOtherFieldsBytes;
}

void parse_text_record(TextRecord& r, const TextReadOptions& options) {
  const std::string& field = options.text_field;
  if (r.kind == TextRecord::Kind::text) {
    if (r.text.empty()) {
      r.kind = TextRecord::Kind::empty;
      return;
    }
    const std::size_t valid = valid_utf8_prefix(r.text);
    if (valid != r.text.size()) {
      make_bad(r, kTextReasonInvalidUtf8, "invalid UTF-8 at byte " + std::to_string(valid) + " of the document");
    }
    return;
  }
  if (r.kind != TextRecord::Kind::json_line) return;
  if (is_blank(r.text)) {
    r.kind = TextRecord::Kind::blank;
    return;
  }
  nlohmann::json doc;
  try {
    doc = parse_bounded_json(r.text,
                             [&field](std::size_t depth, std::string_view key) { return depth == 1 && key == field; });
  } catch (const JsonParseError& e) {
    make_bad(r, kTextReasonInvalidJson, e.what());
    return;
  }
  if (!doc.is_object()) {
    make_bad(r, kTextReasonNotObject, "the line is a JSON " + std::string(doc.type_name()) + ", not an object");
    return;
  }
  const auto it = doc.find(field);
  if (it == doc.end()) {
    make_bad(r, kTextReasonMissingField, "no \"" + field + "\" field");
    return;
  }
  if (!it->is_string()) {
    make_bad(r, kTextReasonNotString, "\"" + field + "\" is " + quote_json(*it) + ", not a string");
    return;
  }
  // nlohmann checks the UTF-8 of strings, and refuses unpaired surrogate escapes.
  std::string& text = it->get_ref<std::string&>();
  if (text.size() > options.max_document_bytes) {
    make_bad(r, kTextReasonTooLong,
             "the text is " + std::to_string(text.size()) + " bytes, longer than " +
                 std::to_string(options.max_document_bytes));
    return;
  }
  r.text = std::move(text);
  r.kind = r.text.empty() ? TextRecord::Kind::empty : TextRecord::Kind::text;
}

struct TextFileReader::Impl {
  const TextInputFile& input;
  std::uint32_t index;
  const TextReadOptions& options;
  std::unique_ptr<LineReader> lines;           // jsonl, text
  std::unique_ptr<ParquetTextReader> parquet;  // parquet
  std::vector<std::optional<std::string>> rows;
  std::size_t row_pos = 0;
  std::uint64_t units = 0;  // consumed so far
  bool whole_file_done = false;
  std::string line;

  Impl(const TextInputFile& in, std::uint32_t i, const TextReadOptions& o) : input(in), index(i), options(o) {}

  bool next_line(bool& too_long) {
    if (!lines->next(line, too_long)) return false;
    ++units;
    return true;
  }

  void start(TextRecord& r) const {
    r = TextRecord();
    r.file = index;
    r.line = units + 1;
  }

  void too_long(TextRecord& r) const {
    make_bad(r, kTextReasonTooLong, "longer than " + std::to_string(options.max_document_bytes) + " bytes");
  }

  // A record for an empty line and the empty lines that follow it.
  void empty_run(TextRecord& r, TextRecord::Kind kind) {
    const std::uint64_t more = lines->skip_empty_lines(kMaxEmptyLineRun - 1);
    units += more;
    r.kind = kind;
    r.repeat = 1 + more;
  }

  bool next_jsonl(TextRecord& r) {
    start(r);
    bool long_line = false;
    if (!next_line(long_line)) return false;
    if (long_line) {
      make_bad(r, kTextReasonTooLong,
               "the line is longer than " + std::to_string(max_jsonl_line_bytes(options.max_document_bytes)) +
                   " bytes (6 x the document limit + 1 MiB)");
    } else if (line.empty()) {
      empty_run(r, TextRecord::Kind::blank);
    } else {
      r.kind = TextRecord::Kind::json_line;
      r.text = std::move(line);
      line = std::string();
    }
    return true;
  }

  bool next_text_line(TextRecord& r) {
    start(r);
    bool long_line = false;
    if (!next_line(long_line)) return false;
    if (long_line) {
      too_long(r);
    } else if (line.empty()) {
      empty_run(r, TextRecord::Kind::empty);
    } else {
      r.text = std::move(line);
      line = std::string();
    }
    return true;
  }

  bool next_paragraph(TextRecord& r) {
    // Separating empty lines before the document are consumed with it.
    bool long_line = false;
    for (;;) {
      start(r);
      if (!next_line(long_line)) return false;
      if (long_line || !line.empty()) break;
      units += lines->skip_empty_lines(std::numeric_limits<std::uint64_t>::max());
    }
    bool bad = false;
    for (;;) {
      if (long_line || r.text.size() + line.size() + 1 > options.max_document_bytes) {
        bad = true;
        std::string().swap(r.text);
      } else if (!bad) {
        if (units != r.line) r.text += '\n';
        r.text += line;
      }
      // The next line: another of this document, or the empty line that ends it.
      if (!next_line(long_line)) break;
      if (!long_line && line.empty()) break;
    }
    if (bad) too_long(r);
    return true;
  }

  bool next_file(TextRecord& r) {
    if (whole_file_done) return false;
    whole_file_done = true;
    start(r);
    bool long_file = false;
    lines->read_rest(r.text, options.max_document_bytes, long_file);
    units = 1;
    if (long_file) too_long(r);
    return true;
  }

  bool next_row(TextRecord& r) {
    while (row_pos == rows.size()) {
      rows.clear();
      row_pos = 0;
      if (!parquet->next_batch(rows)) return false;
    }
    start(r);
    std::optional<std::string>& value = rows[row_pos++];
    ++units;
    if (!value) {
      make_bad(r, kTextReasonNotString, "\"" + options.text_field + "\" is null or not a string");
    } else if (value->size() > options.max_document_bytes) {
      too_long(r);
    } else {
      r.text = std::move(*value);
    }
    return true;
  }
};

TextFileReader::TextFileReader(const TextInputFile& input, std::uint32_t index, const TextReadOptions& options,
                               std::uint64_t skip_units)
    : impl_(std::make_unique<Impl>(input, index, options)) {
  Impl& d = *impl_;
  if (input.format == TextInputFormat::parquet) {
    if (!options.open_parquet) {
      throw Error(ErrorKind::config, "'" + input.path.string() +
                                         "' is parquet, which prepare-text reads through the Python package "
                                         "(pyarrow): run `tokenfeed prepare-text` with the package installed");
    }
    d.parquet = options.open_parquet(input.path, options.text_field, skip_units);
    d.units = skip_units;
    return;
  }
  const std::size_t max_line = input.format == TextInputFormat::jsonl ? max_jsonl_line_bytes(options.max_document_bytes)
                                                                      : options.max_document_bytes;
  if (input.whole()) {
    d.lines = std::make_unique<LineReader>(input.path, max_line);
  } else {
    if (input.format == TextInputFormat::text && options.doc_per != DocPer::line) {
      throw Error(ErrorKind::config,
                  "'" + input.path.string() + "': only lines (JSONL, or --doc-per line) are read by byte range");
    }
    d.lines = std::make_unique<LineReader>(input.path, max_line, input.begin, input.end);
  }
  if (input.format == TextInputFormat::text && options.doc_per == DocPer::file) {
    if (skip_units > 0) {
      d.whole_file_done = true;
      d.units = 1;
    }
    return;
  }
  bool long_line = false;
  while (d.units < skip_units && d.next_line(long_line)) {
  }
  if (d.units < skip_units) {
    throw Error(ErrorKind::io, "'" + input.path.string() + "' has " + std::to_string(d.units) +
                                   " lines, fewer than the " + std::to_string(skip_units) +
                                   " the resumed run had read: it changed since");
  }
}

TextFileReader::~TextFileReader() = default;

bool TextFileReader::next(TextRecord& record) {
  Impl& d = *impl_;
  bool any = false;
  if (d.parquet) {
    any = d.next_row(record);
  } else if (d.input.format == TextInputFormat::jsonl) {
    any = d.next_jsonl(record);
  } else {
    switch (d.options.doc_per) {
      case DocPer::file:
        any = d.next_file(record);
        break;
      case DocPer::line:
        any = d.next_text_line(record);
        break;
      case DocPer::blank_line:
        any = d.next_paragraph(record);
        break;
    }
  }
  record.units_after = d.units;
  return any;
}

std::uint64_t TextFileReader::bytes_read() const noexcept {
  return impl_->parquet ? impl_->parquet->bytes_read() : impl_->lines->raw_bytes_read();
}

}  // namespace tokenfeed
