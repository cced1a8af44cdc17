// sft_packed and the one batch contract: packing invariants, efficiency, determinism,
// resume, turn-aware truncation, and the contract's fields in every mode.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "sampling/episode_packer.hpp"
#include "sampling/numpy_random.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

Config packed_config(const std::filesystem::path& dir, std::int64_t batch, std::int64_t block) {
  Config c = make_config(dir, batch, block);
  c.dataset_mode = DatasetMode::sft_packed;
  c.use_loss_mask = true;
  c.token_dtype = TokenDtype::uint32;
  return c;
}

// Checks every contract invariant of one packed batch against the episodes it holds and
// returns the episodes it saw.
std::vector<std::int64_t> check_packed_batch(const Batch& b, const std::vector<TestEpisode>& episodes, std::size_t T) {
  std::vector<std::int64_t> seen;
  std::vector<bool> covered(b.rows() * T, false);
  std::size_t next_sequence = 0;
  const auto cu = b.cu_seqlens();
  REQUIRE(cu.size() == b.num_sequences() + 1);
  CHECK(cu.front() == 0);
  CHECK(static_cast<std::size_t>(cu.back()) == b.rows() * T);
  std::size_t real = 0;
  for (const PackedSegment& s : b.segments()) {
    const TestEpisode& e = episodes.at(static_cast<std::size_t>(s.episode));
    const std::size_t n = std::min(e.tokens.size(), T + 1);  // truncation=right
    REQUIRE(s.positions == n - 1);
    REQUIRE(s.column + s.positions <= T);
    const std::size_t at = s.row * T + s.column;
    // The segment is one sequence of cu_seqlens.
    while (next_sequence < b.num_sequences() && static_cast<std::size_t>(cu[next_sequence]) < at) ++next_sequence;
    CHECK(static_cast<std::size_t>(cu[next_sequence]) == at);
    CHECK(static_cast<std::size_t>(cu[next_sequence + 1]) == at + s.positions);
    for (std::size_t i = 0; i < s.positions; ++i) {
      CAPTURE(s.episode);
      CAPTURE(i);
      CHECK_FALSE(covered[at + i]);
      covered[at + i] = true;
      CHECK(b.tokens()[at + i] == e.tokens[i]);
      const float w = static_cast<float>(e.mask[i + 1]);  // the mask shifted like the labels
      CHECK(b.token_weights()[at + i] == w);
      CHECK(b.labels()[at + i] == (w != 0.0f ? static_cast<std::int64_t>(e.tokens[i + 1]) : -100));
      CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i));
    }
    real += s.positions;
    seen.push_back(s.episode);
  }
  CHECK(b.real_positions() == real);
  // Everything else is padding: pad tokens, no loss, positions restarting per row.
  for (std::size_t p = 0; p < b.rows() * T; ++p) {
    if (covered[p]) continue;
    CHECK(b.tokens()[p] == 0);
    CHECK(b.labels()[p] == -100);
    CHECK(b.token_weights()[p] == 0.0f);
  }
  // The x/y/mask view is the same data.
  CHECK(b.x().data() == b.tokens().data());
  CHECK(b.y().data() == b.labels().data());
  CHECK(b.mask().data() == b.token_weights().data());
  return seen;
}

// How far a packing moved each episode from its epoch position, against the bounds the
// packer documents (episode_packer.hpp): with L the lookahead, the episode at epoch position
// i placed at position k is at most L - 1 places early (i - k <= L - 1) and at most L - 1
// rows late (row(k) <= row(i) + L - 1, row(i) being the row that holds position i).
struct Displacement {
  std::size_t max_early_places = 0;  // max of i - k
  std::size_t max_late_rows = 0;     // max of row(k) - row(i)
  std::size_t max_late_places = 0;   // max of k - i
  bool bounds_held = true;
};

Displacement displacement(const std::vector<std::uint64_t>& order, const PackedEpoch& packed, std::size_t L) {
  std::map<std::uint64_t, std::size_t> place;  // episode id -> k
  std::vector<std::size_t> row_of(packed.episodes.size());
  for (std::size_t r = 0; r < packed.rows(); ++r) {
    for (std::uint64_t k = packed.row_begin[r]; k < packed.row_begin[r + 1]; ++k) row_of[k] = r;
  }
  for (std::size_t k = 0; k < packed.episodes.size(); ++k) place[packed.episodes[k]] = k;
  Displacement d;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::size_t k = place.at(order[i]);
    if (i > k) d.max_early_places = std::max(d.max_early_places, i - k);
    if (k > i) d.max_late_places = std::max(d.max_late_places, k - i);
    if (row_of[k] > row_of[i]) d.max_late_rows = std::max(d.max_late_rows, row_of[k] - row_of[i]);
    if (i > k + (L - 1) || row_of[k] > row_of[i] + (L - 1)) {
      if (d.bounds_held) MESSAGE("episode " << order[i] << " at epoch position " << i << " placed at " << k);
      d.bounds_held = false;
    }
  }
  return d;
}

}  // namespace

