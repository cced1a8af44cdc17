// Batch-size schedules (config key shape_schedule): the arithmetic of a stream consumed in
// sequence by batches of changing size, checked against a step-by-step simulation written
// here, and the loader's batches against the unscheduled loader's stream of single rows
// (the epoch order, or the random draws, in sequence): nothing skipped, nothing repeated,
// across ranks, resumes and a change of the data-parallel size.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>
#include <set>

#include "inspect/shape_schedule_report.hpp"
#include "io/npy.hpp"
#include "sampling/shape_schedule.hpp"
#include "test_support.hpp"
#include "tokenfeed/audit.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// ---- The arithmetic against a simulation ----

struct Simulated {
  std::uint64_t epoch, batch_in_epoch, first_row, global_batch;
};

// Consumes epochs of `samples` step by step: a batch that would run past the epoch's end
// (drop_last) or starts at it ends the epoch first.
std::vector<Simulated> simulate(const std::vector<ShapeSchedule::Given>& given, std::uint64_t samples, bool drop_last,
                                std::uint64_t steps) {
  std::vector<Simulated> out;
  std::uint64_t epoch = 0, batch = 0, offset = 0, stage = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    while (given[stage].end_step && step >= *given[stage].end_step) ++stage;
    const std::uint64_t g = given[stage].global_batch;
    if (offset >= samples || (drop_last && offset + g > samples)) {
      ++epoch;
      batch = 0;
      offset = 0;
    }
    out.push_back({epoch, batch, offset, g});
    ++batch;
    offset += g;
  }
  return out;
}

void check_against_simulation(const std::vector<ShapeSchedule::Given>& given, std::uint64_t samples, bool drop_last) {
  std::string stages;
  for (const auto& g : given)
    stages += (g.end_step ? std::to_string(*g.end_step) : "end") + ":" + std::to_string(g.global_batch) + " ";
  CAPTURE(stages);
  CAPTURE(samples);
  CAPTURE(drop_last);
  const ShapeSchedule schedule(given);
  const ScheduledEpochs epochs(schedule, samples, drop_last);
  const std::vector<Simulated> expected = simulate(given, samples, drop_last, 200);
  std::map<std::uint64_t, std::uint64_t> first_step, batches, seen;
  std::uint64_t rows = 0;
  for (std::uint64_t step = 0; step < expected.size(); ++step) {
    const EpochPoint p = epochs.at(step);
    const Simulated& e = expected[step];
    CAPTURE(step);
    CHECK(p.epoch == e.epoch);
    CHECK(p.batch_in_epoch == e.batch_in_epoch);
    CHECK(p.first_row == e.first_row);
    CHECK(p.global_batch == e.global_batch);
    CHECK(schedule.rows_before(step) == rows);
    rows += e.global_batch;
    if (e.batch_in_epoch == 0) first_step[e.epoch] = step;
    ++batches[e.epoch];
    seen[e.epoch] = std::min(samples, e.first_row + e.global_batch);
  }
  const std::uint64_t complete = expected.back().epoch;  // epochs before it are whole
  for (std::uint64_t epoch = 0; epoch < complete; ++epoch) {
    CAPTURE(epoch);
    CHECK(epochs.first_step_of(epoch) == first_step[epoch]);
    CHECK(epochs.batches_in_epoch(epoch) == batches[epoch]);
    CHECK(epochs.samples_in_epoch(epoch) == (drop_last ? seen[epoch] : samples));
  }
}

