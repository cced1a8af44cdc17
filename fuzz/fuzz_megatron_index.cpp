// A Megatron indexed dataset over fuzzer-made files: the input is the length of NAME.idx
// (little-endian uint16), NAME.idx, then NAME.bin. parse_megatron_header reads the index's
// bytes; the pair is opened as the loader opens a token-stream split and, when it opens,
// every document start is looked up, each token read, document-aware fields computed over
// windows of it, and a document-aware loader takes a few batches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "dataset/megatron_index.hpp"
#include "dataset/token_stream.hpp"
#include "fuzz_support.hpp"
#include "fuzz_token_stream.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;

// Beyond the shared reads: every document start as the .idx gives it.
void read_megatron_split(const TokenStreamSplit& split) {
  fuzz::read_indexed_split(split);
  for (const StreamFile& f : split.files()) {
    const auto* index = dynamic_cast<const MegatronIndex*>(f.document_starts.get());
    if (index == nullptr) continue;
    for (std::uint64_t d = 0; d <= std::min<std::uint64_t>(index->documents(), 1 << 14); ++d) {
      (void)index->document_start(d);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  if (size < 2) return 0;
  const std::size_t idx_len = std::min<std::size_t>(data[0] | (data[1] << 8), size - 2);
  const char* p = reinterpret_cast<const char*>(data) + 2;
  try {
    (void)parse_megatron_header(std::as_bytes(std::span(data + 2, idx_len)), "fuzz.idx");
  } catch (const Error&) {
  }
  const auto dataset = fuzz::scratch_dir() / "megatron";
  std::filesystem::remove_all(dataset);
  std::filesystem::create_directories(dataset / "train");
  fuzz::write_file(dataset / "train" / "a.idx", std::string_view(p, idx_len));
  fuzz::write_file(dataset / "train" / "a.bin", std::string_view(p + idx_len, size - 2 - idx_len));
  try {
    read_megatron_split(TokenStreamSplit::open(dataset, "train", std::nullopt));
  } catch (const Error&) {
    return 0;
  }
  fuzz::take_document_aware_batches(dataset, 0);
  return 0;
}