TEST_CASE("packed: every episode exactly once per epoch, each segment its episode's tokens, no crossing") {
  TempDir dir;
  const auto episodes = random_episodes(120, 40, 3);
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 3);
  Config c = packed_config(dir.path(), 3, 32);
  c.epoch_drop_last = false;
  Loader loader(c);
  // Two epochs: each holds every episode exactly once, in batches numbered from 0.
  std::map<std::uint64_t, std::multiset<std::int64_t>> seen;
  std::map<std::uint64_t, std::uint64_t> batches;
  while (true) {
    Batch b = loader.get_batch();
    if (b.epoch() == 2) break;
    CHECK(b.batch_in_epoch() == batches[b.epoch()]++);
    for (auto id : check_packed_batch(b, episodes, 32)) seen[b.epoch()].insert(id);
  }
  for (std::uint64_t epoch : {0u, 1u}) {
    CAPTURE(epoch);
    CHECK(seen[epoch].size() == 120);
    for (std::int64_t id = 0; id < 120; ++id) CHECK(seen[epoch].count(id) == 1);
  }
}

TEST_CASE("packed: reaches >= 95% of positions on log-normal lengths with median T/8, against padded rows") {
  const std::uint32_t T = 512;
  std::mt19937 rng(11);
  std::lognormal_distribution<double> length(std::log(T / 8.0), 0.8);
  const std::size_t n = 4000;
  std::vector<std::uint32_t> positions(n);
  std::uint64_t padded = 0;
  for (auto& p : positions) {
    const auto len = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(length(rng)), 2, T + 1);  // kept length
    p = static_cast<std::uint32_t>(len - 1);
    padded += p;
  }
  std::vector<std::uint64_t> order(n);
  for (std::uint64_t i = 0; i < n; ++i) order[i] = (i * 7919) % n;  // a fixed shuffled order
  const PackedEpoch packed = pack_episodes(order, positions, T, 64);
  const double packed_efficiency = static_cast<double>(packed.positions) / (static_cast<double>(packed.rows()) * T);
  const double padded_efficiency = static_cast<double>(padded) / (static_cast<double>(n) * T);
  MESSAGE("packed " << packed_efficiency << ", padded " << padded_efficiency);
  CHECK(packed_efficiency >= 0.95);
  CHECK(padded_efficiency < 0.2);
  std::multiset<std::uint64_t> placed(packed.episodes.begin(), packed.episodes.end());
  CHECK(placed.size() == n);
  CHECK(std::set<std::uint64_t>(placed.begin(), placed.end()).size() == n);
  // The lookahead bounds how far an episode strays from the epoch order (both sides).
  const Displacement d = displacement(order, packed, 64);
  CHECK(d.bounds_held);
  CHECK(d.max_early_places <= 63);
  CHECK(d.max_late_rows <= 63);
}

