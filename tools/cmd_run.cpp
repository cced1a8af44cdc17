// `tokenfeed run`: streams batches from a config and prints what it produced and how fast.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::cli {
namespace {

struct RunOptions {
  std::string config;
  std::string split = "train";
  long batches = 200;
};

void run(const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto open_start = Clock::now();
  Loader loader(load_config_file(o.config));
  const double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - open_start).count();
  const Config& c = loader.config();
  const SplitInfo info = loader.split_info(o.split);
  std::printf("dataset   %s (%s, %s tokens)\n", c.dataset_dir.c_str(), to_string(c.dataset_mode),
              to_string(*c.token_dtype));
  const bool stream = c.dataset_mode == DatasetMode::token_stream;
  if (stream) {
    std::printf("split     %s: %llu tokens in %llu files, %llu %s, document_aware=%s\n", info.name.c_str(),
                static_cast<unsigned long long>(info.tokens), static_cast<unsigned long long>(info.shards),
                static_cast<unsigned long long>(info.windows),
                *c.batch_sampling_mode == SamplingMode::epoch ? "windows per epoch" : "window starts",
                c.document_aware ? "true" : "false");
  } else {
    std::printf("split     %s: %llu episodes (%llu kept), %llu tokens, %llu shards, mask=%s, %llu batches/epoch\n",
                info.name.c_str(), static_cast<unsigned long long>(info.episodes),
                static_cast<unsigned long long>(info.kept_episodes), static_cast<unsigned long long>(info.tokens),
                static_cast<unsigned long long>(info.shards), info.mask ? "on" : "off",
                static_cast<unsigned long long>(info.batches_per_epoch));
  }
  std::printf("shape     %lld x %lld, sampling=%s, prefetch_depth=%lld, decode_threads=%lld, opened in %.1f ms\n",
              static_cast<long long>(c.batch_size), static_cast<long long>(c.block_size),
              to_string(*c.batch_sampling_mode), static_cast<long long>(c.prefetch_depth),
              static_cast<long long>(c.decode_threads), open_ms);

  unsigned long long real_tokens = 0, trained = 0, fill_rows = 0;
  std::uint64_t last_epoch = 0;
  const auto start = Clock::now();
  for (long i = 0; i < o.batches; ++i) {
    Batch b = loader.get_batch(o.split);
    const auto x = b.x();
    const auto m = b.mask();
    for (const std::int64_t id : b.episode_ids()) fill_rows += id < 0 ? 1 : 0;
    if (stream) {
      real_tokens += x.size();  // windows are never padded
    } else {
      const auto pad = *c.pad_token_id;
      real_tokens += static_cast<unsigned long long>(std::count_if(x.begin(), x.end(), [pad](std::int64_t t) { return t != pad; }));
    }
    for (const float v : m) trained += v != 0.0f ? 1 : 0;
    last_epoch = b.epoch();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const SplitStats stats = loader.split_stats(o.split);
  const double positions = static_cast<double>(o.batches) * static_cast<double>(c.batch_size * c.block_size);
  std::printf("streamed  %ld batches (through epoch %llu) in %.3f s: %.0f batches/s, %.3g positions/s\n", o.batches,
              static_cast<unsigned long long>(last_epoch), seconds, static_cast<double>(o.batches) / seconds,
              positions / seconds);
  std::printf("content   %.1f%% non-pad input positions, %llu trained (mask=1) positions, %llu fill rows\n",
              100.0 * static_cast<double>(real_tokens) / positions, trained, fill_rows);
  std::printf("waits     %llu of %llu get_batch calls waited; mean wait %.1f us, max %.1f us\n",
              static_cast<unsigned long long>(stats.waits), static_cast<unsigned long long>(stats.batches),
              stats.batches ? stats.total_wait_us / static_cast<double>(stats.batches) : 0.0, stats.max_wait_us);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Stream batches from a config and report what was produced and how fast");
  cmd->add_option("--config", options->config, "XML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--split", options->split, "Split to stream")->check(CLI::IsMember({"train", "val"}))->capture_default_str();
  cmd->add_option("--batches", options->batches, "Number of batches")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([options] { run(*options); });
}

}  // namespace tokenfeed::cli
