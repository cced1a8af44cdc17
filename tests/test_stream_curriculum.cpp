// A sequence-length curriculum over token_stream epoch windows (issue 40): the epoch permutes
// units (the windows of the longest stage length, Lmax + 1 tokens) and each stage cuts them
// in epoch order into rows of its block size + 1 tokens, the last piece of a unit a padded
// partial row. Checked against a reference written here from the token files by plain
// slicing and numpy's permutation, step by step (no use of the loader's arithmetic): each
// row's tokens and labels, each epoch's real tokens covering its units exactly once, ranks
// interleaving to the single-rank stream, exact and elastic resume, and the unscheduled
// loader unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inspect/shape_schedule_report.hpp"
#include "io/npy.hpp"
#include "sampling/numpy_random.hpp"
#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::size_t kLongest = 32;         // the longest stage's block size
constexpr std::size_t kUnit = kLongest + 1;  // tokens per unit
constexpr std::int64_t kIgnore = -100;

// Two files of distinct tokens (file 0's token i is i + 1, file 1's 1001 + i), each with a
// remainder shorter than a unit (unused, as epoch windows leave it).
// With `period`, token i of each file is 1 + i % period instead (documents ending in the
// end-of-text id `period`).
struct Stream {
  TempDir dir;
  std::vector<std::vector<std::int64_t>> files;
  explicit Stream(std::uint16_t period = 0) {
    std::filesystem::create_directories(dir / "train");
    for (const auto& [n, first] : {std::pair<std::size_t, std::uint16_t>{500, 1}, {300, 1001}}) {
      std::vector<std::uint16_t> tokens(n);
      for (std::size_t i = 0; i < n; ++i) {
        tokens[i] = static_cast<std::uint16_t>(period > 0 ? 1 + i % period : first + i);
      }
      NpyWriter w(dir / "train" / ("f" + std::to_string(files.size()) + ".npy"), "<u2", {tokens.size()});
      w.append(std::span<const std::uint16_t>(tokens));
      w.finish();
      files.emplace_back(tokens.begin(), tokens.end());
    }
  }
  // Unit w: the w-th window of kUnit tokens over the files in order (15 in file 0, 9 in 1).
  std::vector<std::int64_t> unit(std::uint64_t w) const {
    for (const auto& f : files) {
      const std::uint64_t in_file = f.size() / kUnit;
      if (w < in_file) {
        const auto at = f.begin() + static_cast<std::ptrdiff_t>(w * kUnit);
        return {at, at + static_cast<std::ptrdiff_t>(kUnit)};
      }
      w -= in_file;
    }
    FAIL("no unit " << w);
    return {};
  }
  std::uint64_t units() const { return files[0].size() / kUnit + files[1].size() / kUnit; }
};

// Block sizes 12 (3 rows a unit, the last of 7 tokens), 32 (the longest: one row a unit),
// then 8 (9 + 9 + 9 + 6): stage 0's 16 rows end inside unit 5, which stage 1 continues.
struct Stage {
  std::uint64_t until, global, block;
};
const std::vector<Stage> kStages{{4, 4, 12}, {9, 8, 32}, {UINT64_MAX, 4, 8}};

std::vector<ShapeStage> schedule() {
  std::vector<ShapeStage> out;
  for (const Stage& s : kStages) {
    ShapeStage stage;
    if (s.until != UINT64_MAX) stage.until_step = static_cast<std::int64_t>(s.until);
    stage.global_batch_size = static_cast<std::int64_t>(s.global);
    stage.block_size = static_cast<std::int64_t>(s.block);
    out.push_back(stage);
  }
  return out;
}

Config config_of(const Stream& data, bool drop_last, std::int64_t world, std::int64_t rank, bool scheduled = true) {
  Config c = make_config(data.dir.path(), 4 / world, 16);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = SamplingMode::epoch;
  c.epoch_drop_last = drop_last;
  c.epoch_seed = 7;
  c.world_size = world;
  c.rank = rank;
  c.decode_threads = 2;
  c.prefetch_depth = 3;
  if (scheduled) c.shape_schedule = schedule();
  return c;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Stream& data, bool drop_last, std::int64_t world) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Loader>(config_of(data, drop_last, world, r)));
  return ranks;
}