TEST_CASE("shape schedule arithmetic: positions, epoch starts and lengths equal a step-by-step simulation") {
  using G = ShapeSchedule::Given;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    check_against_simulation({G{std::nullopt, 4}}, 10, drop_last);
    check_against_simulation({G{3, 2}, G{7, 4}, G{std::nullopt, 8}}, 37, drop_last);
    check_against_simulation({G{1, 8}, G{2, 1}, G{50, 3}, G{std::nullopt, 5}}, 23, drop_last);
    // A boundary exactly at an epoch's end, and one whose new size leaves a remainder.
    check_against_simulation({G{5, 4}, G{9, 6}, G{std::nullopt, 2}}, 20, drop_last);
    check_against_simulation({G{2, 7}, G{std::nullopt, 1}}, 7, drop_last);
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<G> given;
    std::uint64_t end = 0;
    const int stages = 1 + static_cast<int>(rng() % 5);
    const std::uint64_t samples = 8 + rng() % 60;
    for (int s = 0; s < stages; ++s) {
      end += 1 + rng() % 25;
      given.push_back(G{s + 1 < stages ? std::optional<std::uint64_t>(end) : std::nullopt, 1 + rng() % 8});
    }
    check_against_simulation(given, samples, (rng() & 1) != 0);
  }
  CHECK(ScheduledEpochs::first_stage_short(ShapeSchedule({G{3, 4}, G{std::nullopt, 12}}), 10, true) == 1);
  CHECK(!ScheduledEpochs::first_stage_short(ShapeSchedule({G{3, 4}, G{std::nullopt, 12}}), 10, false));
}

// ---- The loader ----

struct Dataset {
  TempDir dir;
  Dataset() {
    std::mt19937 rng(3);
    std::vector<TestEpisode> episodes(45);
    for (std::size_t id = 0; id < episodes.size(); ++id) {
      const std::size_t n = 2 + rng() % 30;
      for (std::size_t p = 0; p < n; ++p) episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
    }
    write_split(dir.path(), "train", episodes, TokenDtype::uint32, false, 2);
  }
};

std::vector<ShapeStage> three_stages() {
  // Global batches 4, 8, 12 (multiples of 1, 2 and 4 ranks): 3 steps, 4 steps, then for ever.
  return {ShapeStage{3, std::nullopt, 4, std::nullopt}, ShapeStage{7, std::nullopt, 8, std::nullopt},
          ShapeStage{std::nullopt, std::nullopt, 12, std::nullopt}};
}

// Global batches 4, 8, 12 at block sizes 16 (the key's), 32, then 8: a sequence-length
// curriculum over the episodes (2 to 31 tokens: 8 truncates most, 32 none).
std::vector<ShapeStage> episode_curriculum() {
  return {ShapeStage{3, std::nullopt, 4, std::nullopt}, ShapeStage{7, std::nullopt, 8, 32},
          ShapeStage{std::nullopt, std::nullopt, 12, 8}};
}

Config config_of(const Dataset& data, SamplingMode sampling, bool drop_last, std::int64_t world, std::int64_t rank,
                 bool scheduled = true, const std::vector<ShapeStage>& stages = three_stages()) {
  Config c = make_config(data.dir.path(), 1, 16);
  c.dataset_mode = DatasetMode::sft_episode;
  c.batch_sampling_mode = sampling;
  c.epoch_drop_last = drop_last;
  c.token_dtype = TokenDtype::uint32;
  c.use_loss_mask = false;
  c.world_size = world;
  c.rank = rank;
  c.decode_threads = 1;
  c.prefetch_depth = 3;
  if (scheduled) c.shape_schedule = stages;
  return c;
}

// One row of a batch: its episode and tokens.
struct Row {
  std::int64_t id = 0;
  std::vector<std::int64_t> tokens;
  bool operator==(const Row&) const = default;
};

// The rows of the next `steps` steps over `ranks` (rank order within a step), each batch's
// shape checked against batch_shape().
std::vector<Row> take(std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps) {
  std::vector<Row> rows;
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (auto& loader : ranks) {
      Batch b = loader->get_batch();
      const StepShape shape = loader->batch_shape("train", b.step());
      REQUIRE(b.rows() == shape.rows);
      REQUIRE(b.cols() == shape.cols);
      REQUIRE(b.tokens().size() == b.rows() * b.cols());
      REQUIRE(b.episode_ids().size() == b.rows());
      for (std::size_t r = 0; r < b.rows(); ++r) {
        const auto from = b.tokens().begin() + static_cast<std::ptrdiff_t>(r * b.cols());
        rows.push_back(
            Row{b.episode_ids()[r], std::vector<std::int64_t>(from, from + static_cast<std::ptrdiff_t>(b.cols()))});
      }
    }
  }
  return rows;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Dataset& data, SamplingMode sampling, bool drop_last,
                                                std::int64_t world,
                                                const std::vector<ShapeStage>& stages = three_stages()) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<Loader>(config_of(data, sampling, drop_last, world, r, true, stages)));
  }
  return ranks;
}

