// A consumer of the installed or embedded tokenfeed::tokenfeed: writes a tiny episode
// dataset, streams batches through a Loader and checks every value against the dataset.
//
//   stream_batches WORK_DIR
//
// Built by tests/consumers/find-package and tests/consumers/add-subdirectory (driven by
// ci/packaging.sh). TOKENFEED_EXPECTED_VERSION is the version the consumer's CMake saw
// (the package version file, or the embedded project). Exits 0 when everything matched,
// 1 after printing each mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <tokenfeed/dataset_writer.hpp>
#include <tokenfeed/error.hpp>
#include <tokenfeed/loader.hpp>
#include <tokenfeed/version.hpp>

#ifndef TOKENFEED_EXPECTED_VERSION
#error "TOKENFEED_EXPECTED_VERSION must be defined by the consumer's CMake"
#endif

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "stream_batches: MISMATCH: %s\n", what.c_str());
  }
}

constexpr std::size_t kEpisodes = 10;
constexpr std::int64_t kBatchSize = 3;
constexpr std::int64_t kBlockSize = 8;
constexpr std::uint32_t kEot = 50000;  // dataset_metadata.json's eot_token_id: the pad id
constexpr int kBatches = 7;            // 3 batches per epoch: crosses two epoch boundaries

// Episode e has tokens 1000*e + p + 1 and mask p % 2, so that any row can be traced back.
std::vector<std::uint32_t> episode_tokens(std::size_t e) {
  static const std::size_t lengths[] = {3, 7, 9, 12, 5};
  std::vector<std::uint32_t> tokens(lengths[e % 5]);
  for (std::size_t p = 0; p < tokens.size(); ++p) tokens[p] = static_cast<std::uint32_t>(1000 * e + p + 1);
  return tokens;
}

std::vector<std::uint8_t> episode_mask(std::size_t e) {
  std::vector<std::uint8_t> mask(episode_tokens(e).size());
  for (std::size_t p = 0; p < mask.size(); ++p) mask[p] = static_cast<std::uint8_t>(p % 2);
  return mask;
}

std::uint64_t write_dataset(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  tokenfeed::EpisodeDatasetWriter writer(dir / "train", {tokenfeed::TokenDtype::uint32, true, 0});
  for (std::size_t e = 0; e < kEpisodes; ++e) writer.add(episode_tokens(e), episode_mask(e));
  const tokenfeed::EpisodeDatasetWriterSummary summary = writer.finish();
  std::ofstream(dir / "dataset_metadata.json") << "{\"token_dtype\": \"uint32\", \"eot_token_id\": " << kEot << "}\n";
  return summary.tokens;
}

void check_batch(const tokenfeed::Batch& batch, int i, std::set<std::int64_t>& epoch_ids) {
  const std::string at = "batch " + std::to_string(i);
  const auto rows = static_cast<std::size_t>(kBatchSize), cols = static_cast<std::size_t>(kBlockSize);
  expect(batch.valid(), at + ": not valid");
  expect(batch.rows() == rows && batch.cols() == cols,
         at + ": shape " + std::to_string(batch.rows()) + "x" + std::to_string(batch.cols()));
  expect(batch.x().size() == rows * cols && batch.y().size() == rows * cols, at + ": x/y size");
  expect(batch.has_mask() && batch.mask().size() == rows * cols, at + ": mask size");
  expect(batch.episode_ids().size() == rows, at + ": episode_ids size");
  expect(batch.step() == static_cast<std::uint64_t>(i), at + ": step " + std::to_string(batch.step()));
  expect(batch.epoch() == static_cast<std::uint64_t>(i / 3), at + ": epoch " + std::to_string(batch.epoch()));
  expect(batch.real_rows() == rows, at + ": real_rows " + std::to_string(batch.real_rows()));
  if (failures != 0) return;  // the spans below may be empty or short

  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t id = batch.episode_ids()[r];
    if (id < 0 || id >= static_cast<std::int64_t>(kEpisodes)) {
      expect(false, at + " row " + std::to_string(r) + ": episode id " + std::to_string(id));
      continue;
    }
    expect(epoch_ids.insert(id).second, at + ": episode " + std::to_string(id) + " twice in one epoch");
    // The row is the episode's first block_size + 1 tokens, padded with the eot id (mask 0).
    const std::vector<std::uint32_t> tokens = episode_tokens(static_cast<std::size_t>(id));
    const std::vector<std::uint8_t> mask = episode_mask(static_cast<std::size_t>(id));
    std::vector<std::int64_t> t(tokens.begin(), tokens.end());
    std::vector<float> m(mask.begin(), mask.end());
    t.resize(cols + 1, kEot);
    m.resize(cols + 1, 0.0f);
    for (std::size_t c = 0; c < cols; ++c) {
      const std::string cell = at + " row " + std::to_string(r) + " col " + std::to_string(c);
      expect(batch.x()[r * cols + c] == t[c], cell + ": x " + std::to_string(batch.x()[r * cols + c]));
      expect(batch.y()[r * cols + c] == t[c + 1], cell + ": y " + std::to_string(batch.y()[r * cols + c]));
      expect(batch.mask()[r * cols + c] == m[c + 1], cell + ": mask");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: stream_batches WORK_DIR\n");
    return 2;
  }
  try {
    expect(std::string(tokenfeed::version()) == TOKENFEED_EXPECTED_VERSION,
           std::string("tokenfeed::version() is ") + tokenfeed::version() + ", CMake found " +
               TOKENFEED_EXPECTED_VERSION);

    const std::filesystem::path dataset = std::filesystem::path(argv[1]) / "dataset";
    const std::uint64_t tokens = write_dataset(dataset);

    tokenfeed::Config config;
    config.dataset_dir = dataset;
    config.batch_size = kBatchSize;
    config.block_size = kBlockSize;
    config.use_loss_mask = true;
    config.decode_threads = 2;
    config.audit_log_dir.clear();
    tokenfeed::Loader loader(config);

    const tokenfeed::SplitInfo info = loader.split_info("train");
    expect(info.episodes == kEpisodes && info.kept_episodes == kEpisodes, "split_info episodes");
    expect(info.tokens == tokens, "split_info tokens " + std::to_string(info.tokens));
    expect(info.batches_per_epoch == 3, "batches_per_epoch " + std::to_string(info.batches_per_epoch));

    std::set<std::int64_t> epoch_ids;
    for (int i = 0; i < kBatches; ++i) {
      if (i % 3 == 0) epoch_ids.clear();
      const tokenfeed::Batch batch = loader.get_batch("train");
      check_batch(batch, i, epoch_ids);
    }
    expect(loader.split_stats("train").batches == kBatches, "split_stats batches");

    // tokenfeed::Error thrown inside the library is caught here by type: with a shared
    // tokenfeed this needs the exception's type info exported across the library boundary.
    bool caught = false;
    try {
      (void)loader.split_info("val");
    } catch (const tokenfeed::Error& e) {
      caught = e.kind() == tokenfeed::ErrorKind::usage;
    }
    expect(caught, "split_info(\"val\") did not throw tokenfeed::Error(usage)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stream_batches: unexpected exception: %s\n", e.what());
    return 1;
  }
  if (failures != 0) {
    std::fprintf(stderr, "stream_batches: %d mismatches\n", failures);
    return 1;
  }
  std::printf("stream_batches: tokenfeed %s, %d batches of %lldx%lld checked\n", tokenfeed::version(), kBatches,
              static_cast<long long>(kBatchSize), static_cast<long long>(kBlockSize));
  return 0;
}