struct Row {
  std::uint64_t epoch = 0;
  std::int64_t id = 0;
  std::vector<std::int64_t> x, labels;
  bool operator==(const Row&) const = default;
};

// The rows of the next `steps` steps over `ranks`, rank order within a step.
std::vector<Row> take(std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps) {
  std::vector<Row> rows;
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (auto& loader : ranks) {
      const Batch b = loader->get_batch();
      const std::size_t T = b.cols();
      for (std::size_t r = 0; r < b.rows(); ++r) {
        const auto cut = [&](std::span<const std::int64_t> field) {
          return std::vector<std::int64_t>(field.begin() + static_cast<std::ptrdiff_t>(r * T),
                                           field.begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
        };
        rows.push_back(Row{b.epoch(), b.episode_ids()[r], cut(b.tokens()), cut(b.labels())});
      }
    }
  }
  return rows;
}

// The reference: a cursor (epoch, index into its order, token offset) moved step by step;
// each step lists the pieces left in the epoch at its stride and takes the global batch.
std::vector<Row> reference(const Stream& data, bool drop_last, std::uint64_t steps) {
  const std::uint64_t n = data.units();
  std::vector<Row> rows;
  std::uint64_t epoch = 0, index = 0, offset = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    std::size_t s = 0;
    while (step >= kStages[s].until) ++s;
    const std::uint64_t B = kStages[s].global, T = kStages[s].block;
    struct Piece {
      std::uint64_t index, offset;
    };
    const auto pieces_left = [&] {
      std::vector<Piece> left;
      for (std::uint64_t k = index; k < n; ++k) {
        for (std::uint64_t o = k == index ? offset : 0; o < kUnit; o += T + 1) left.push_back({k, o});
      }
      return left;
    };
    std::vector<Piece> left = pieces_left();
    if (left.empty() || (drop_last && left.size() < B)) {
      ++epoch;
      index = offset = 0;
      left = pieces_left();
    }
    const std::vector<std::uint64_t> order = numpy_permutation(static_cast<std::uint32_t>(7 + epoch), n);
    for (std::uint64_t i = 0; i < B; ++i) {
      Row row{epoch, -1, std::vector<std::int64_t>(T, 0), std::vector<std::int64_t>(T, kIgnore)};
      if (i < left.size()) {
        const std::vector<std::int64_t> unit = data.unit(order[left[i].index]);
        const std::uint64_t o = left[i].offset, tokens = std::min<std::uint64_t>(T + 1, kUnit - o);
        row.id = static_cast<std::int64_t>(order[left[i].index] * kUnit + o);
        for (std::uint64_t j = 0; j + 1 < tokens; ++j) {
          row.x[j] = unit[o + j];
          row.labels[j] = unit[o + j + 1];
        }
        if (tokens - 1 < T) row.x[tokens - 1] = unit[o + tokens - 1];  // a partial row keeps its last token
      }
      rows.push_back(row);
    }
    if (B < left.size()) {
      index = left[B].index;
      offset = left[B].offset;
    } else {
      index = n;
      offset = 0;
    }
  }
  return rows;
}

// A row's real tokens: its inputs with a target, then its last token (the last target, or
// for a partial row the first padding position's input).
std::vector<std::int64_t> real_tokens(const Row& row) {
  std::size_t real = 0;
  while (real < row.labels.size() && row.labels[real] != kIgnore) ++real;
  std::vector<std::int64_t> out(row.x.begin(), row.x.begin() + static_cast<std::ptrdiff_t>(real));
  out.push_back(real < row.x.size() ? row.x[real] : row.labels.back());
  return out;
}

constexpr std::uint64_t kSteps = 40;  // three epochs and the start of a fourth

}  // namespace