TEST_CASE("packed: an episode lands at most lookahead-1 places early and lookahead-1 rows late, and both are reached") {
  // Lengths mixing short episodes with long ones that fit no gap (those wait the longest).
  std::mt19937 rng(2024);
  std::map<std::size_t, Displacement> worst;  // per lookahead, over every dataset
  for (int trial = 0; trial < 240; ++trial) {
    const std::uint32_t capacity = std::vector<std::uint32_t>{16, 64, 256}[rng() % 3];
    const std::size_t n = 50 + rng() % 1200;
    const std::size_t L = std::vector<std::size_t>{1, 2, 3, 5, 8, 64}[static_cast<std::size_t>(trial) % 6];
    std::vector<std::uint32_t> positions(n);
    for (auto& p : positions) {
      p = rng() % 100 < 15 ? capacity / 2 + 1 + static_cast<std::uint32_t>(rng() % (capacity / 2))
                           : 1 + static_cast<std::uint32_t>(rng() % std::max<std::uint32_t>(1, capacity / 10));
    }
    std::vector<std::uint64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const PackedEpoch packed = pack_episodes(order, positions, capacity, L);
    REQUIRE(packed.episodes.size() == n);
    CHECK(std::set<std::uint64_t>(packed.episodes.begin(), packed.episodes.end()).size() == n);
    const Displacement d = displacement(order, packed, L);
    CAPTURE(trial);
    CAPTURE(L);
    CHECK(d.bounds_held);
    Displacement& w = worst[L];
    w.max_early_places = std::max(w.max_early_places, d.max_early_places);
    w.max_late_rows = std::max(w.max_late_rows, d.max_late_rows);
    w.max_late_places = std::max(w.max_late_places, d.max_late_places);
  }
  for (const auto& [L, w] : worst) {
    CAPTURE(L);
    MESSAGE("lookahead " << L << ": early " << w.max_early_places << " places, late " << w.max_late_rows << " rows ("
                         << w.max_late_places << " places)");
    CHECK(w.max_early_places == L - 1);
    if (L <= 8) CHECK(w.max_late_rows == L - 1);  // the late bound is tight, not only an upper bound
  }
  // Late, in places, the wait is not bounded by the lookahead: why the bound is in rows.
  CHECK(worst[64].max_late_places > 64);

  // The loader's own packing, against the numpy epoch order it documents.
  TempDir dir;
  std::vector<TestEpisode> episodes = random_episodes(150, 12, 9);
  for (std::size_t id = 0; id < episodes.size(); id += 6) {  // some long ones, cut to the block
    for (std::size_t p = episodes[id].tokens.size(); p < 30; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
      episodes[id].mask.push_back(1);
    }
  }
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 2);
  for (const std::int64_t L : {1, 4, 16}) {
    Config c = packed_config(dir.path(), 1, 24);
    c.epoch_drop_last = false;
    c.pack_lookahead = L;
    c.epoch_seed = 77;
    Loader loader(c);
    PackedEpoch seen;
    seen.row_begin.push_back(0);
    for (Batch b = loader.get_batch(); b.epoch() == 0; b = loader.get_batch()) {
      for (const PackedSegment& s : b.segments()) seen.episodes.push_back(static_cast<std::uint64_t>(s.episode));
      seen.row_begin.push_back(seen.episodes.size());
    }
    const std::vector<std::uint64_t> order = numpy_permutation(77, episodes.size());
    REQUIRE(seen.episodes.size() == order.size());
    const Displacement d = displacement(order, seen, static_cast<std::size_t>(L));
    CAPTURE(L);
    CHECK(d.bounds_held);
    CHECK(d.max_early_places <= static_cast<std::size_t>(L - 1));
    CHECK(d.max_late_rows <= static_cast<std::size_t>(L - 1));
  }
}

TEST_CASE("packed: identical across threads and depths, and resumed exactly across epochs of different lengths" *
          doctest::timeout(120)) {
  TempDir dir;
  const auto episodes = random_episodes(90, 30, 5);
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 2);
  const auto take = [](Loader& loader, int n) {
    std::vector<std::int64_t> out;
    for (int i = 0; i < n; ++i) {
      Batch b = loader.get_batch();
      out.insert(out.end(), b.tokens().begin(), b.tokens().end());
      out.insert(out.end(), b.labels().begin(), b.labels().end());
      out.push_back(static_cast<std::int64_t>(b.epoch()));
    }
    return out;
  };
  Config c = packed_config(dir.path(), 2, 24);
  c.decode_threads = 1;
  c.prefetch_depth = 1;
  {
    // split_info reports the batches of the epoch the next batch is in.
    Loader counter(c);
    const std::uint64_t epoch0 = counter.split_info("train").batches_per_epoch;
    std::uint64_t batches = 0;
    while (counter.get_batch().epoch() == 0) ++batches;
    CHECK(batches == epoch0);
    const std::uint64_t epoch1 = counter.split_info("train").batches_per_epoch;
    std::uint64_t more = 1;  // the first batch of epoch 1 was taken by the loop above
    while (counter.get_batch().epoch() == 1) ++more;
    CHECK(more == epoch1);
  }
  Loader reference(c);
  const auto all = take(reference, 40);  // several epochs
  for (const int threads : {2, 4}) {
    Config other = c;
    other.decode_threads = threads;
    other.prefetch_depth = 9;
    Loader loader(other);
    CHECK(take(loader, 40) == all);
  }
  const std::size_t per_batch = 2 * 24 * 2 + 1;
  for (const int cut : {1, 13, 27}) {
    std::string state;
    {
      Loader first(c);
      take(first, cut);
      state = first.save_state();
    }
    Loader resumed(c);
    resumed.load_state(state);
    CAPTURE(cut);
    CHECK(take(resumed, 40 - cut) == std::vector<std::int64_t>(all.begin() + cut * per_batch, all.end()));
  }
  Config different = c;
  different.pack_lookahead = 3;
  Loader other(different);
  CHECK_THROWS_AS(other.load_state(reference.save_state()), Error);
}

