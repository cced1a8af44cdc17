// resolve_options: one resolution of config + dataset metadata + defaults, which the
// Loader, RLPrompts and `tokenfeed inspect` share.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "splits/mode_builder.hpp"
#include "splits/packed_mode.hpp"
#include "splits/resolved_options.hpp"
#include "splits/stream_mode.hpp"
#include "test_support.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {
namespace {

using test::error_of;
using test::make_config;
using test::numbered_episodes;
using test::TempDir;
using test::write_split;
using test::write_text;

TEST_CASE("resolved options: the defaults and the metadata settle every optional key of an SFT dataset") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {5, 9}));
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eot_token_id": 7, "eos_token_id": 9})");
  Config c = make_config(dir.path(), 2, 16);
  c.pad_token_id.reset();
  c.decode_threads = 0;
  c.rank = 1;
  c.world_size = 2;
  const ResolvedOptions r = resolve_options(c);
  CHECK(r.config.dataset_mode == DatasetMode::sft_episode);  // detected from train/
  CHECK(*r.config.batch_sampling_mode == SamplingMode::epoch);
  CHECK(*r.config.token_dtype == TokenDtype::uint16);
  CHECK(*r.config.pad_token_id == 7);  // eot before eos
  CHECK(r.pad_source == "metadata eot_token_id");
  CHECK(r.config.decode_threads >= 1);
  CHECK(r.rank_source == "config");
  CHECK(!r.config.use_loss_mask);  // auto: settled when the splits open

  // The mode builders follow the settled config.
  const EpisodeSampler::Settings s = sampler_settings(r.config, "train");
  CHECK(s.batch_size == 2);
  CHECK(s.world_size == 2);
  CHECK(s.rank == 1);
  CHECK(s.seed == 1337);
  const EpisodeSampler::Settings order = PackedModeBuilder::order_settings(r.config, "train");
  CHECK(order.batch_size == 1);
  CHECK(order.world_size == 1);
  CHECK(!order.drop_last);
  CHECK(EpisodeModeBuilder::source_options(r.config, true).pad_token_id == 7);

  // What the loader opens is what resolve_options settled.
  const Loader loader(c);
  CHECK(*loader.config().pad_token_id == 7);
  CHECK(loader.config().decode_threads == r.config.decode_threads);
}

TEST_CASE("resolved options: a config that contradicts the dataset is refused, naming the key and the file") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {5}));
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16"})");
  Config c = make_config(dir.path(), 2, 16);
  c.token_dtype = TokenDtype::uint32;
  const std::string dtype = error_of([&] { resolve_options(c); });
  CHECK(dtype.find("config key 'token_dtype' is uint32") != std::string::npos);
  CHECK(dtype.find("dataset_metadata.json' says uint16") != std::string::npos);

  c.token_dtype.reset();
  c.pad_token_id.reset();
  const std::string pad = error_of([&] { resolve_options(c); });
  CHECK(pad.find("gives none of pad_token_id, eot_token_id, eos_token_id") != std::string::npos);

  c.pad_token_id = 0;
  c.dataset_mode = DatasetMode::sft_packed;
  c.batch_sampling_mode = SamplingMode::random;
  CHECK(error_of([&] { resolve_options(c); }).find("needs batch_sampling_mode=epoch") != std::string::npos);

  c.dataset_dir = dir / "missing";
  CHECK(error_of([&] { resolve_options(c); }, ErrorKind::io).find("does not exist") != std::string::npos);
}

TEST_CASE("resolved options: a token stream settles random sampling, no mask, and document_aware's end-of-text id") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens(200, 3);
  test::write_raw(dir / "train.bin", tokens.data(), tokens.size() * sizeof(std::uint16_t));
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eot_token_id": 3, "eos_token_id": 4})");
  Config c = make_config(dir.path(), 2, 16);
  c.document_aware = true;
  const ResolvedOptions r = resolve_options(c);
  CHECK(r.config.dataset_mode == DatasetMode::token_stream);
  CHECK(*r.config.batch_sampling_mode == SamplingMode::random);
  CHECK(r.config.use_loss_mask == false);
  CHECK(*r.config.eos_token_id == 4);  // eos before eot
  CHECK(*StreamModeBuilder::source_options(r.config, nullptr).eos_token_id == 4);
  CHECK(end_of_text_id(9, r.metadata) == 9);  // a given id wins

  CHECK(detect_split_layout(dir.path(), "train") == DatasetMode::token_stream);
  CHECK(!detect_split_layout(dir.path(), "val"));
}