// The unscheduled stream of single rows: in epoch mode each epoch's order (drop_last=false
// at batch 1 keeps every id), in random mode the draws of global rows 0, 1, ...; rows of
// `block` positions.
std::vector<std::vector<Row>> single_rows(const Dataset& data, SamplingMode sampling, std::uint64_t rows,
                                          std::int64_t block) {
  Config c = config_of(data, sampling, false, 1, 0, false);
  c.block_size = block;
  Loader loader(c);
  std::vector<std::vector<Row>> epochs(1);
  for (std::uint64_t i = 0; i < rows; ++i) {
    Batch b = loader.get_batch();
    if (sampling == SamplingMode::epoch && b.epoch() + 1 > epochs.size()) epochs.resize(b.epoch() + 1);
    epochs[sampling == SamplingMode::epoch ? b.epoch() : 0].push_back(
        Row{b.episode_ids()[0], std::vector<std::int64_t>(b.tokens().begin(), b.tokens().end())});
  }
  return epochs;
}

// What the scheduled run of `steps` steps over `stages` must give: the single rows consumed
// in sequence (each stage's at its block size, 16 unless it sets one), an epoch's remainder
// smaller than the batch in force skipped (drop_last) or completed with fill rows (id -1,
// pad tokens).
std::vector<Row> expected_stream(const Dataset& data, SamplingMode sampling, bool drop_last, std::uint64_t steps,
                                 const std::vector<ShapeStage>& stages = three_stages()) {
  const auto stage_at = [&](std::uint64_t step) -> const ShapeStage& {
    for (const ShapeStage& s : stages) {
      if (!s.until_step || step < static_cast<std::uint64_t>(*s.until_step)) return s;
    }
    return stages.back();
  };
  std::map<std::int64_t, std::vector<std::vector<Row>>> single;  // by block size
  for (const ShapeStage& s : stages) {
    const std::int64_t block = s.block_size.value_or(16);
    if (single.count(block) == 0) single[block] = single_rows(data, sampling, 400, block);
  }
  std::vector<Row> out;
  std::size_t epoch = 0, offset = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    const ShapeStage& stage = stage_at(step);
    const auto g = static_cast<std::size_t>(*stage.global_batch_size);
    const std::int64_t block = stage.block_size.value_or(16);
    const std::vector<std::vector<Row>>& epochs = single.at(block);
    const std::size_t in_epoch = epochs[epoch].size();
    if (sampling == SamplingMode::epoch && (offset >= in_epoch || (drop_last && offset + g > in_epoch))) {
      ++epoch;
      offset = 0;
    }
    for (std::size_t i = 0; i < g; ++i, ++offset) {
      const std::vector<Row>& in = epochs[epoch];
      out.push_back(offset < in.size() ? in[offset]
                                       : Row{-1, std::vector<std::int64_t>(static_cast<std::size_t>(block), 0)});
    }
  }
  return out;
}

TEST_CASE("shape schedule: the batches of a 3-stage warmup are the stream consumed in sequence, on 1, 2 and 4 ranks" *
          doctest::timeout(120)) {
  for (const SamplingMode sampling : {SamplingMode::epoch, SamplingMode::random}) {
    for (const bool drop_last : {true, false}) {
      CAPTURE(static_cast<int>(sampling));
      CAPTURE(drop_last);
      const Dataset data;
      const std::vector<Row> expected = expected_stream(data, sampling, drop_last, 20);
      for (const std::int64_t world : {1, 2, 4}) {
        CAPTURE(world);
        auto ranks = open_ranks(data, sampling, drop_last, world);
        CHECK(take(ranks, 20) == expected);
      }
    }
  }
}

