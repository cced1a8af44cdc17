// test_package: writes a tiny episode dataset with tokenfeed::EpisodeDatasetWriter, streams
// a few batches through tokenfeed::Loader and checks their shapes and contents.
//
//   test_package WORK_DIR
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <tokenfeed/dataset_writer.hpp>
#include <tokenfeed/error.hpp>
#include <tokenfeed/loader.hpp>
#include <tokenfeed/version.hpp>

namespace {

constexpr std::int64_t kBatchSize = 2;
constexpr std::int64_t kBlockSize = 6;
constexpr std::uint32_t kEot = 9999;

bool fail(const std::string& what) {
  std::fprintf(stderr, "test_package: %s\n", what.c_str());
  return false;
}

// Episode e holds tokens 100*e + 1, 100*e + 2, ... (length 4 + e).
std::vector<std::uint32_t> episode(std::uint32_t e) {
  std::vector<std::uint32_t> tokens(4 + e);
  for (std::uint32_t p = 0; p < tokens.size(); ++p) tokens[p] = 100 * e + p + 1;
  return tokens;
}

bool run(const std::filesystem::path& work_dir) {
  if (std::string(tokenfeed::version()) != TOKENFEED_EXPECTED_VERSION) {
    return fail(std::string("version ") + tokenfeed::version() + ", expected " + TOKENFEED_EXPECTED_VERSION);
  }
  const std::filesystem::path dataset = work_dir / "dataset";
  std::filesystem::remove_all(dataset);
  {
    tokenfeed::EpisodeDatasetWriter writer(dataset / "train", {tokenfeed::TokenDtype::uint16, false, 0});
    for (std::uint32_t e = 0; e < 6; ++e) writer.add(episode(e), {});
    if (writer.finish().episodes != 6) return fail("the writer did not write 6 episodes");
  }
  std::ofstream(dataset / "dataset_metadata.json") << "{\"eot_token_id\": " << kEot << "}\n";

  tokenfeed::Config config;
  config.dataset_dir = dataset;
  config.batch_size = kBatchSize;
  config.block_size = kBlockSize;
  config.audit_log_dir.clear();
  tokenfeed::Loader loader(config);

  const auto rows = static_cast<std::size_t>(kBatchSize), cols = static_cast<std::size_t>(kBlockSize);
  for (int step = 0; step < 5; ++step) {
    const tokenfeed::Batch batch = loader.get_batch("train");
    if (batch.rows() != rows || batch.cols() != cols || batch.x().size() != rows * cols ||
        batch.y().size() != rows * cols || batch.episode_ids().size() != rows || batch.has_mask()) {
      return fail("batch " + std::to_string(step) + " has the wrong shape");
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int64_t id = batch.episode_ids()[r];
      if (id < 0 || id >= 6) return fail("batch " + std::to_string(step) + ": episode id " + std::to_string(id));
      const std::vector<std::uint32_t> tokens = episode(static_cast<std::uint32_t>(id));
      std::vector<std::int64_t> expected(tokens.begin(), tokens.end());
      expected.resize(cols + 1, kEot);  // truncated or padded to block_size + 1
      for (std::size_t c = 0; c < cols; ++c) {
        if (batch.x()[r * cols + c] != expected[c] || batch.y()[r * cols + c] != expected[c + 1]) {
          return fail("batch " + std::to_string(step) + " row " + std::to_string(r) + " differs from episode " +
                      std::to_string(id));
        }
      }
    }
  }
  try {
    (void)loader.get_batch("val");
    return fail("get_batch(\"val\") on a dataset without val/ did not throw");
  } catch (const tokenfeed::Error&) {
  }
  std::printf("test_package: tokenfeed %s streamed 5 batches of %lldx%lld\n", tokenfeed::version(),
              static_cast<long long>(kBatchSize), static_cast<long long>(kBlockSize));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_package WORK_DIR\n");
    return 2;
  }
  try {
    return run(argv[1]) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_package: unexpected exception: %s\n", e.what());
    return 1;
  }
}