TEST_CASE("stream curriculum: epoch windows re-cut at each stage's length equal the reference, and cover every unit" *
          doctest::timeout(120)) {
  const Stream data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    auto one = open_ranks(data, drop_last, 1);
    const std::vector<Row> got = take(one, kSteps);
    const std::vector<Row> want = reference(data, drop_last, kSteps);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == want[i]);
    }
    // Stage 0's last row is cut at token 13 of unit 5 of epoch 0, which stage 1 continues
    // as a partial row of 20 tokens (19 targets, then padding).
    const std::vector<std::uint64_t> order0 = numpy_permutation(7, data.units());
    CHECK(got[15].id == static_cast<std::int64_t>(order0[5] * kUnit));
    CHECK(got[16].id == static_cast<std::int64_t>(order0[5] * kUnit + 13));
    CHECK(real_tokens(got[16]).size() == 20);
    CHECK(got[16].labels[18] != kIgnore);
    CHECK(got[16].labels[19] == kIgnore);
    // Epoch 1, whole in the run: its real tokens, in order, are its units in its order
    // (all of them without drop_last; with it, a prefix whose cut ends a unit or a row).
    std::vector<std::int64_t> delivered;
    for (const Row& row : got) {
      if (row.epoch != 1 || row.id < 0) continue;
      const std::vector<std::int64_t> tokens = real_tokens(row);
      delivered.insert(delivered.end(), tokens.begin(), tokens.end());
    }
    std::vector<std::int64_t> units;
    for (const std::uint64_t w : numpy_permutation(8, data.units())) {
      const std::vector<std::int64_t> unit = data.unit(w);
      units.insert(units.end(), unit.begin(), unit.end());
    }
    if (drop_last) {
      REQUIRE(delivered.size() <= units.size());
      units.resize(delivered.size());
    }
    CHECK(delivered == units);
  }
}

TEST_CASE("stream curriculum: 1, 2 and 4 ranks interleave to the single-rank stream" * doctest::timeout(120)) {
  const Stream data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<Row> want = reference(data, drop_last, 20);
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      auto ranks = open_ranks(data, drop_last, world);
      CHECK(ranks[0]->batch_shape("train", 3).cols == 12);
      CHECK(ranks[0]->batch_shape("train", 4).cols == 32);
      CHECK(ranks[0]->batch_shape("train", 9).cols == 8);
      CHECK(take(ranks, 20) == want);
    }
  }
}

TEST_CASE("stream curriculum: exact resume at every step, and elastic resume from 2 to 4 ranks across a boundary" *
          doctest::timeout(180)) {
  const Stream data;
  constexpr std::uint64_t kRun = 16;
  const std::vector<Row> want = reference(data, false, kRun);
  // Rows before step `at`: 4 a step, then 8 from step 4, then 4 from step 9.
  const auto rows_before = [](std::uint64_t at) {
    return at <= 4 ? at * 4 : at <= 9 ? 16 + (at - 4) * 8 : 56 + (at - 9) * 4;
  };
  const auto tail = [&](std::uint64_t at) {
    return std::vector<Row>(want.begin() + static_cast<std::ptrdiff_t>(rows_before(at)), want.end());
  };
  for (std::uint64_t at = 1; at <= 12; ++at) {
    CAPTURE(at);
    auto first = open_ranks(data, false, 1);
    (void)take(first, at);
    const std::string state = first[0]->save_state();
    auto resumed = open_ranks(data, false, 1);
    resumed[0]->load_state(state);
    CHECK(take(resumed, kRun - at) == tail(at));
  }
  for (const std::uint64_t at : {3u, 4u, 5u, 9u, 10u}) {
    CAPTURE(at);
    auto first = open_ranks(data, false, 2);
    (void)take(first, at);
    const std::string state = first[0]->save_state();
    auto resumed = open_ranks(data, false, 4);
    for (auto& loader : resumed) loader->load_state(state);
    CHECK(take(resumed, kRun - at) == tail(at));
  }
}

