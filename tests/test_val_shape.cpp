// Val's own shape (val.batch_size, val.block_size; docs/schedules.md, "Val's own shape"):
// val's batches have its shape in every mode, equal to the val a loader whose keys are that
// shape gives, and checked against a reference written here (val in file order); train is
// untouched, scheduled or not; resume carries both; misuse is refused naming the key.
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Train: 40 numbered episodes; val: 31 (token = 1000 * id + position + 1), lengths 3..40.
struct EpisodeData {
  TempDir dir;
  EpisodeData() {
    write_split(dir.path(), "train", numbered_episodes(40, {5, 12, 30, 3, 17}), TokenDtype::uint32, false);
    write_split(dir.path(), "val", numbered_episodes(31, {40, 3, 9, 26, 14, 33}), TokenDtype::uint32, false);
  }
};

// Train 2 x 16; val `val_batch` x `val_block` (0: the keys').
Config episode_config(const EpisodeData& data, DatasetMode mode, std::int64_t val_batch = 0,
                      std::int64_t val_block = 0) {
  Config c = make_config(data.dir.path(), 2, 16);
  if (val_batch != 0) c.val_overrides.batch_size = val_batch;
  if (val_block != 0) c.val_overrides.block_size = val_block;
  c.dataset_mode = mode;
  c.token_dtype = TokenDtype::uint32;
  c.use_loss_mask = false;
  c.decode_threads = 1;
  c.prefetch_depth = 2;
  c.val_overrides.epoch_shuffle = false;  // val in file order: the reference below
  return c;
}

// Every field of a batch, as bytes, so that two batches compare whole.
struct Fields {
  std::size_t rows = 0, cols = 0;
  std::vector<std::int64_t> ids, tokens, labels, positions, cu;
  std::vector<std::int64_t> x, y;
  std::vector<float> weights;
  bool operator==(const Fields&) const = default;
};

Fields fields_of(const Batch& b) {
  Fields f;
  f.rows = b.rows();
  f.cols = b.cols();
  f.ids.assign(b.episode_ids().begin(), b.episode_ids().end());
  f.x.assign(b.x().begin(), b.x().end());
  f.y.assign(b.y().begin(), b.y().end());
  f.tokens.assign(b.tokens().begin(), b.tokens().end());
  f.labels.assign(b.labels().begin(), b.labels().end());
  f.positions.assign(b.position_ids().begin(), b.position_ids().end());
  f.cu.assign(b.cu_seqlens().begin(), b.cu_seqlens().end());
  f.weights.assign(b.token_weights().begin(), b.token_weights().end());
  return f;
}

std::vector<Fields> take(Loader& loader, const std::string& split, int batches) {
  std::vector<Fields> out;
  for (int i = 0; i < batches; ++i) out.push_back(fields_of(loader.get_batch(split)));
  return out;
}

// val's shape given by the keys themselves: the loader every val shape must equal.
Config keyed_as_val(Config c) {
  c.batch_size = c.batch_size_for("val");
  c.block_size = c.block_size_for("val");
  c.val_overrides.batch_size.reset();
  c.val_overrides.block_size.reset();
  return c;
}

}  // namespace

TEST_CASE("val shape: sft_episode val rows are its episodes in order at val's shape, train untouched") {
  EpisodeData data;
  Config c = episode_config(data, DatasetMode::sft_episode, 3, 24);
  Loader loader(c);
  CHECK(loader.batch_shape("val", 0).rows == 3);
  CHECK(loader.batch_shape("val", 7).cols == 24);
  CHECK(loader.batch_shape("train", 0).rows == 2);
  CHECK(loader.batch_shape("train", 0).cols == 16);
  const std::vector<Fields> val = take(loader, "val", 5);
  // The reference: batch k holds episodes 3k..3k+2; x holds a row's episode tokens (at most
  // 24 of them), then pad (make_config's pad id).
  const std::vector<std::size_t> lengths{40, 3, 9, 26, 14, 33};
  for (std::size_t k = 0; k < val.size(); ++k) {
    CAPTURE(k);
    REQUIRE(val[k].rows == 3);
    REQUIRE(val[k].cols == 24);
    for (std::size_t r = 0; r < 3; ++r) {
      const std::size_t id = 3 * k + r;
      CHECK(val[k].ids[r] == static_cast<std::int64_t>(id));
      const std::size_t kept = std::min<std::size_t>(lengths[id % lengths.size()], 25);
      for (std::size_t p = 0; p < 24; ++p) {
        const std::int64_t expected = p < kept ? static_cast<std::int64_t>(1000 * id + p + 1) : *c.pad_token_id;
        CHECK(val[k].x[r * 24 + p] == expected);
      }
    }
  }
  Loader keyed(keyed_as_val(c));
  CHECK(take(keyed, "val", 5) == val);
  // Train is what it is without a val shape.
  Config plain = c;
  plain.val_overrides.batch_size.reset();
  plain.val_overrides.block_size.reset();
  Loader without(plain);
  CHECK(take(loader, "train", 6) == take(without, "train", 6));
}