TEST_CASE("packed: random sampling is refused, and so is a dataset smaller than one global batch of rows") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(6, 8, 1), TokenDtype::uint32);
  Config c = packed_config(dir.path(), 2, 64);
  c.batch_sampling_mode = SamplingMode::random;
  CHECK_THROWS_WITH_AS(Loader{c}, doctest::Contains("needs batch_sampling_mode=epoch"), Error);
  c.batch_sampling_mode.reset();
  c.batch_size = 8;  // six short episodes pack into one row
  CHECK_THROWS_WITH_AS(Loader{c}, doctest::Contains("fewer than one global batch"), Error);
  // Under a batch-size schedule, the largest stage's global batch is named.
  c.batch_size = 1;
  c.shape_schedule = {ShapeStage{2, std::nullopt, std::nullopt, std::nullopt},
                      ShapeStage{std::nullopt, std::nullopt, 4, std::nullopt}};
  CHECK_THROWS_WITH_AS(Loader{c},
                       doctest::Contains("pack into 1 rows, fewer than the largest global batch of the "
                                         "shape_schedule (4 rows) with epoch_drop_last=true"),
                       Error);
}

TEST_CASE("contract: sft_episode rows are one sequence each, labels ignore padding and unmasked positions") {
  TempDir dir;
  const auto episodes = numbered_episodes(6, {3, 9});
  write_split(dir.path(), "train", episodes);
  Config c = make_config(dir.path(), 2, 6);
  c.use_loss_mask = true;
  c.epoch_shuffle = false;
  c.pad_token_id = 5;
  Loader loader(c);
  Batch b = loader.get_batch();
  // Row 0: episode 0 (3 tokens) -> 2 labelled positions; row 1: episode 1 (9 tokens) -> 6.
  CHECK(std::vector<std::int32_t>(b.cu_seqlens().begin(), b.cu_seqlens().end()) == std::vector<std::int32_t>{0, 2, 6, 12});
  CHECK(b.max_seqlen() == 6);
  CHECK(b.real_positions() == 8);
  for (std::size_t i = 0; i < 6; ++i) {
    const bool real = i < 2;
    CHECK(b.labels()[i] == (real && episodes[0].mask[i + 1] ? b.y()[i] : -100));
    CHECK(b.token_weights()[i] == (real ? static_cast<float>(episodes[0].mask[i + 1]) : 0.0f));
    CHECK(b.position_ids()[i] == static_cast<std::int32_t>(real ? i : i - 2));
    CHECK(b.labels()[6 + i] == (episodes[1].mask[i + 1] ? b.y()[6 + i] : -100));
  }
  CHECK(b.y()[2] == 5);  // the episode view keeps the pad in y
  CHECK(b.tokens().data() == b.x().data());
}

TEST_CASE("contract: document-aware token streams have one sequence per document piece") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {5, 6, 0, 7, 8, 9, 0, 0, 4, 4, 4, 4, 4};
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 0})");
  {
    std::filesystem::create_directories(dir / "train");
    std::ofstream out(dir / "train.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  std::filesystem::remove_all(dir / "train");
  Config c = make_config(dir.path(), 1, 8);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = SamplingMode::epoch;
  c.epoch_shuffle = false;
  c.document_aware = true;
  c.pad_token_id.reset();
  Loader loader(c);
  Batch b = loader.get_batch();  // window [5 6 0 7 8 9 0 0 | 4]
  CHECK(std::vector<std::int32_t>(b.cu_seqlens().begin(), b.cu_seqlens().end()) == std::vector<std::int32_t>{0, 3, 7, 8});
  CHECK(std::vector<std::int32_t>(b.position_ids().begin(), b.position_ids().end()) ==
        std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 3, 0});
  CHECK(std::vector<float>(b.token_weights().begin(), b.token_weights().end()) ==
        std::vector<float>{1, 1, 0, 1, 1, 1, 0, 0});
  CHECK(b.labels().data() == b.y().data());
}

