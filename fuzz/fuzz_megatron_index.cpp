// A Megatron indexed dataset over fuzzer-made files: the input is the length of NAME.idx
// (little-endian uint16), NAME.idx, then NAME.bin. parse_megatron_header reads the index's
// bytes; the pair is opened as the loader opens a token-stream split and, when it opens,
// every document start is looked up, each token read, document-aware fields computed over
// windows of it, and a document-aware loader takes a few batches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataset/megatron_index.hpp"
#include "dataset/token_stream.hpp"
#include "fuzz_support.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;

// Reads what the open split offers, bounded so that one input stays fast.
void read_split(const TokenStreamSplit& split) {
  constexpr std::uint64_t kLimit = 1 << 14;
  constexpr std::size_t kWindow = 16;
  for (std::size_t fi = 0; fi < split.files().size(); ++fi) {
    const StreamFile& f = split.files()[fi];
    const std::uint64_t n = std::min(f.tokens, kLimit);
    std::vector<std::int64_t> tokens(n);
    split.read(fi, 0, n, tokens.data());
    const auto* index = dynamic_cast<const MegatronIndex*>(f.document_starts.get());
    if (index == nullptr) continue;
    for (std::uint64_t d = 0; d <= std::min(index->documents(), kLimit); ++d) (void)index->document_start(d);
    std::vector<std::int64_t> y(kWindow);
    std::vector<std::int32_t> doc(kWindow), pos(kWindow);
    for (std::uint64_t at = 0; at + kWindow < n; at += kWindow) {
      apply_document_starts(*index, at, y.data(), doc.data(), pos.data(), kWindow, -100);
    }
  }
}

void take_batches(const std::filesystem::path& dataset) {
  Config c;
  c.dataset_dir = dataset;
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_size = 1;
  c.block_size = 4;
  c.document_aware = true;
  c.eos_token_id = 0;
  c.decode_threads = 1;
  c.prefetch_depth = 1;
  c.audit_log_dir.clear();
  try {
    Loader loader(c);
    for (int k = 0; k < 4; ++k) (void)loader.get_batch();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    set_log_handler([](LogLevel, std::string_view) {});
    return true;
  }();
  (void)quiet;
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
    read_split(TokenStreamSplit::open(dataset, "train", std::nullopt));
  } catch (const Error&) {
    return 0;
  }
  take_batches(dataset);
  return 0;
}
