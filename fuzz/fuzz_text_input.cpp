// A prepare-text input file as TextFileReader reads it (plain, gzip or zstd, by its magic
// bytes) and each record as parse_text_record turns it into a document, an empty one or a
// bad line. The first input byte picks the format and the document rule; the rest is the
// file. A record, an Error naming the file, and nothing else, is the acceptable outcome.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "prepare/text_inputs.hpp"
#include "tokenfeed/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  if (size == 0) return 0;
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("fuzz_text_input_" + std::to_string(::getpid()));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (std::fwrite(data + 1, 1, size - 1, f) != size - 1) std::abort();
  std::fclose(f);

  TextInputFile input;
  input.path = path;
  input.bytes = size - 1;
  input.format = (data[0] & 3) == 0 ? TextInputFormat::jsonl : TextInputFormat::text;
  TextReadOptions options;
  options.doc_per = (data[0] >> 2) % 3 == 0   ? DocPer::file
                    : (data[0] >> 2) % 3 == 1 ? DocPer::line
                                              : DocPer::blank_line;
  options.max_document_bytes = 1 + (data[0] >> 4) * 512;  // small limits reach the too-long paths
  try {
    TextFileReader reader(input, 0, options, data[0] & 1);
    TextRecord record;
    std::uint64_t last = 0;
    while (reader.next(record)) {
      if (record.units_after < last) std::abort();  // positions only move forward
      last = record.units_after;
      parse_text_record(record, options);
      if (record.kind == TextRecord::Kind::text && record.text.empty()) std::abort();  // "" is an empty document
      if (record.kind == TextRecord::Kind::text && record.text.size() > options.max_document_bytes) std::abort();
      if (record.kind == TextRecord::Kind::bad && record.reason.empty()) std::abort();
    }
  } catch (const Error&) {
  }
  return 0;
}
