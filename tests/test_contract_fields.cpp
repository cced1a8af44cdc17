// contract_fields: with it off, sft_episode and token_stream batches carry only their own
// view (x, y, mask, document fields), identical to the view with it on, and the contract's
// extra fields are empty; with it on, sft_episode's mask and token weights share one buffer.
#include <doctest/doctest.h>

#include <fstream>
#include <random>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

template <typename T>
std::vector<T> copy_of(std::span<const T> s) {
  return {s.begin(), s.end()};
}

// The fields a trainer using the mode's own view reads, for `steps` batches.
struct View {
  std::vector<std::int64_t> x, y, ids;
  std::vector<float> mask;
  std::vector<std::int32_t> doc_ids, position_ids;
  std::vector<std::size_t> real_positions;
};

View read_view(const Config& c, std::size_t steps, bool with_positions) {
  Loader loader(c);
  View v;
  for (std::size_t s = 0; s < steps; ++s) {
    Batch b = loader.get_batch();
    auto append = [](auto& to, auto from) { to.insert(to.end(), from.begin(), from.end()); };
    append(v.x, b.x());
    append(v.y, b.y());
    append(v.ids, b.episode_ids());
    append(v.mask, b.mask());
    append(v.doc_ids, b.doc_ids());
    if (with_positions) append(v.position_ids, b.position_ids());
    v.real_positions.push_back(b.real_positions());
  }
  return v;
}

// Reads `steps` batches with the contract fields and without: the view must not change,
// and without them the contract's extra fields are empty. Returns a batch made without.
Batch check_without_contract(const Config& on, std::size_t steps, bool with_positions) {
  Config off = on;
  off.contract_fields = false;
  const View full = read_view(on, steps, with_positions);
  const View view = read_view(off, steps, with_positions);
  CHECK(full.x == view.x);
  CHECK(full.y == view.y);
  CHECK(full.ids == view.ids);
  CHECK(full.mask == view.mask);
  CHECK(full.doc_ids == view.doc_ids);
  CHECK(full.position_ids == view.position_ids);
  CHECK(full.real_positions == view.real_positions);

  Loader loader(off);
  Batch b = loader.get_batch();
  CHECK(b.token_weights().empty());
  CHECK(b.cu_seqlens().empty());
  CHECK(b.num_sequences() == 0);
  CHECK(b.max_seqlen() == 0);
  CHECK(b.y().size() == b.rows() * b.cols());
  return b;  // a batch outlives its loader
}

std::vector<TestEpisode> masked_episodes(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TestEpisode> episodes(count);
  for (std::size_t id = 0; id < count; ++id) {
    const std::size_t n = 2 + rng() % 20;
    for (std::size_t p = 0; p < n; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(100 * id + p + 1));
      episodes[id].mask.push_back(static_cast<std::uint8_t>(rng() % 3 != 0));
    }
  }
  return episodes;
}

}  // namespace

TEST_CASE("contract_fields: sft_episode with it off gives the same x, y and mask and no contract fields") {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(40, 7));
  for (const bool mask : {true, false}) {
    CAPTURE(mask);
    Config on = make_config(dir.path(), 4, 12);
    on.use_loss_mask = mask;
    on.epoch_drop_last = false;  // the last batch has fill rows
    const Batch b = check_without_contract(on, 13, false);
    CHECK(b.labels().empty());
    CHECK(b.position_ids().empty());
    CHECK(b.has_mask() == mask);
  }
}

TEST_CASE("contract_fields: sft_episode with the mask writes it once, as the token weights") {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(10, 3));
  Config c = make_config(dir.path(), 2, 12);
  c.use_loss_mask = true;
  Loader loader(c);
  Batch b = loader.get_batch();
  REQUIRE(b.has_mask());
  CHECK(b.mask().data() == b.token_weights().data());
  CHECK(b.mask().size() == b.token_weights().size());
  for (std::size_t i = 0; i < b.labels().size(); ++i) {
    CHECK(b.labels()[i] == (b.mask()[i] != 0.0f ? b.y()[i] : c.ignore_index));
  }
}

TEST_CASE("contract_fields: token_stream with it off keeps y and the document fields") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(500);
  std::mt19937 rng(11);
  for (auto& t : tokens) t = static_cast<std::uint16_t>(rng() % 7);  // 0 is the end of text
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 0})");
  {
    std::ofstream out(dir / "train.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  for (const bool documents : {true, false}) {
    CAPTURE(documents);
    Config on = make_config(dir.path(), 3, 16);
    on.dataset_mode = DatasetMode::token_stream;
    on.pad_token_id.reset();
    on.document_aware = documents;
    const Batch b = check_without_contract(on, 9, documents);
    CHECK(b.labels().data() == b.y().data());  // y is the labels in this mode, kept
    CHECK(b.position_ids().empty() == !documents);
    CHECK(b.doc_ids().empty() == !documents);
  }
}

TEST_CASE("contract_fields: a config key, and false is refused for sft_packed") {
  Config c;
  set_config_value(c, "contract_fields", "false");
  CHECK_FALSE(c.contract_fields);
  CHECK_THROWS_WITH_AS(set_config_value(c, "contract_fields", "sometimes"), doctest::Contains("contract_fields"), Error);

  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(20, 5));
  Config packed = make_config(dir.path(), 2, 16);
  packed.dataset_mode = DatasetMode::sft_packed;
  packed.contract_fields = false;
  CHECK_THROWS_WITH_AS(Loader{packed}, doctest::Contains("'contract_fields' cannot be false with dataset_mode=sft_packed"),
                       Error);
}
