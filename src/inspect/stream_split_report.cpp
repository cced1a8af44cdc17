// A token-stream split: its files, the windows a block size gives, its documents at each
// end-of-text id, whether the loader would read it, and (deep) token ids and content
// checksums.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "dataset/layout_free_content.hpp"
#include "dataset/token_stream.hpp"
#include "inspect/split_reports.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "splits/fingerprint.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

// A token stream's files: their layout, sizes and dtypes (and where each dtype came from).
StreamFigures describe(const DatasetMetadata& meta, const TokenStreamSplit& split) {
  StreamFigures f;
  f.flat = split.flat();
  for (const StreamFile& file : split.files()) {
    const fs::path& path = file.map.path();
    const bool megatron = file.format == StreamFileFormat::megatron;
    const bool datatrove = file.format == StreamFileFormat::datatrove;
    // A datatrove file's dtype is its metadata's when it has a tokenizer line (else given).
    const bool datatrove_meta = datatrove && fs::exists(path.string() + ".metadata");
    f.files.push_back(StreamFileFigures{path.filename().string(), file.tokens, file.dtype,
                                        megatron                               ? DtypeSource::megatron_index
                                        : datatrove_meta                       ? DtypeSource::datatrove_metadata
                                        : file.format == StreamFileFormat::npy ? DtypeSource::npy_header
                                        : meta.token_dtype                     ? DtypeSource::metadata
                                                                               : DtypeSource::given,
                                        file.documents,
                                        datatrove  ? path.filename().string() + ".index"
                                        : megatron ? path.stem().string() + ".idx"
                                                   : path.stem().string() + ".docs.npy",
                                        file.tokenizer});
  }
  f.tokens = split.total_tokens();
  return f;
}

// The windows block_size gives (none without it); why the loader would refuse the split
// for want of one window, if it would.
std::optional<std::string> count_windows(const InspectRequest& r, const TokenStreamSplit& split, StreamFigures& f) {
  std::uint64_t largest = 0;
  for (const StreamFile& file : split.files()) largest = std::max(largest, file.tokens);
  if (r.block_size <= 0) {
    if (largest < 2) return "no file holds 2 tokens, the window of the smallest block_size (1)";
    return std::nullopt;
  }
  const auto block = static_cast<std::size_t>(r.block_size);
  f.windows = StreamFigures::Windows{TokenStreamBatchSource::sample_count(split, block, SamplingMode::epoch),
                                     TokenStreamBatchSource::sample_count(split, block, SamplingMode::random)};
  if (f.windows->random_starts != 0) return std::nullopt;
  return "no file holds one window of block_size + 1 = " + std::to_string(block + 1) + " tokens (the largest holds " +
         std::to_string(largest) + ")";
}

// One pass over every token: document lengths at each end-of-text id `eos` and, with
// `vocab`, ids against it (the first offender located).
void scan_tokens(const TokenStreamSplit& split, std::optional<std::int64_t> eos, std::optional<VocabCheck>& vocab,
                 StreamFigures& f) {
  std::vector<std::uint64_t> lengths;
  std::uint64_t current = 0;
  for (std::size_t fi = 0; fi < split.files().size(); ++fi) {
    for (std::uint64_t i = 0; i < split.files()[fi].tokens; ++i) {
      const std::uint32_t t = split.token_at(fi, i);
      if (vocab && t >= static_cast<std::uint64_t>(vocab->vocab_size)) {
        ++vocab->out_of_vocab;
        if (!vocab->first) vocab->first.emplace(VocabCheck::First{t, i, split.files()[fi].map.path().string(), {}, {}});
      }
      ++current;
      if (eos && t == static_cast<std::uint64_t>(*eos)) {
        lengths.push_back(current);
        current = 0;
      }
    }
  }
  if (eos) f.documents = StreamFigures::Documents{*eos, lengths.size(), current, percentiles(lengths)};
}

}  // namespace

SplitReport inspect_stream_split(const InspectRequest& r, const DatasetMetadata& meta, std::optional<TokenDtype> dtype,
                                 const std::string& name) {
  SplitReport report;
  report.name = name;
  report.dir = (fs::path(r.dataset_dir) / name).string();
  std::optional<TokenStreamSplit> opened;
  try {
    opened.emplace(TokenStreamSplit::open(r.dataset_dir, name, dtype, {},
                                          {r.val_fraction, static_cast<std::uint64_t>(r.val_seed)}));
  } catch (const Error& e) {
    report.verdict = std::string("INVALID: ") + e.what();
    report.refusal = Refusal{e.kind(), e.what()};
    return report;
  }
  const TokenStreamSplit& split = *opened;
  report.stream = describe(meta, split);
  if (r.val_fraction > 0.0) {
    std::uint64_t documents = 0;
    for (const DocumentRange& range : split.ranges()) documents += range.documents;
    report.stream->by_hash =
        StreamFigures::ByHash{r.val_fraction, static_cast<std::uint64_t>(r.val_seed), documents, split.ranges().size()};
  }
  const std::optional<std::string> refusal = count_windows(r, split, *report.stream);
  if (r.deep && meta.vocab_size) report.vocab = VocabCheck{*meta.vocab_size, 0, std::nullopt};
  const std::optional<std::int64_t> eos = end_of_text_id(r.eos_id, meta);
  if (eos || report.vocab) scan_tokens(split, eos, report.vocab, *report.stream);
  report.bad_token_ids = report.vocab && report.vocab->out_of_vocab > 0;
  report.layout_free_fingerprint = hex64(layout_free_fingerprint(split).content);
  if (r.deep) report.content_sha256 = layout_free_digest(split);
  // A sharded stream's files (shards and their .docs.npy) are recorded under the split's
  // name, as prepare-text records them; nothing records a flat <split>.bin|.npy.
  std::error_code ec;
  if (r.deep && fs::is_directory(fs::path(r.dataset_dir) / name, ec)) {
    report.checksums = compare_checksums(meta, name, {{name, checksum_stream_split(fs::path(r.dataset_dir) / name)}});
    report.bad_checksums = !report.checksums->problems.empty();
  }
  if (refusal) {
    report.verdict = "INVALID: " + *refusal +
                     (r.block_size > 0 ? "; the loader refuses this split at this block_size" : std::string());
    report.refusal = Refusal{ErrorKind::format, "split '" + name + "' of '" + r.dataset_dir + "': " + *refusal};
    return report;
  }
  report.verdict = report.bad_token_ids   ? "INVALID: token ids out of vocabulary"
                   : report.bad_checksums ? "INVALID: content checksum mismatch"
                                          : "ok";
  return report;
}

}  // namespace tokenfeed