TEST_CASE("shape schedule: a resume at every step of a 3-stage schedule, and from 2 to 4 ranks, continues the run" *
          doctest::timeout(120)) {
  const Dataset data;
  for (const SamplingMode sampling : {SamplingMode::epoch, SamplingMode::random}) {
    CAPTURE(static_cast<int>(sampling));
    const std::vector<Row> whole = expected_stream(data, sampling, true, 14);
    std::size_t rows_before = 0;
    for (std::uint64_t at = 0; at < 12; ++at) {
      CAPTURE(at);
      auto first = open_ranks(data, sampling, true, 2);
      (void)take(first, at);
      const std::string state = first[0]->save_state();
      CHECK(first[1]->save_state() == state);
      // Elastic: the same global batches on 4 ranks (every stage's is a multiple of 4).
      for (const std::int64_t world : {2, 4}) {
        CAPTURE(world);
        auto resumed = open_ranks(data, sampling, true, world);
        for (auto& loader : resumed) loader->load_state(state);
        const std::vector<Row> rest = take(resumed, 14 - at);
        CHECK(rest == std::vector<Row>(whole.begin() + static_cast<std::ptrdiff_t>(rows_before), whole.end()));
      }
      rows_before += static_cast<std::size_t>(first[0]->batch_shape("train", at).rows * 2);
    }
  }
}

TEST_CASE(
    "shape schedule: sft_episode under a sequence-length curriculum keeps each episode at its batch's length, in "
    "sequence, on 1, 2 and 4 ranks and across resumes" *
    doctest::timeout(120)) {
  const Dataset data;
  const std::vector<ShapeStage> stages = episode_curriculum();
  for (const SamplingMode sampling : {SamplingMode::epoch, SamplingMode::random}) {
    CAPTURE(static_cast<int>(sampling));
    const std::vector<Row> expected = expected_stream(data, sampling, true, 20, stages);
    // The lengths differ: episode 1000k + p tokens are cut at 8, whole at 32.
    REQUIRE(expected[0].tokens.size() == 16);
    REQUIRE(expected[12].tokens.size() == 32);
    REQUIRE(expected[44].tokens.size() == 8);
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      auto ranks = open_ranks(data, sampling, true, world, stages);
      CHECK(ranks[0]->batch_shape("train", 2).cols == 16);
      CHECK(ranks[0]->batch_shape("train", 3).cols == 32);
      CHECK(ranks[0]->batch_shape("train", 7).cols == 8);
      CHECK(take(ranks, 20) == expected);
    }
    // Resume on 4 ranks from a state of 2 at every step of the first 12 (boundaries at 3, 7).
    const std::vector<Row> whole = expected_stream(data, sampling, true, 14, stages);
    std::size_t rows_before = 0;
    for (std::uint64_t at = 0; at < 12; ++at) {
      CAPTURE(at);
      auto first = open_ranks(data, sampling, true, 2, stages);
      (void)take(first, at);
      const std::string state = first[0]->save_state();
      auto resumed = open_ranks(data, sampling, true, 4, stages);
      for (auto& loader : resumed) loader->load_state(state);
      CHECK(take(resumed, 14 - at) ==
            std::vector<Row>(whole.begin() + static_cast<std::ptrdiff_t>(rows_before), whole.end()));
      rows_before += first[0]->batch_shape("train", at).rows * 2;
    }
  }
}

