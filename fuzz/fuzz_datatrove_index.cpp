// A datatrove tokenized file over fuzzer-made files: the input is the length of
// NAME.ds.index (little-endian uint16), the length of NAME.ds.metadata (one byte), those two
// files, then NAME.ds. parse_datatrove_metadata reads the metadata's bytes; the file is
// opened as the loader opens a token-stream split and, when it opens, every document start
// is looked up, each token read, document-aware fields computed over windows of it, and a
// document-aware loader (no end-of-text id: the index decides) takes a few batches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataset/datatrove_index.hpp"
#include "dataset/token_stream.hpp"
#include "fuzz_support.hpp"
#include "fuzz_token_stream.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;

// Beyond the shared reads: every document end as the .ds.index gives it.
void read_datatrove_split(const TokenStreamSplit& split) {
  fuzz::read_indexed_split(split);
  for (const StreamFile& f : split.files()) {
    const auto* index = dynamic_cast<const DatatroveIndex*>(f.document_starts.get());
    if (index == nullptr) continue;
    for (std::uint64_t d = 0; d < std::min<std::uint64_t>(index->documents(), 1 << 14); ++d) {
      (void)index->document_end(d);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  if (size < 3) return 0;
  const std::size_t index_len = std::min<std::size_t>(data[0] | (data[1] << 8), size - 3);
  const std::size_t meta_len = std::min<std::size_t>(data[2], size - 3 - index_len);
  const char* p = reinterpret_cast<const char*>(data) + 3;
  const std::string_view index(p, index_len), meta(p + index_len, meta_len),
      tokens(p + index_len + meta_len, size - 3 - index_len - meta_len);
  try {
    (void)parse_datatrove_metadata(meta, "fuzz.ds.metadata");
  } catch (const Error&) {
  }
  const auto dataset = fuzz::scratch_dir() / "datatrove";
  std::filesystem::remove_all(dataset);
  std::filesystem::create_directories(dataset / "train");
  fuzz::write_file(dataset / "train" / "a.ds.index", index);
  fuzz::write_file(dataset / "train" / "a.ds.metadata", meta);
  fuzz::write_file(dataset / "train" / "a.ds", tokens);
  try {
    read_datatrove_split(TokenStreamSplit::open(dataset, "train", std::nullopt));
  } catch (const Error&) {
    return 0;
  }
  fuzz::take_document_aware_batches(dataset, std::nullopt);
  return 0;
}