TEST_CASE("val shape: sft_packed and token_stream val equal the val of loaders keyed at that shape") {
  SUBCASE("sft_packed") {
    EpisodeData data;
    Config c = episode_config(data, DatasetMode::sft_packed, 1, 48);
    Loader loader(c);
    const std::vector<Fields> val = take(loader, "val", 4);
    for (const Fields& f : val) {
      CHECK(f.rows == 1);
      CHECK(f.cols == 48);
      CHECK(f.cu.back() == 48);  // the row's sequences cover its 48 positions
    }
    // The first row packs val's first episode (40 tokens: 39 positions) in file order.
    CHECK(val[0].ids[0] == 0);
    CHECK(val[0].tokens[0] == 1);
    Loader keyed(keyed_as_val(c));
    CHECK(take(keyed, "val", 4) == val);
  }
  SUBCASE("token_stream epoch windows") {
    TempDir dir;
    std::vector<std::uint16_t> tokens(300), val_tokens(200);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(10000 + i);
    for (std::size_t i = 0; i < val_tokens.size(); ++i) val_tokens[i] = static_cast<std::uint16_t>(20000 + i);
    write_raw(dir / "train.bin", tokens.data(), tokens.size() * 2);
    write_raw(dir / "val.bin", val_tokens.data(), val_tokens.size() * 2);
    Config c = make_config(dir.path(), 2, 8);
    c.pad_token_id.reset();
    c.token_dtype = TokenDtype::uint16;
    c.dataset_mode = DatasetMode::token_stream;
    c.batch_sampling_mode = SamplingMode::epoch;
    c.val_overrides.epoch_shuffle = false;
    c.val_overrides.batch_size = 4;
    c.val_overrides.block_size = 10;
    Loader loader(c);
    const std::vector<Fields> val = take(loader, "val", 3);
    // Reference: window w of val is tokens [11 w, 11 w + 11); batch k holds windows 4k..4k+3.
    for (std::size_t k = 0; k < val.size(); ++k) {
      REQUIRE(val[k].rows == 4);
      REQUIRE(val[k].cols == 10);
      for (std::size_t r = 0; r < 4; ++r) {
        for (std::size_t p = 0; p < 10; ++p) {
          const std::size_t at = 11 * (4 * k + r) + p;
          CHECK(val[k].x[r * 10 + p] == static_cast<std::int64_t>(20000 + at));
          CHECK(val[k].y[r * 10 + p] == static_cast<std::int64_t>(20000 + at + 1));
        }
      }
    }
    Loader keyed(keyed_as_val(c));
    CHECK(take(keyed, "val", 3) == val);
    CHECK(take(loader, "train", 2).front().cols == 8);
  }
}

TEST_CASE("val shape: never scheduled, resumed with train, part of the fingerprint") {
  EpisodeData data;
  Config c = episode_config(data, DatasetMode::sft_episode, 3, 20);
  c.shape_schedule = {ShapeStage{2, std::nullopt, 4, std::nullopt}, ShapeStage{std::nullopt, std::nullopt, 6, 8}};
  Loader first(c);
  CHECK(first.batch_shape("train", 3).cols == 8);
  CHECK(first.batch_shape("val", 3).rows == 3);
  CHECK(first.batch_shape("val", 3).cols == 20);
  take(first, "train", 3);
  take(first, "val", 2);
  const std::string state = first.save_state();
  const std::vector<Fields> train_after = take(first, "train", 4);
  const std::vector<Fields> val_after = take(first, "val", 4);
  Loader resumed(c);
  resumed.load_state(state);
  CHECK(take(resumed, "train", 4) == train_after);
  CHECK(take(resumed, "val", 4) == val_after);
  // Another val shape is another val order: the state names the field that differs.
  Config other = c;
  other.val_overrides.block_size = 24;
  Loader refused(other);
  CHECK(error_of([&] { refused.load_state(state); }, ErrorKind::state).find("val.block_size") != std::string::npos);
}