TEST_CASE("shape schedule: its config from XML, its checks naming the stage, and the fingerprint covering it") {
  const Dataset data;
  const std::string xml =
      "<training><dataset_dir>" + data.dir.path().string() +
      "</dataset_dir><batch_size>2</batch_size><block_size>16</block_size><pad_token_id>0</"
      "pad_token_id><token_dtype>uint32</token_dtype>"
      "<shape_schedule><stage until_step=\"3\" global_batch_size=\"4\"/>"
      "<!-- tokens: 8 rows x 16 = 128 a step --><stage until_tokens=\"600\" global_batch_size=\"8\"/>"
      "<stage/></shape_schedule></training>";
  const Config parsed = parse_config_xml(xml, ".");
  REQUIRE(parsed.shape_schedule.size() == 3);
  CHECK(parsed.shape_schedule[1].until_tokens == 600);
  Config c = parsed;
  c.use_loss_mask = false;
  c.audit_log_dir.clear();
  Loader loader(c);
  // Stage 0: steps 0-2 of 4 rows (192 positions); stage 1 ends at the first step by which
  // 600 are trained: 192 + 4 x 128 = 704 >= 600 at step 7; then batch_size 2 again.
  CHECK(loader.batch_shape("train", 2).rows == 4);
  CHECK(loader.batch_shape("train", 3).rows == 8);
  CHECK(loader.batch_shape("train", 6).rows == 8);
  CHECK(loader.batch_shape("train", 7).rows == 2);
  CHECK(loader.config().shape_schedule.size() == 3);

  // A state at step 4 (inside stage 1): a schedule that changes a step taken is refused
  // naming the field, one that changes only later steps accepted (a run extends its
  // schedule), and its next batches are the state's.
  for (int i = 0; i < 4; ++i) (void)loader.get_batch();
  const std::string state = loader.save_state();
  Config other = c;
  other.shape_schedule[0].global_batch_size = 6;
  CHECK(Loader(other).fingerprint() != loader.fingerprint());
  CHECK(error_of([&] { Loader(other).load_state(state); }, ErrorKind::state).find("shape_schedule") !=
        std::string::npos);
  Config later = c;
  later.shape_schedule[2].global_batch_size = 4;
  later.shape_schedule[1].until_tokens = 1000;  // stage 1 now ends at step 10
  Loader extended(later);
  CHECK(extended.fingerprint() != loader.fingerprint());
  extended.load_state(state);
  for (int step = 4; step < 7; ++step) {
    const Batch want = loader.get_batch();
    const Batch got = extended.get_batch();
    CHECK(got.step() == want.step());
    CHECK(std::vector<std::int64_t>(got.episode_ids().begin(), got.episode_ids().end()) ==
          std::vector<std::int64_t>(want.episode_ids().begin(), want.episode_ids().end()));
  }
  CHECK(extended.batch_shape("train", 9).rows == 8);
  CHECK(extended.batch_shape("train", 10).rows == 4);

  Config odd = c;
  odd.world_size = 2;
  odd.rank = 0;
  odd.shape_schedule[1].global_batch_size = 7;
  CHECK(error_of([&] { Loader{odd}; })
            .find("shape_schedule stage 1: global_batch_size=7 is not a multiple of the "
                  "data-parallel size 2") != std::string::npos);
  Config longer = c;
  longer.shape_schedule[1].block_size = 32;
  longer.dataset_mode = DatasetMode::sft_packed;  // packed pieces take a stage's length too
  longer.truncation = Truncation::split;
  CHECK(Loader(longer).batch_shape("train", 3).cols == 32);
  Config early = c;
  early.shape_schedule[1].until_tokens = 100;
  CHECK(error_of([&] { Loader{early}; }).find("until_tokens=100 is reached before the stage starts") !=
        std::string::npos);
  Config big = c;
  big.shape_schedule[2].global_batch_size = 64;
  CHECK(error_of([&] { Loader{big}; }).find("fewer than the global batch of shape_schedule stage 2") !=
        std::string::npos);
  CHECK(error_of([&] {
          parse_config_xml("<training><shape_schedule><stage until_step=\"3\" rows=\"4\"/></shape_schedule></training>",
                           ".");
        }).find("shape_schedule stage 0: unknown key 'rows'") != std::string::npos);
}

// sft_packed: the packed rows of the epochs in sequence (batches continue into the next
// epoch), whatever the size of the step.
std::vector<std::unique_ptr<Loader>> open_packed(const Dataset& data, std::int64_t batch, std::int64_t world,
                                                 bool scheduled) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r) {
    Config c = config_of(data, SamplingMode::epoch, true, world, r, scheduled);
    c.dataset_mode = DatasetMode::sft_packed;
    c.block_size = 32;
    c.batch_size = batch;
    ranks.push_back(std::make_unique<Loader>(c));
  }
  return ranks;
}