TEST_CASE("stream curriculum: without a schedule epoch windows are unchanged" * doctest::timeout(60)) {
  const Stream data;
  Loader loader(config_of(data, true, 1, 0, false));
  // Windows of block_size + 1 = 17 tokens: 29 in file 0, 17 in file 1, in numpy's order.
  const std::uint64_t windows = 500 / 17 + 300 / 17;
  const std::vector<std::uint64_t> order = numpy_permutation(7, windows);
  for (std::uint64_t step = 0; step < 5; ++step) {
    const Batch b = loader.get_batch();
    REQUIRE(b.cols() == 16);
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const std::uint64_t w = order[step * 4 + r];
      CHECK(b.episode_ids()[r] == static_cast<std::int64_t>(w));
      const std::vector<std::int64_t>& file = data.files[w < 29 ? 0 : 1];
      const std::uint64_t start = (w < 29 ? w : w - 29) * 17;
      for (std::size_t j = 0; j < 16; ++j) {
        CHECK(b.tokens()[r * 16 + j] == file[start + j]);
        CHECK(b.labels()[r * 16 + j] == file[start + j + 1]);
      }
    }
  }
}

TEST_CASE("stream curriculum: document-aware rows, partial ones included, restart at each end-of-text" *
          doctest::timeout(120)) {
  constexpr std::int64_t kEos = 11;
  const Stream data(kEos);
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<Row> plain = reference(data, drop_last, kSteps);
    Config c = config_of(data, drop_last, 1, 0);
    c.document_aware = true;
    c.eos_token_id = kEos;
    Loader loader(c);
    std::size_t at = 0, partial = 0;
    for (std::uint64_t step = 0; step < kSteps; ++step) {
      const Batch b = loader.get_batch();
      const std::size_t T = b.cols();
      std::vector<std::int32_t> cu{0};  // the expected sequences: one per document piece
      std::uint64_t real_positions = 0;
      for (std::size_t r = 0; r < b.rows(); ++r, ++at) {
        CAPTURE(step);
        CAPTURE(r);
        const Row& want = plain[at];
        REQUIRE(b.episode_ids()[r] == want.id);
        std::size_t real = 0;
        while (want.id >= 0 && real < T && want.labels[real] != kIgnore) ++real;
        partial += want.id >= 0 && real < T ? 1 : 0;
        real_positions += real;
        std::int32_t doc = 0, position = 0, last_doc = 0;
        for (std::size_t i = 0; i < T; ++i) {
          CAPTURE(i);
          const std::size_t k = r * T + i;
          const bool pad = i >= real;
          if (pad && i == real && real > 0) {
            doc = last_doc + 1;  // the padding: a document of its own, positions from 0
            position = 0;
          }
          last_doc = doc;
          CHECK(b.tokens()[k] == want.x[i]);
          const bool crosses = !pad && want.x[i] == kEos;
          CHECK(b.labels()[k] == (crosses ? kIgnore : want.labels[i]));
          CHECK(b.token_weights()[k] == (pad || crosses ? 0.0f : 1.0f));
          CHECK(b.doc_ids()[k] == doc);
          CHECK(b.position_ids()[k] == position++);
          const bool ends = i + 1 == T || (i + 1 == real) || (!pad && want.x[i] == kEos);
          if (ends) cu.push_back(static_cast<std::int32_t>(r * T + i + 1));
          if (!pad && want.x[i] == kEos) {
            ++doc;
            position = 0;
          }
        }
      }
      CHECK(b.real_positions() == real_positions);
      CHECK(std::vector<std::int32_t>(b.cu_seqlens().begin(), b.cu_seqlens().end()) == cu);
    }
    CHECK(partial > 10);
  }
}