TEST_CASE("truncation=drop_oldest_turns drops whole oldest exchanges, keeps the final assistant turn and its end") {
  // Special ids as `tokenfeed prepare` records them.
  const std::uint32_t SYS = 90, USR = 91, AST = 92, EOT = 94;
  TempDir dir;
  write_text(dir / "dataset_metadata.json",
             R"({"token_dtype": "uint16", "eot_token_id": 94,
                 "special_tokens": {"system": 90, "user": 91, "assistant": 92, "tool": 93, "eot": 94}})");
  // [SYS 1 EOT] [USR 2 2 EOT] [AST 3 3 EOT] [USR 4 4 EOT] [AST 5 5 EOT]: 19 tokens.
  std::vector<std::uint32_t> ids = {SYS, 1, EOT, USR, 2, 2, EOT, AST, 3, 3, EOT, USR, 4, 4, EOT, AST, 5, 5, EOT};
  std::vector<std::uint8_t> mask(ids.size(), 0);
  for (std::size_t i = 0; i < ids.size(); ++i) mask[i] = (i >= 8 && i <= 10) || (i >= 16) ? 1 : 0;
  // One turn far too long for the block: a hard cut that keeps the final end-of-turn.
  std::vector<std::uint32_t> long_ids = {SYS, 1, EOT, USR, 2, EOT, AST};
  for (int i = 0; i < 30; ++i) long_ids.push_back(static_cast<std::uint32_t>(10 + i));
  long_ids.push_back(EOT);
  std::vector<std::uint8_t> long_mask(long_ids.size(), 1);
  for (std::size_t i = 0; i <= 6; ++i) long_mask[i] = 0;
  write_split(dir.path(), "train", {{ids, mask}, {long_ids, long_mask}});

  Config c = make_config(dir.path(), 2, 11);  // S = 12 tokens per row
  c.use_loss_mask = true;
  c.epoch_shuffle = false;
  c.truncation = Truncation::drop_oldest_turns;
  Loader loader(c);
  Batch b = loader.get_batch();
  // The first exchange (USR 2 2 EOT, AST 3 3 EOT) goes; the system turn and the last exchange stay.
  const std::vector<std::int64_t> kept = {SYS, 1, EOT, USR, 4, 4, EOT, AST, 5, 5, EOT};
  CHECK(std::vector<std::int64_t>(b.x().begin(), b.x().begin() + 11) == kept);
  CHECK(std::vector<std::int64_t>(b.y().begin(), b.y().begin() + 10) ==
        std::vector<std::int64_t>(kept.begin() + 1, kept.end()));
  // The mask follows the kept tokens: only the final assistant reply and its end-of-turn.
  const std::vector<float> expected_mask = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0};
  CHECK(std::vector<float>(b.mask().begin(), b.mask().begin() + 11) == expected_mask);
  // The long episode: its last 12 tokens, ending with the final end-of-turn as a target.
  const std::vector<std::int64_t> row1(b.x().begin() + 11, b.x().end());
  CHECK(b.y()[21] == EOT);
  CHECK(row1.back() == 39);
  CHECK(b.mask()[21] == 1.0f);

  // Under a sequence-length curriculum each batch keeps its episodes' turns at its own
  // length: 18 positions (S = 19) hold the first episode whole, then 11 drop its first
  // exchange as above.
  Config curriculum = c;
  curriculum.shape_schedule = {ShapeStage{1, std::nullopt, std::nullopt, 18}, ShapeStage{}};
  Loader staged(curriculum);
  Batch wide = staged.get_batch();
  REQUIRE(wide.cols() == 18);
  CHECK(std::vector<std::int64_t>(wide.x().begin(), wide.x().begin() + 18) ==
        std::vector<std::int64_t>(ids.begin(), ids.begin() + 18));
  CHECK(wide.y()[18 + 17] == EOT);  // the long episode still ends with its final end-of-turn
  Batch narrow = staged.get_batch();
  REQUIRE(narrow.cols() == 11);
  CHECK(std::vector<std::int64_t>(narrow.x().begin(), narrow.x().begin() + 11) == kept);
  CHECK(std::vector<std::int64_t>(narrow.x().begin() + 11, narrow.x().end()) == row1);

  Config right = c;
  right.truncation = Truncation::right;
  Loader plain(right);
  Batch r = plain.get_batch();
  CHECK(std::vector<std::int64_t>(r.x().begin(), r.x().begin() + 11) ==
        std::vector<std::int64_t>(ids.begin(), ids.begin() + 11));

  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eot_token_id": 94})");
  CHECK_THROWS_WITH_AS(Loader{c}, doctest::Contains("no special_tokens"), Error);
}