TEST_CASE("shape schedule: sft_packed takes its packed rows in sequence, on 1, 2 and 4 ranks and across resumes" *
          doctest::timeout(120)) {
  const Dataset data;
  auto single = open_packed(data, 1, 1, false);
  const std::vector<Row> rows = take(single, 190);  // 3 x 4 + 4 x 8 + 12 x 12 = 188 rows in 19 steps
  for (const std::int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    auto ranks = open_packed(data, 1, world, true);
    CHECK(take(ranks, 19) == std::vector<Row>(rows.begin(), rows.begin() + 188));
  }
  // The audit log marks each stage's first batch (the packed rows are scheduled, not the
  // sampler's episode order).
  {
    TempDir logs;
    Config c = config_of(data, SamplingMode::epoch, true, 1, 0);
    c.dataset_mode = DatasetMode::sft_packed;
    c.block_size = 32;
    c.audit_log_dir = logs.path();
    {
      Loader loader(c);
      for (int i = 0; i < 8; ++i) (void)loader.get_batch();
    }
    std::vector<std::string> starts;
    for (const auto& entry : std::filesystem::directory_iterator(logs.path())) {
      for (const AuditEvent& e : read_audit_log(entry.path()).events) {
        if (e.action == "shape_stage_start") {
          starts.push_back(std::string(*e.field("stage")) + "@" + std::string(*e.field("step")) + ":" +
                           std::string(*e.field("rows")) + " after " + std::string(*e.field("rows_before")) +
                           (e.field("epoch") ? " epoch " + std::string(*e.field("epoch")) : std::string()));
        }
      }
    }
    // The epoch of each stage's first row, from the unscheduled stream of single packed rows.
    std::vector<std::uint64_t> epoch_of_row;
    auto reference = open_packed(data, 1, 1, false);
    for (int row = 0; row < 45; ++row) epoch_of_row.push_back(reference[0]->get_batch().epoch());
    CHECK(epoch_of_row[44] > 0);  // the last stage starts in a later epoch
    CHECK(starts == std::vector<std::string>{"0@0:4 after 0 epoch 0",
                                             "1@3:8 after 12 epoch " + std::to_string(epoch_of_row[12]),
                                             "2@7:12 after 44 epoch " + std::to_string(epoch_of_row[44])});
  }
  for (const std::uint64_t at : {2u, 3u, 6u, 9u}) {
    CAPTURE(at);
    auto first = open_packed(data, 1, 2, true);
    (void)take(first, at);
    const std::string state = first[0]->save_state();
    auto resumed = open_packed(data, 1, 4, true);
    for (auto& loader : resumed) loader->load_state(state);
    const std::size_t before = at <= 3 ? at * 4 : at <= 7 ? 12 + (at - 3) * 8 : 44 + (at - 7) * 12;
    CHECK(take(resumed, 19 - at) ==
          std::vector<Row>(rows.begin() + static_cast<std::ptrdiff_t>(before), rows.begin() + 188));
  }
}

TEST_CASE("shape schedule: inspect's report gives each stage's shape, rows before and first epoch position" *
          doctest::timeout(120)) {
  const Dataset data;
  const std::vector<ShapeSchedule::Given> given{{3, 4}, {7, 8}, {std::nullopt, 12}};
  for (const SamplingMode sampling : {SamplingMode::epoch, SamplingMode::random}) {
    CAPTURE(static_cast<int>(sampling));
    // Rank 1 of 2: rows per rank are half the global batches; the positions are global.
    const ShapeScheduleReport report = shape_schedule_report(config_of(data, sampling, true, 2, 1), 40, "steps");
    CHECK(report.rank == 1);
    CHECK(report.data_parallel_size == 2);
    CHECK(report.read == 8);  // up to the last stage's first batch, not the 40 steps
    const std::vector<Simulated> expected = simulate(given, 45, true, 8);
    REQUIRE(report.stages.size() == 3);
    const std::uint64_t firsts[] = {0, 3, 7}, rows_before[] = {0, 12, 44};
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      const ShapeStageFigures& s = report.stages[i];
      CHECK(s.first_step == firsts[i]);
      CHECK(s.end_step == given[i].end_step);
      CHECK(s.global_batch == given[i].global_batch);
      CHECK(s.rows == given[i].global_batch / 2);
      CHECK(s.block_size == 16);
      CHECK(s.rows_before == rows_before[i]);
      CHECK(s.tokens_before == rows_before[i] * 16);
      REQUIRE(s.reached);
      if (sampling == SamplingMode::epoch) {
        CHECK(s.reached->epoch == expected[firsts[i]].epoch);
        CHECK(s.reached->batch_in_epoch == expected[firsts[i]].batch_in_epoch);
      } else {
        CHECK(!s.reached->epoch);
        CHECK(s.reached->batch_in_epoch == firsts[i]);
      }
    }
  }
  // The last stage in epoch mode starts a new epoch (44 + 12 > 45 rows with drop_last).
  CHECK(simulate(given, 45, true, 8)[7].epoch == 1);
  // Fewer steps than the last stage's first: it is not reached, and no batch past step 3 is read.
  const ShapeScheduleReport early = shape_schedule_report(config_of(data, SamplingMode::epoch, true, 1, 0), 5, "steps");
  CHECK(early.read == 4);
  CHECK(early.stages[1].reached);
  CHECK(!early.stages[2].reached);
  CHECK_THROWS_WITH_AS(shape_schedule_report(config_of(data, SamplingMode::epoch, true, 1, 0, false), 5, "steps"),
                       "the config has no shape_schedule", Error);
  CHECK_THROWS_WITH_AS(shape_schedule_report(config_of(data, SamplingMode::epoch, true, 1, 0), 0, "steps"),
                       doctest::Contains("steps 0: must be in [1, 10000000]"), Error);
}

