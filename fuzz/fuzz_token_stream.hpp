// Shared by the fuzz targets of token files that index their documents (Megatron .idx,
// datatrove .ds.index): what an opened split offers read, bounded so that one input stays
// fast, and a document-aware loader taking a few batches (and an sft_packed one over the
// documents, one whose val is a fraction of them by hash, and an sft_packed one over those
// two splits of the documents).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "dataset/token_stream.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::fuzz {

// Reads each file's first tokens, looks up the document start after each of them and
// computes document-aware fields over windows of them.
inline void read_indexed_split(const TokenStreamSplit& split) {
  constexpr std::uint64_t kLimit = 1 << 14;
  constexpr std::size_t kWindow = 16;
  for (std::size_t fi = 0; fi < split.files().size(); ++fi) {
    const StreamFile& f = split.files()[fi];
    const std::uint64_t n = std::min(f.tokens, kLimit);
    std::vector<std::int64_t> tokens(n);
    split.read(fi, 0, n, tokens.data());
    if (!f.document_starts) continue;
    for (std::uint64_t t = 0; t <= n; ++t) (void)f.document_starts->next_start_after(t);
    std::vector<std::int64_t> y(kWindow);
    std::vector<std::int32_t> doc(kWindow), pos(kWindow);
    for (std::uint64_t at = 0; at + kWindow < n; at += kWindow) {
      apply_document_starts(*f.document_starts, at, y.data(), doc.data(), pos.data(), kWindow, -100);
    }
  }
}

// A document-aware loader over `dataset` (its end-of-text id `eos`, if any) takes a few
// batches; its refusals are expected.
inline void take_document_aware_batches(const std::filesystem::path& dataset, std::optional<std::int64_t> eos) {
  Config c;
  c.dataset_dir = dataset;
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_size = 1;
  c.block_size = 4;
  c.document_aware = true;
  c.eos_token_id = eos;
  c.decode_threads = 1;
  c.prefetch_depth = 1;
  c.audit_log_dir.clear();
  try {
    Loader loader(c);
    for (int k = 0; k < 4; ++k) (void)loader.get_batch();
  } catch (const Error&) {
  }
  // The same files' documents as episodes (sft_packed), split by document hash
  // (val_fraction: windows across runs of documents), and both (episodes of the runs'
  // documents), train's and val's batches.
  Config packed = c;
  packed.dataset_mode = DatasetMode::sft_packed;
  packed.document_aware = false;
  packed.pad_token_id = 0;
  packed.truncation = Truncation::split;
  packed.batch_sampling_mode = SamplingMode::epoch;
  packed.epoch_drop_last = false;
  Config by_hash = c;
  by_hash.val_fraction = 0.5;
  Config packed_by_hash = packed;  // the documents by hash, as episodes
  packed_by_hash.val_fraction = 0.5;
  for (const Config& other : {packed, by_hash, packed_by_hash}) {
    try {
      Loader loader(other);
      for (int k = 0; k < 4; ++k) (void)loader.get_batch();
      if (loader.has_split("val")) (void)loader.get_batch("val");
    } catch (const Error&) {
    }
  }
}

}  // namespace tokenfeed::fuzz