TEST_CASE("stream curriculum: with context parallelism a partial row's pieces are padded, its padding a sequence" *
          doctest::timeout(120)) {
  // cp = 2: every document piece padded to a multiple of 4 (the stage lengths 12, 32 and 8
  // are), in order; what no longer fits in the row is dropped, as in any padded row.
  constexpr std::int64_t kEos = 11;
  const Stream data(kEos);
  Config c = config_of(data, false, 1, 0);
  c.document_aware = true;
  c.eos_token_id = kEos;
  Loader unpadded(c);
  c.context_parallel_size = 2;
  c.world_size = 2;
  Loader padded(c);
  std::size_t partial = 0;
  for (std::uint64_t step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    const Batch a = unpadded.get_batch();
    const Batch b = padded.get_batch();
    const std::size_t T = b.cols();
    REQUIRE(a.cols() == T);
    const auto padded_at = b.cu_seqlens_padded();
    CHECK(static_cast<std::size_t>(padded_at.back()) == b.rows() * T);
    for (std::size_t i = 0; i + 1 < padded_at.size(); ++i) {
      const std::int32_t span = padded_at[i + 1] - padded_at[i], real = b.cu_seqlens()[i + 1] - b.cu_seqlens()[i];
      CHECK(span % 4 == 0);
      CHECK(real <= span);
    }
    for (std::size_t r = 0; r < b.rows(); ++r) {
      CAPTURE(r);
      CHECK(b.episode_ids()[r] == a.episode_ids()[r]);
      // The trained labels, in order: a prefix of the unpadded row's.
      std::vector<std::int64_t> want, got;
      for (std::size_t i = 0; i < T; ++i) {
        if (a.labels()[r * T + i] != kIgnore) want.push_back(a.labels()[r * T + i]);
        if (b.labels()[r * T + i] != kIgnore) got.push_back(b.labels()[r * T + i]);
      }
      REQUIRE(got.size() <= want.size());
      CHECK(std::equal(got.begin(), got.end(), want.begin()));
      // A partial row ends in padding: pad tokens, ignored labels, positions from 0.
      if (a.episode_ids()[r] >= 0 && a.labels()[r * T + T - 1] == kIgnore && a.tokens()[r * T + T - 1] == 0) {
        ++partial;
        CHECK(b.labels()[r * T + T - 1] == kIgnore);
        CHECK(b.token_weights()[r * T + T - 1] == 0.0f);
      }
    }
  }
  CHECK(partial > 10);
}

TEST_CASE("stream curriculum: inspect --steps says where each stage's first row is cut" * doctest::timeout(60)) {
  const Stream data;
  const ShapeScheduleReport report = shape_schedule_report(config_of(data, true, 1, 0), 20, "--steps");
  REQUIRE(report.stages.size() == 3);
  const std::vector<std::uint64_t> order0 = numpy_permutation(7, data.units()),
                                   order2 = numpy_permutation(9, data.units());
  // Stage 0 at unit 0 of epoch 0; stage 1 inside unit 5 (16 rows of 3 a unit); stage 2 in
  // epoch 2 (epoch 1 ends with stage 1: 24 units, 3 batches of 8), at its first unit.
  for (const auto& [s, epoch, batch, unit, offset] :
       {std::tuple{0u, 0u, 0u, order0[0], 0u}, {1u, 0u, 4u, order0[5], 13u}, {2u, 2u, 0u, order2[0], 0u}}) {
    const std::size_t stage = s;  // a structured binding is not captured by CAPTURE's lambda
    CAPTURE(stage);
    const auto& reached = report.stages[stage].reached;
    REQUIRE(reached);
    CHECK(reached->epoch == epoch);
    CHECK(reached->batch_in_epoch == batch);
    CHECK(reached->unit == unit);
    CHECK(reached->offset == offset);
  }
}

TEST_CASE("stream curriculum: a longest stage no file holds one unit of is refused at open, naming the stage") {
  const Stream data;
  Config c = config_of(data, true, 1, 0);
  c.shape_schedule[1].block_size = 600;  // 601 tokens: longer than either file
  CHECK(error_of([&] { Loader{c}; }, ErrorKind::format)
            .find("no file holds one window of shape_schedule stage 1's block_size + 1 (the longest, its epochs' "
                  "units) = 601 tokens") != std::string::npos);
}