// ---- A sequence-length curriculum (token_stream, random windows) ----

// Two files of distinct tokens (each token its position + 1, so a window names where it
// starts), one too short for the longest windows near its end.
struct Stream {
  TempDir dir;
  Stream() {
    std::filesystem::create_directories(dir / "train");
    std::uint16_t next = 1;
    for (const std::size_t n : {1500u, 700u}) {
      std::vector<std::uint16_t> tokens(n);
      for (auto& t : tokens) t = next++;
      NpyWriter w(dir / "train" / ("s" + std::to_string(n) + ".npy"), "<u2", {tokens.size()});
      w.append(std::span<const std::uint16_t>(tokens));
      w.finish();
    }
  }
};

// Block sizes 16 (the key), 32, then 8; global batches 4, 8, 4: 3 + 4 steps, then for ever.
std::vector<ShapeStage> curriculum() {
  return {ShapeStage{3, std::nullopt, 4, std::nullopt}, ShapeStage{7, std::nullopt, 8, 32},
          ShapeStage{std::nullopt, std::nullopt, 4, 8}};
}

Config stream_config(const Stream& data, std::int64_t world, std::int64_t rank, std::int64_t block = 16) {
  Config c = make_config(data.dir.path(), 1, block);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = SamplingMode::random;
  c.world_size = world;
  c.rank = rank;
  c.decode_threads = 1;
  c.prefetch_depth = 3;
  return c;
}

std::vector<std::unique_ptr<Loader>> open_curriculum(const Stream& data, std::int64_t world,
                                                     std::vector<ShapeStage> stages = curriculum()) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r) {
    Config c = stream_config(data, world, r);
    c.shape_schedule = stages;
    ranks.push_back(std::make_unique<Loader>(c));
  }
  return ranks;
}

// The expected rows of the first 11 steps (12 + 32 + 16 = 60): global row g of a stage of
// block size T is row g of the unscheduled single-row stream at block size T.
std::vector<Row> curriculum_reference(const Stream& data) {
  std::map<std::int64_t, std::vector<Row>> single;
  for (const std::int64_t block : {16, 32, 8}) {
    std::vector<std::unique_ptr<Loader>> one;
    one.push_back(std::make_unique<Loader>(stream_config(data, 1, 0, block)));
    single[block] = take(one, 60);
  }
  std::vector<Row> rows;
  for (std::size_t g = 0; g < 60; ++g) rows.push_back(single[g < 12 ? 16 : g < 44 ? 32 : 8][g]);
  return rows;
}