TEST_CASE(
    "mode builders: each mode opens its sampling layout, names its own fingerprint fields, and hands a mixture "
    "rows by id only where it may gather them") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {5, 9}));
  Config c = make_config(dir.path(), 2, 16);
  const auto opened = [&c]() {
    ResolvedOptions r = resolve_options(c);
    OpenedSplits splits = open_dataset_splits(r);
    return std::pair{std::move(splits), order_fields(r.config)};
  };

  c.dataset_mode = DatasetMode::sft_episode;
  auto [episode, episode_fields] = opened();
  CHECK(episode.at("train")->epochs() == Epochs::equal);
  CHECK(episode.at("train")->sampled_rows() == &episode.at("train")->source());
  CHECK(episode_fields.count("episode_min_tokens") == 1);
  CHECK(episode_fields.count("block_size") == 0);  // one row per episode: the length is not the order's

  c.batch_sampling_mode = SamplingMode::random;
  CHECK(opened().first.at("train")->epochs() == Epochs::none);
  c.batch_sampling_mode.reset();

  c.dataset_mode = DatasetMode::sft_packed;
  auto [packed, packed_fields] = opened();
  CHECK(packed.at("train")->epochs() == Epochs::varying);
  CHECK(packed.at("train")->sampled_rows() == nullptr);  // rows are packed, not sampled by id
  CHECK(packed_fields.at("pack_lookahead") == std::to_string(c.pack_lookahead));
  CHECK(packed_fields.at("block_size") == "16");

  // This rank's context-parallel share of each row is cut from whole rows: not by id.
  c.dataset_mode = DatasetMode::sft_episode;
  c.world_size = 2;
  c.context_parallel_size = 2;
  c.context_parallel_split = true;
  CHECK(opened().first.at("train")->sampled_rows() == nullptr);

  TempDir stream_dir;
  const std::vector<std::uint16_t> tokens(200, 3);
  test::write_raw(stream_dir / "train.bin", tokens.data(), tokens.size() * sizeof(std::uint16_t));
  Config s = make_config(stream_dir.path(), 2, 16);
  s.token_dtype = TokenDtype::uint16;
  ResolvedOptions r = resolve_options(s);
  const OpenedSplits stream = open_dataset_splits(r);
  CHECK(stream.at("train")->sampled_rows() == &stream.at("train")->source());
  CHECK(stream.count("val") == 0);
  const OrderFields stream_fields = order_fields(r.config);
  CHECK(stream_fields.at("block_size") == "16");
  CHECK(stream_fields.count("episode_min_tokens") == 0);
}

TEST_CASE("resolved options: pad_from_metadata and settle_dtype apply the precedence the fronts share") {
  DatasetMetadata meta;
  Config c;
  CHECK(!pad_from_metadata(c, meta));
  meta.eos_token_id = 5;
  CHECK(pad_from_metadata(c, meta)->source == "metadata eos_token_id");
  meta.pad_token_id = 2;
  CHECK(pad_from_metadata(c, meta)->id == 2);
  c.pad_token_id = 1;
  CHECK(pad_from_metadata(c, meta)->source == "config");

  const GivenSetting option{"--token-dtype", ErrorKind::usage, "drop the option"};
  CHECK(settle_dtype<TokenDtype>(std::nullopt, TokenDtype::uint32, option, "m.json") == TokenDtype::uint32);
  CHECK(settle_dtype<TokenDtype>(TokenDtype::uint16, std::nullopt, option, "m.json") == TokenDtype::uint16);
  const std::string message = error_of(
      [&] { settle_dtype<TokenDtype>(TokenDtype::uint16, TokenDtype::uint32, option, "m.json"); }, ErrorKind::usage);
  CHECK(message == "--token-dtype is uint16 but 'm.json' says uint32; drop the option or fix the metadata");
}

}  // namespace
}  // namespace tokenfeed
