// contract_fields: with it off, sft_episode and token_stream batches carry only their own
// view (x, y, mask, document fields), identical to the view with it on, and the contract's
// extra fields are empty; with it on, sft_episode's mask and token weights share one buffer.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <thread>

#include "modes/episode_batch_source.hpp"
#include "pipeline/batch_pool.hpp"
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

namespace {

// Every field of a loader's batches, as a trainer reads them.
struct AllFields {
  View view;
  std::vector<std::int64_t> labels;
  std::vector<float> weights;
  std::vector<std::int32_t> positions, cu_seqlens;
  std::vector<std::size_t> num_sequences, max_seqlen;
};

// What a trainer reads of each batch before step `from` (it reads every field after).
enum class Reads { nothing, view, contract };

// `steps` batches; the first `from` read as `before` says and released, the rest read
// whole (the contract's fields first, so that a batch whose y was deferred too gets it
// through the contract), from step `from` on.
AllFields read_all(const Config& c, std::size_t steps, std::size_t from, Reads before) {
  Loader loader(c);
  AllFields f;
  const auto append = [](auto& to, auto from_span) { to.insert(to.end(), from_span.begin(), from_span.end()); };
  for (std::size_t s = 0; s < steps; ++s) {
    Batch b = loader.get_batch();
    if (s < from) {
      if (before == Reads::view) {
        (void)b.x(), (void)b.y(), (void)b.mask();
      } else if (before == Reads::contract) {
        (void)b.tokens(), (void)b.labels(), (void)b.token_weights(), (void)b.position_ids(), (void)b.cu_seqlens();
      }
      continue;
    }
    append(f.labels, b.labels());
    append(f.positions, b.position_ids());
    append(f.cu_seqlens, b.cu_seqlens());
    f.num_sequences.push_back(b.num_sequences());
    f.max_seqlen.push_back(b.max_seqlen());
    append(f.weights, b.token_weights());
    append(f.view.x, b.x());
    append(f.view.y, b.y());
    append(f.view.mask, b.mask());
  }
  return f;
}

}  // namespace

TEST_CASE("contract_fields: sft_episode's fields a trainer reads late equal the ones written at decode" *
          doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(60, 9));
  for (const Truncation truncation : {Truncation::right, Truncation::split}) {
    for (const bool mask : {true, false}) {
      Config c = make_config(dir.path(), 3, 8);
      c.use_loss_mask = mask;
      c.truncation = truncation;
      c.epoch_drop_last = false;  // batches with fill rows
      c.prefetch_depth = 4;
      c.decode_threads = 2;
      // Every field read from the first batch on: none is ever deferred.
      const AllFields whole = read_all(c, 60, 0, Reads::nothing);
      for (const Reads before : {Reads::nothing, Reads::view, Reads::contract}) {
        CAPTURE(mask);
        CAPTURE(static_cast<int>(truncation));
        CAPTURE(static_cast<int>(before));
        // Read late from step 20 on: the fields not read before were deferred in the
        // batches made until then, which are completed on reading (the first) or on being
        // handed out (the others). Compared from step 20 on.
        const AllFields late = read_all(c, 60, 20, before);
        const std::size_t cells = 3 * 8 * 20;
        const auto tail = [](const auto& v, std::size_t skip) {
          using T = typename std::decay_t<decltype(v)>::value_type;
          return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(skip), v.end());
        };
        CHECK(tail(whole.view.x, cells) == late.view.x);
        CHECK(tail(whole.view.y, cells) == late.view.y);
        CHECK(tail(whole.view.mask, mask ? cells : 0) == late.view.mask);
        CHECK(tail(whole.labels, cells) == late.labels);
        CHECK(tail(whole.weights, cells) == late.weights);
        CHECK(tail(whole.positions, cells) == late.positions);
        CHECK(tail(whole.num_sequences, 20) == late.num_sequences);
        CHECK(tail(whole.max_seqlen, 20) == late.max_seqlen);
        std::size_t sequences = 0;
        for (std::size_t k = 0; k < 20; ++k) sequences += whole.num_sequences[k] + 1;
        CHECK(tail(whole.cu_seqlens, sequences) == late.cu_seqlens);
      }
    }
  }
}

TEST_CASE("contract_fields: two threads reading a deferred field at once both see it complete" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", masked_episodes(40, 4));
  Config c = make_config(dir.path(), 4, 16);
  c.use_loss_mask = true;
  c.prefetch_depth = 8;
  Loader loader(c);
  for (int step = 0; step < 4; ++step) loader.get_batch();  // released unread: y and the contract are deferred
  for (int round = 0; round < 8; ++round) {
    Batch b = loader.get_batch();
    std::vector<std::int64_t> seen[2];
    std::thread other([&] { seen[1] = copy_of(b.labels()); });
    seen[0] = copy_of(b.labels());
    other.join();
    CHECK(seen[0] == seen[1]);
    for (std::size_t i = 0; i < seen[0].size(); ++i) {
      REQUIRE(seen[0][i] == (b.mask()[i] != 0.0f ? b.y()[i] : c.ignore_index));
    }
  }
}

TEST_CASE("contract_fields: a pool defers the fields a released batch left unread, until they are read") {
  detail::BatchShape shape;
  shape.rows = 2;
  shape.cols = 4;
  shape.with_mask = true;
  shape.mask_is_weights = true;
  shape.deferred = &episode_deferred_fields();
  shape.pad_token_id = 5;
  shape.ignore_index = -7;
  auto pool = std::make_shared<detail::BatchPool>(2, shape, "train");
  detail::BatchSlot* slot = pool->acquire();
  slot->begin_batch(0, 0, 0, 2);
  CHECK_FALSE(slot->y_deferred.load());  // nothing is deferred before a batch went unread
  CHECK_FALSE(slot->contract_deferred.load());
  pool->make_batch(slot).release();

  slot = pool->acquire();
  slot->begin_batch(1, 0, 1, 2);
  REQUIRE(slot->y_deferred.load());
  REQUIRE(slot->contract_deferred.load());
  // Row 0: inputs 10 11 12 13 of which three have targets (11 12 13; the middle one
  // without loss); its last target, 13, is also x's next input. Row 1: a fill row.
  slot->x = {10, 11, 12, 13, 5, 5, 5, 5};
  slot->token_weights = {1, 0, 0.5f, 0, 0, 0, 0, 0};
  slot->row_targets = {3, 0};
  slot->row_last_target = {13, 0};
  slot->publish();
  Batch b = pool->make_batch(slot);
  CHECK(copy_of(b.labels()) == std::vector<std::int64_t>{11, -7, 13, -7, -7, -7, -7, -7});
  CHECK(pool->demand().contract_read.load());
  CHECK_FALSE(pool->demand().y_read.load());
  CHECK(copy_of(b.y()) == std::vector<std::int64_t>{11, 12, 13, 5, 5, 5, 5, 5});
  CHECK(copy_of(b.position_ids()) == std::vector<std::int32_t>{0, 1, 2, 0, 0, 1, 2, 3});
  CHECK(copy_of(b.cu_seqlens()) == std::vector<std::int32_t>{0, 3, 4, 8});
  CHECK(b.num_sequences() == 3);
  CHECK(b.max_seqlen() == 4);
  b.release();
  // Once read, the next batches are written whole by their decoders.
  detail::BatchSlot* next = pool->acquire();
  next->begin_batch(2, 0, 2, 2);
  CHECK_FALSE(next->y_deferred.load());
  CHECK_FALSE(next->contract_deferred.load());
}