TEST_CASE(
    "shape schedule: a sequence-length curriculum draws each stage's windows at its length, on 1, 2 and 4 "
    "ranks and across resumes" *
    doctest::timeout(120)) {
  const Stream data;
  const std::vector<Row> expected = curriculum_reference(data);
  // Every row holds the tokens from its start: a window of T tokens names its length.
  CHECK(expected[0].tokens.size() == 16);
  CHECK(expected[12].tokens.size() == 32);
  CHECK(expected[59].tokens.size() == 8);
  for (const std::int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    auto ranks = open_curriculum(data, world);
    CHECK(ranks[0]->batch_shape("train", 2).cols == 16);
    CHECK(ranks[0]->batch_shape("train", 3).cols == 32);
    CHECK(ranks[0]->batch_shape("train", 7).cols == 8);
    CHECK(take(ranks, 11) == expected);
  }
  for (std::uint64_t at = 1; at < 11; ++at) {
    CAPTURE(at);
    auto first = open_curriculum(data, 2);
    (void)take(first, at);
    const std::string state = first[0]->save_state();
    auto resumed = open_curriculum(data, 4);
    for (auto& loader : resumed) loader->load_state(state);
    const std::size_t before = at <= 3 ? at * 4 : at <= 7 ? 12 + (at - 3) * 8 : 44 + (at - 7) * 4;
    CHECK(take(resumed, 11 - at) ==
          std::vector<Row>(expected.begin() + static_cast<std::ptrdiff_t>(before), expected.end()));
  }
}

TEST_CASE("shape schedule: a curriculum's checks, its fingerprint, and its report") {
  const Stream data;
  // truncation=split: sft_episode cuts its documents at each row's length in epoch order
  // (tests/test_split_curriculum.cpp), draws among the pieces at each step's length in random
  // mode (tests/test_split_random_curriculum.cpp), and sft_packed cuts them while packing.
  {
    const Dataset episodes;
    Config c = config_of(episodes, SamplingMode::epoch, true, 1, 0, true, episode_curriculum());
    c.truncation = Truncation::split;
    CHECK_NOTHROW(Loader{c});
    c.batch_sampling_mode = SamplingMode::random;
    {
      Loader random{c};
      CHECK(random.batch_shape("train", 2).cols == 16);
      CHECK(random.batch_shape("train", 3).cols == 32);
      CHECK(random.batch_shape("train", 7).cols == 8);
      CHECK(random.get_batch().cols() == 16);
    }
    c.batch_sampling_mode = SamplingMode::epoch;
    c.dataset_mode = DatasetMode::sft_packed;  // cut while packed (tests/test_packed_curriculum.cpp)
    CHECK_NOTHROW(Loader{c});
  }
  // A stage longer than every file: refused at open, naming the stage.
  {
    Config c = stream_config(data, 1, 0);
    c.shape_schedule = {ShapeStage{3, std::nullopt, 4, std::nullopt}, ShapeStage{std::nullopt, std::nullopt, 4, 2000}};
    CHECK(error_of([&] { Loader{c}; }, ErrorKind::format)
              .find("no file holds one window of shape_schedule stage 1's block_size + 1 = 2001 tokens") !=
          std::string::npos);
  }
  // The fingerprint names the block sizes: a state resumes when only stages after its step
  // change, and is refused when a block size it took changes.
  auto first = open_curriculum(data, 1);
  (void)take(first, 5);
  const std::string state = first[0]->save_state();
  std::vector<ShapeStage> later = curriculum();
  later[2].block_size = 4;
  auto extended = open_curriculum(data, 1, later);
  CHECK_NOTHROW(extended[0]->load_state(state));
  std::vector<ShapeStage> earlier = curriculum();
  earlier[1].block_size = 64;
  auto changed = open_curriculum(data, 1, earlier);
  CHECK(error_of([&] { changed[0]->load_state(state); }, ErrorKind::state).find("shape_schedule") != std::string::npos);
  // The report's positions count each stage's own block size.
  Config c = stream_config(data, 1, 0);
  c.shape_schedule = curriculum();
  const ShapeScheduleReport report = shape_schedule_report(c, 20, "steps");
  REQUIRE(report.stages.size() == 3);
  CHECK(report.stages[1].block_size == 32);
  CHECK(report.stages[1].tokens_before == 12 * 16);
  CHECK(report.stages[2].tokens_before == 12 * 16 + 32 * 32);
}

}  // namespace
