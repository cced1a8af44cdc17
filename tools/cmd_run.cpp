// `tokenfeed run`: streams batches from a config and prints what it produced and how fast.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "every_field_config.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::cli {
namespace {

// Positions of a batch that carry loss, in every mode: the nonzero token weights when the
// contract fields are there. Without them (contract_fields=false) the mode's own view says
// it: the mask when on (0 on padding); else the labels that are not ignore_index (token
// streams, where y is the labels); else every real position (sft_episode without a mask
// trains on every label it has).
std::size_t trained_positions(const Batch& b, std::int64_t ignore_index) {
  const auto nonzero = [](std::span<const float> v) {
    return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](float w) { return w != 0.0f; }));
  };
  if (!b.token_weights().empty()) return nonzero(b.token_weights());
  if (b.has_mask()) return nonzero(b.mask());
  if (!b.labels().empty()) {
    return static_cast<std::size_t>(
        std::count_if(b.labels().begin(), b.labels().end(), [ignore_index](std::int64_t l) { return l != ignore_index; }));
  }
  return b.real_positions();
}

struct RunOptions {
  std::string config;
  std::string split = "train";
  long batches = 200;
};

void run(const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto open_start = Clock::now();
  Loader loader(config_reading_every_field(o.config));
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
    // Packed epochs differ in row count: the figure is the current epoch's.
    const std::string per_epoch = std::to_string(info.batches_per_epoch) +
                                  (c.dataset_mode == DatasetMode::sft_packed ? " batches in this epoch (packed epochs vary)"
                                                                             : " batches/epoch");
    std::printf("split     %s: %llu episodes (%llu kept), %llu tokens, %llu shards, mask=%s, %s\n", info.name.c_str(),
                static_cast<unsigned long long>(info.episodes), static_cast<unsigned long long>(info.kept_episodes),
                static_cast<unsigned long long>(info.tokens), static_cast<unsigned long long>(info.shards),
                info.mask ? "on" : "off", per_epoch.c_str());
  }
  const std::string depth = c.prefetch_depth == 0 ? std::string("auto") : std::to_string(c.prefetch_depth);
  // Under a shape_schedule each batch has the rows of its step (loader.batch_shape).
  const std::string rows = c.shape_schedule.empty() || o.split != "train"
                               ? std::to_string(c.batch_size)
                               : std::to_string(loader.batch_shape(o.split, 0).rows) + ".. (shape_schedule of " +
                                     std::to_string(c.shape_schedule.size()) + " stages)";
  std::printf("shape     %s x %lld, sampling=%s, prefetch_depth=%s, decode_threads=%lld, opened in %.1f ms\n",
              rows.c_str(), static_cast<long long>(c.block_size), to_string(*c.batch_sampling_mode), depth.c_str(),
              static_cast<long long>(c.decode_threads), open_ms);

  // Real positions hold an episode's or a window's tokens (the pad id can also be a real
  // token, so x is not compared with it); trained ones carry loss.
  unsigned long long real_positions = 0, trained = 0, fill_rows = 0;
  double positions = 0;  // rows x cols of every batch (a context-parallel share counts its whole rows)
  std::uint64_t last_epoch = 0;
  const auto start = Clock::now();
  for (long i = 0; i < o.batches; ++i) {
    Batch b = loader.get_batch(o.split);
    fill_rows += b.rows() - b.real_rows();
    positions += static_cast<double>(b.rows()) * static_cast<double>(b.cols()) *
                 static_cast<double>(c.context_parallel_split ? c.context_parallel_size : 1);
    real_positions += b.real_positions();
    trained += trained_positions(b, c.ignore_index);
    last_epoch = b.epoch();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const SplitStats stats = loader.split_stats(o.split);
  std::printf("streamed  %ld batches (through epoch %llu) in %.3f s: %.0f batches/s, %.3g positions/s\n", o.batches,
              static_cast<unsigned long long>(last_epoch), seconds, static_cast<double>(o.batches) / seconds,
              positions / seconds);
  std::printf("content   %llu real positions (%.1f%%), %llu trained positions (nonzero loss weight), %llu fill rows\n",
              real_positions, 100.0 * static_cast<double>(real_positions) / positions, trained, fill_rows);
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