TEST_CASE("val shape: XML and key forms, and misuse refused naming the key") {
  TempDir dir;
  const std::filesystem::path xml = dir / "c.xml";
  write_text(xml,
             "<training><dataset_dir>d</dataset_dir><batch_size>2</batch_size><block_size>16</block_size>"
             "<val><epoch_shuffle>false</epoch_shuffle><batch_size>5</batch_size><block_size>64</block_size></val>"
             "</training>");
  const Config c = load_config_file(xml);
  CHECK(c.val_overrides.batch_size == 5);
  CHECK(c.val_overrides.block_size == 64);
  CHECK(c.batch_size_for("val") == 5);
  CHECK(c.batch_size_for("train") == 2);
  CHECK(c.block_size_for("train") == 16);

  write_text(xml, "<training><dataset_dir>d</dataset_dir><train><batch_size>5</batch_size></train></training>");
  CHECK(error_of([&] { load_config_file(xml); }).find("unknown key 'batch_size' in <train>") != std::string::npos);

  Config k = make_config(dir.path(), 2, 16);
  set_config_value(k, "val.block_size", "32");
  CHECK(k.val_overrides.block_size == 32);
  CHECK(error_of([&] { set_config_value(k, "val.batch_size", "0"); }).find("val.batch_size") != std::string::npos);

  EpisodeData data;
  Config cp = episode_config(data, DatasetMode::sft_packed);
  cp.context_parallel_size = 2;
  cp.world_size = 2;
  cp.rank = 0;
  cp.val_overrides.block_size = 18;  // not a multiple of 2 x cp = 4
  CHECK(error_of([&] { Loader loader(cp); }).find("config key 'val.block_size' is 18") != std::string::npos);

  Config big = episode_config(data, DatasetMode::sft_episode);
  big.val_overrides.batch_size = 1 << 20;
  big.val_overrides.block_size = 1 << 12;
  CHECK(error_of([&] { validate_config(big); }).find("'val.batch_size' x 'val.block_size'") != std::string::npos);
}

TEST_CASE("val shape: a mixture's val at its own shape equals the val of a mixture keyed at it") {
  EpisodeData chat, code;
  const auto mixed = [&](std::int64_t batch, std::int64_t block) {
    Config c = make_config({}, batch, block);
    c.token_dtype = TokenDtype::uint32;
    c.use_loss_mask = false;
    c.decode_threads = 1;
    c.prefetch_depth = 2;
    MixtureSource a, b;
    a.name = "chat";
    a.weight = "2";
    a.keys = {{"dataset_dir", chat.dir.path().string()}};
    b.name = "code";
    b.keys = {{"dataset_dir", code.dir.path().string()}, {"epoch_seed", "7"}};
    c.mixture = {a, b};
    return c;
  };
  Config c = mixed(2, 16);
  c.val_overrides.batch_size = 5;
  c.val_overrides.block_size = 40;
  Loader loader(c);
  CHECK(loader.batch_shape("val", 3).rows == 5);
  CHECK(loader.batch_shape("val", 3).cols == 40);
  CHECK(loader.batch_shape("train", 3).rows == 2);
  const std::vector<Fields> val = take(loader, "val", 4);
  for (const Fields& f : val) {
    CHECK(f.rows == 5);
    CHECK(f.cols == 40);
  }
  Loader keyed(mixed(5, 40));
  CHECK(take(keyed, "val", 4) == val);
  Loader plain(mixed(2, 16));
  CHECK(take(loader, "train", 5) == take(plain, "train", 5));
  // Val's shape is part of the mixture's fingerprint.
  const std::string state = loader.save_state();
  Loader other(mixed(2, 16));
  CHECK(error_of([&] { other.load_state(state); }, ErrorKind::state).find("val.") != std::string::npos);
}
