// Mixtures under a batch-size schedule (a <mixture> with a <shape_schedule>): mixture stages
// and shape stages on one step axis. The reference, written here: a mixture's rows under a
// ramp are the unscheduled mixture's stream of single rows (batch_size 1, world_size 1, the
// same weights) consumed in sequence, its stages (and the trainer's weight changes) moved to
// the rows before their steps. Checked on 1, 2 and 4 ranks, resumed at every step and from 2
// onto 4 ranks, with weight changes inside a shape stage, for episode, token-stream and
// packed sources; the val split stays unscheduled.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>

#include "inspect/mixture_report.hpp"
#include "sampling/mixture_schedule.hpp"
#include "sampling/shape_schedule.hpp"
#include "test_support.hpp"
#include "tokenfeed/audit.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// ---- The arithmetic ----

// The same round-robin on a step axis of single rows, its stages at the rows before their
// steps on `axis`.
MixtureSchedule single_rows(const std::vector<std::string>& names, std::vector<MixtureSchedule::StageSpec> specs,
                            const ShapeSchedule& axis) {
  for (MixtureSchedule::StageSpec& spec : specs) {
    if (spec.until) spec.until = axis.rows_before(*spec.until);
  }
  return MixtureSchedule(names, std::move(specs), 1);
}

TEST_CASE(
    "mixture schedule on a batch-size schedule's steps: every pick is the single-row schedule's, stages moved to "
    "their rows") {
  using G = ShapeSchedule::Given;
  const std::vector<std::string> names = {"a", "b", "c"};
  std::mt19937 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<G> shape;
    std::uint64_t end = 0;
    const int shape_stages = 1 + static_cast<int>(rng() % 4);
    for (int s = 0; s < shape_stages; ++s) {
      end += 1 + rng() % 9;
      shape.push_back(G{s + 1 < shape_stages ? std::optional(end) : std::nullopt, 1 + rng() % 7});
    }
    std::vector<MixtureSchedule::StageSpec> specs;
    std::uint64_t until = 0;
    const int mixture_stages = 1 + static_cast<int>(rng() % 4);
    for (int s = 0; s < mixture_stages; ++s) {
      until += 1 + rng() % 8;
      std::vector<std::string> weights;
      for (int i = 0; i < 3; ++i) weights.push_back(std::to_string(rng() % 4 + (i == s % 3 ? 1 : 0)));
      specs.push_back({weights, s + 1 < mixture_stages ? std::optional(until) : std::nullopt});
    }
    const ShapeSchedule axis(shape);
    CAPTURE(trial);
    const MixtureSchedule scheduled(names, specs, axis);
    const MixtureSchedule reference = single_rows(names, specs, axis);
    for (std::size_t s = 0; s < specs.size(); ++s) {
      CHECK(reference.stage_first_step(s) == axis.rows_before(scheduled.stage_first_step(s)));
    }
    const std::uint64_t rows = axis.rows_before(60);
    for (std::uint64_t g = 0; g < rows; ++g) {
      const MixtureSchedule::Pick got = scheduled.pick(g);
      const MixtureSchedule::Pick want = reference.pick(g);
      CHECK(got.source == want.source);
      CHECK(got.index == want.index);
      for (std::uint32_t i = 0; i < 3; ++i) CHECK(scheduled.rows_before(i, g) == reference.rows_before(i, g));
    }
  }
}

// ---- The loader ----

// Global batches 4, 8, 12: steps 0-2, 3-6, then for ever (multiples of 1, 2 and 4 ranks).
std::vector<ShapeStage> ramp() {
  return {ShapeStage{3, std::nullopt, 4, std::nullopt}, ShapeStage{7, std::nullopt, 8, std::nullopt},
          ShapeStage{std::nullopt, std::nullopt, 12, std::nullopt}};
}

// The rows the ramp's steps before `step` take, written out.
std::int64_t ramp_rows_before(std::int64_t step) {
  if (step <= 3) return 4 * step;
  if (step <= 7) return 12 + 8 * (step - 3);
  return 44 + 12 * (step - 7);
}

// Two episode datasets and a document-aware token stream, each with a val split.
struct Datasets {
  TempDir dir;
  Datasets() {
    write_split(dir / "chat", "train", random_episodes(19, 12, 1));
    write_split(dir / "chat", "val", random_episodes(6, 12, 2));
    write_split(dir / "code", "train", random_episodes(9, 20, 3));
    write_split(dir / "code", "val", random_episodes(5, 20, 4));
    std::vector<std::uint16_t> stream(300);
    for (std::size_t i = 0; i < stream.size(); ++i)
      stream[i] = static_cast<std::uint16_t>(i % 7 == 6 ? 3 : 200 + i % 40);
    for (const char* split : {"train.bin", "val.bin"}) {
      write_raw(dir / "web" / split, stream.data(), stream.size() * sizeof(std::uint16_t));
    }
    write_text(dir / "web" / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 3})");
  }
};

MixtureStage stage(std::optional<std::int64_t> until, std::vector<std::pair<std::string, std::string>> weights) {
  MixtureStage s;
  s.until_step = until;
  s.weights = std::move(weights);
  return s;
}

// chat:3, code:1 (its own seed) and, unless packed, web:2; stages ending at `ends` (steps):
// the sources' weights, then chat:1 web:0, then chat:2 code:0 web:1.
Config mixture(const Datasets& d, std::int64_t batch, std::int64_t world, std::int64_t rank,
               std::pair<std::int64_t, std::int64_t> ends, bool packed = false) {
  Config c = make_config("", batch, 16);
  c.use_loss_mask = true;
  c.world_size = world;
  c.rank = rank;
  c.prefetch_depth = 2;  // earliest_weight_step = the next step + 2
  c.mixture = {{"chat", "3", {{"dataset_dir", (d.dir / "chat").string()}}},
               {"code", "1", {{"dataset_dir", (d.dir / "code").string()}, {"epoch_seed", "7"}}}};
  if (packed) {
    c.dataset_mode = DatasetMode::sft_packed;
  } else {
    c.mixture.push_back({"web",
                         "2",
                         {{"dataset_dir", (d.dir / "web").string()},
                          {"dataset_mode", "token_stream"},
                          {"document_aware", "true"},
                          {"batch_sampling_mode", "epoch"}}});
  }
  c.stages = {stage(ends.first, {}), stage(ends.second, {{"chat", "1"}}),
              stage(std::nullopt, {{"chat", "2"}, {"code", "0"}})};
  if (!packed) {
    c.stages[1].weights.emplace_back("web", "0");
    c.stages[2].weights.emplace_back("web", "1");
  }
  return c;
}

// The ramped mixture on `world` ranks, this one `rank`; stages end at steps 5 and 9 (inside
// the ramp's second and third stages).
Config ramped(const Datasets& d, std::int64_t world, std::int64_t rank, bool packed = false) {
  Config c = mixture(d, 1, world, rank, {5, 9}, packed);
  c.shape_schedule = ramp();
  return c;
}

// The reference: the same mixture at one row a step, its stages at the ramp's rows.
Config single_row(const Datasets& d, bool packed = false) {
  return mixture(d, 1, 1, 0, {ramp_rows_before(5), ramp_rows_before(9)}, packed);
}

// One row of a batch, every field, with its source.
struct Row {
  std::int32_t source = 0;
  std::int64_t id = 0;
  std::vector<std::int64_t> tokens, y, labels;
  std::vector<float> weights;
  std::vector<std::int32_t> positions;
  bool operator==(const Row&) const = default;
};

void add_rows(const Batch& b, std::vector<Row>& out) {
  REQUIRE(b.source_ids().size() == b.rows());
  const std::size_t T = b.cols();
  for (std::size_t r = 0; r < b.rows(); ++r) {
    const auto cut = [&](auto span) { return std::vector(span.begin() + r * T, span.begin() + (r + 1) * T); };
    out.push_back(Row{b.source_ids()[r], b.episode_ids()[r], cut(b.tokens()), cut(b.y()), cut(b.labels()),
                      cut(b.token_weights()), cut(b.position_ids())});
  }
}

using Ranks = std::vector<std::unique_ptr<Loader>>;

Ranks open_ranks(const Datasets& d, std::int64_t world, bool packed = false) {
  Ranks ranks;
  for (std::int64_t r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(ramped(d, world, r, packed)));
  return ranks;
}

// The rows of the next `steps` steps over `ranks` (rank order within a step), each batch's
// rows checked against batch_shape().
std::vector<Row> take(Ranks& ranks, std::uint64_t steps) {
  std::vector<Row> rows;
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (auto& loader : ranks) {
      const Batch b = loader->get_batch();
      REQUIRE(b.rows() == loader->batch_shape("train", b.step()).rows);
      add_rows(b, rows);
    }
  }
  return rows;
}

std::vector<Row> take_rows(Loader& loader, std::uint64_t batches, const char* split = "train") {
  std::vector<Row> rows;
  for (std::uint64_t i = 0; i < batches; ++i) add_rows(loader.get_batch(split), rows);
  return rows;
}

std::vector<Row> rows_from(const std::vector<Row>& all, std::int64_t first, std::int64_t end) {
  return std::vector<Row>(all.begin() + first, all.begin() + end);
}

constexpr std::int64_t kSteps = 14;  // 128 rows

TEST_CASE("mixture under a shape schedule: the rows are the single-row mixture in sequence, on 1, 2 and 4 ranks" *
          doctest::timeout(120)) {
  const Datasets d;
  for (const bool packed : {false, true}) {
    CAPTURE(packed);
    Loader reference(single_row(d, packed));
    const std::vector<Row> expected = take_rows(reference, static_cast<std::uint64_t>(ramp_rows_before(kSteps)));
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      Ranks ranks = open_ranks(d, world, packed);
      CHECK(ranks[0]->batch_shape("train", 2).rows == static_cast<std::size_t>(4 / world));
      CHECK(ranks[0]->batch_shape("train", 3).rows == static_cast<std::size_t>(8 / world));
      CHECK(ranks[0]->batch_shape("train", 7).rows == static_cast<std::size_t>(12 / world));
      CHECK(take(ranks, kSteps) == expected);
    }
  }
  // Without the moved stages (at steps 5 and 9 of single rows) the stream differs: the
  // stages' rows are what the schedule changes.
  Loader unmoved(mixture(d, 1, 1, 0, {5, 9}));
  Ranks one = open_ranks(d, 1);
  CHECK(take_rows(unmoved, static_cast<std::uint64_t>(ramp_rows_before(kSteps))) != take(one, kSteps));
}

TEST_CASE("mixture under a shape schedule: a resume at every step, on 2 and from 2 onto 4 ranks, continues the run" *
          doctest::timeout(240)) {
  const Datasets d;
  Loader reference(single_row(d));
  const std::vector<Row> whole = take_rows(reference, static_cast<std::uint64_t>(ramp_rows_before(kSteps)));
  for (std::int64_t at = 0; at < kSteps; ++at) {
    CAPTURE(at);
    Ranks first = open_ranks(d, 2);
    CHECK(take(first, static_cast<std::uint64_t>(at)) == rows_from(whole, 0, ramp_rows_before(at)));
    const std::string state = first[0]->save_state();
    CHECK(first[1]->save_state() == state);
    for (const std::int64_t world : {2, 4}) {
      CAPTURE(world);
      Ranks resumed = open_ranks(d, world);
      for (auto& loader : resumed) loader->load_state(state);
      CHECK(take(resumed, static_cast<std::uint64_t>(kSteps - at)) ==
            rows_from(whole, ramp_rows_before(at), ramp_rows_before(kSteps)));
    }
  }
}

// The trainer's changes: at step 4 (inside the ramp's steps 3-6, before the config stage at
// 5) and at step 8 (inside steps 7-, before the config stage at 9), made at steps 0 and 4.
void change_weights(Ranks& ranks, std::uint64_t step) {
  for (auto& loader : ranks) {
    if (step == 0) loader->set_mixture_weights({{"chat", "0.5"}, {"code", "4"}}, 4);
    if (step == 4) loader->set_mixture_weights({{"web", "2"}}, 8);
  }
}

TEST_CASE("mixture under a shape schedule: weight changes inside a shape stage start at the rows before their step" *
          doctest::timeout(240)) {
  const Datasets d;
  // A change is a config stage from its step on: here at the rows before steps 4 and 8.
  Config reference = single_row(d);
  reference.stages = {stage(ramp_rows_before(4), {}), stage(ramp_rows_before(5), {{"chat", "0.5"}, {"code", "4"}}),
                      stage(ramp_rows_before(8), {{"chat", "1"}, {"code", "1"}, {"web", "0"}}),
                      stage(ramp_rows_before(9), {{"web", "2"}}),
                      stage(std::nullopt, {{"chat", "2"}, {"code", "0"}, {"web", "1"}})};
  Loader expected(reference);
  const std::vector<Row> whole = take_rows(expected, static_cast<std::uint64_t>(ramp_rows_before(kSteps)));
  for (const std::int64_t world : {1, 2}) {
    CAPTURE(world);
    Ranks ranks = open_ranks(d, world);
    std::vector<Row> got;
    for (std::uint64_t step = 0; step < kSteps; ++step) {
      change_weights(ranks, step);
      const std::vector<Row> rows = take(ranks, 1);
      got.insert(got.end(), rows.begin(), rows.end());
    }
    CHECK(got == whole);
  }
  // Resumed from 2 ranks onto 4 after the changes, at steps inside both shape stages.
  for (const std::int64_t at : {5, 6, 7, 8, 10}) {
    CAPTURE(at);
    Ranks first = open_ranks(d, 2);
    for (std::int64_t step = 0; step < at; ++step) {
      change_weights(first, static_cast<std::uint64_t>(step));
      (void)take(first, 1);
    }
    const std::string state = first[0]->save_state();
    Ranks resumed = open_ranks(d, 4);
    for (auto& loader : resumed) loader->load_state(state);
    CHECK(take(resumed, static_cast<std::uint64_t>(kSteps - at)) ==
          rows_from(whole, ramp_rows_before(at), ramp_rows_before(kSteps)));
  }
}

TEST_CASE(
    "mixture under a shape schedule: val keeps batch_size, the audit log marks both kinds of stage, the "
    "fingerprint covers the ramp" *
    doctest::timeout(120)) {
  const Datasets d;
  // val: the unscheduled mixture's batches (batch_size rows, the stages at their steps).
  Config plain = mixture(d, 2, 1, 0, {5, 9});
  Config scheduled = plain;
  scheduled.shape_schedule = ramp();
  Loader a(plain), b(scheduled);
  CHECK(b.batch_shape("val", 8).rows == 2);
  CHECK(take_rows(b, 12, "val") == take_rows(a, 12, "val"));
  CHECK(a.fingerprint() != b.fingerprint());

  // The ramped run's first 10 steps, and the single-row run's as many rows, logged.
  TempDir logs, single_logs;
  Config logged = ramped(d, 1, 0);
  logged.audit_log_dir = logs.path();
  Config single_logged = single_row(d);
  single_logged.audit_log_dir = single_logs.path();
  std::string state;
  {
    Loader loader(logged);
    for (int i = 0; i < 10; ++i) (void)loader.get_batch();
    state = loader.save_state();
    Loader single(single_logged);
    for (std::int64_t i = 0; i < ramp_rows_before(10); ++i) (void)single.get_batch();
  }
  // An action's events in one line, each as the values of `keys`.
  const auto events = [](const TempDir& dir, const std::string& action, const std::vector<const char*>& keys) {
    std::string out;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      for (const AuditEvent& e : read_audit_log(entry.path()).events) {
        if (e.action != action) continue;
        for (const char* key : keys) out += std::string(e.field(key).value_or("-")) + (key == keys.back() ? " " : ":");
      }
    }
    return out;
  };
  CHECK(events(logs, "shape_stage_start", {"stage", "step", "rows"}) == "0:0:4 1:3:8 2:7:12 ");
  CHECK(events(logs, "stage_start", {"stage", "step"}) == "0:0 1:5 2:9 ");
  // Each source's epochs open and complete over the same rows as in the single-row run (a
  // step writes its events source by source, single rows in row order: compared sorted).
  const auto sorted_events = [&](const TempDir& dir, const char* action) {
    std::istringstream in(events(dir, action, {"source", "epoch", "rows"}));
    std::vector<std::string> out{std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
    std::sort(out.begin(), out.end());
    return out;
  };
  for (const char* action : {"epoch_start", "epoch_complete"}) {
    CAPTURE(action);
    const std::vector<std::string> got = sorted_events(logs, action);
    CHECK(got.size() >= 4);
    CHECK(got == sorted_events(single_logs, action));
  }

  // A state of another ramp is refused naming the schedule; one that differs only after the
  // state's step is accepted (a run extends its schedule).
  Config other = ramped(d, 1, 0);
  other.shape_schedule[1].global_batch_size = 16;
  CHECK(error_of([&] { Loader(other).load_state(state); }, ErrorKind::state).find("shape_schedule") !=
        std::string::npos);
  Config later = ramped(d, 1, 0);
  later.shape_schedule[2].until_step = 12;
  later.shape_schedule.push_back(ShapeStage{std::nullopt, std::nullopt, 4, std::nullopt});
  Loader extended(later);
  extended.load_state(state);
  Loader reference(single_row(d));
  const std::vector<Row> whole = take_rows(reference, static_cast<std::uint64_t>(ramp_rows_before(12)));
  CHECK(take_rows(extended, 2) == rows_from(whole, ramp_rows_before(10), ramp_rows_before(12)));
  CHECK(extended.batch_shape("train", 12).rows == 4);

  // A mixture stage starting where the ramp's rows overflow 64 bits: refused naming both
  // stages, never a stage at a wrapped row.
  Config late = ramped(d, 1, 0);
  late.stages[1].until_step = std::int64_t{1} << 62;
  CHECK(error_of([&] { Loader{late}; })
            .find("mixture stage 2's first step (the until_step before it) x the global_batch_size of "
                  "shape_schedule stage 2") != std::string::npos);
  // A ramp whose global batch the data-parallel size does not divide names the stage.
  Config odd = ramped(d, 4, 0);
  odd.shape_schedule[0].global_batch_size = 6;
  CHECK(error_of([&] { Loader{odd}; }).find("shape_schedule stage 0: global_batch_size=6 is not a multiple") !=
        std::string::npos);
}

TEST_CASE("mixture under a shape schedule: planned_steps and the report count the ramp's rows" *
          doctest::timeout(120)) {
  const Datasets d;
  // Weights from sizes capped over the planned steps: 10 ramped steps are 80 rows, the
  // single-row mixture's 80 steps.
  const auto sized = [](Config c, std::int64_t planned_steps) {
    c.stages.clear();
    for (MixtureSource& s : c.mixture) s.weight = "auto";
    c.mixture[1].max_epochs = 1.0;  // code: capped over 80 rows, not over 40
    c.mixture_temperature = 1.0;
    c.mixture_planned_steps = planned_steps;
    return c;
  };
  const Config ramped_sizes = sized(ramped(d, 2, 1), 10);
  const Config reference_sizes = sized(single_row(d), ramp_rows_before(10));
  const Config naive_sizes = sized(single_row(d), 10 * 4);  // the ramp's first size throughout
  std::vector<std::string> got, want, naive;
  for (std::size_t i = 0; i < 3; ++i) {
    got.push_back(Loader(ramped_sizes).config().mixture[i].weight);
    want.push_back(Loader(reference_sizes).config().mixture[i].weight);
    naive.push_back(Loader(naive_sizes).config().mixture[i].weight);
  }
  CHECK(got == want);
  CHECK(got != naive);
  const MixtureReport report = mixture_report(ramped_sizes, 10, "steps");
  const MixtureReport single = mixture_report(reference_sizes, ramp_rows_before(10), "steps");
  REQUIRE(report.weights_from_sizes);
  REQUIRE(single.weights_from_sizes);
  CHECK(report.weights_from_sizes->sources[1].sized.weight.capped);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(report.weights_from_sizes->sources[i].epochs_in_steps ==
          single.weights_from_sizes->sources[i].epochs_in_steps);
  }
  // Each source's epoch after N steps is the single-row mixture's after the ramp's rows.
  Loader loader(ramped(d, 2, 0));
  Loader reference(single_row(d));
  for (const std::uint64_t steps : {0u, 2u, 3u, 5u, 8u, 13u, 40u}) {
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(steps);
      CAPTURE(i);
      CHECK(loader.source_epoch_after("train", i, steps) ==
            reference.source_epoch_after(
                "train", i, static_cast<std::uint64_t>(ramp_rows_before(static_cast<std::int64_t>(steps)))));
    }
  }
}

}  // namespace

// ---- A sequence-length schedule over episode sources ----

// chat and code (episode sources) and, with `web`, the token stream with random windows;
// the ramp's global batches at block sizes 16 (the key's), 24, then 8, on `world` ranks;
// stages as ramped's. With `block` > 0 instead: the reference, one row a step at that block
// size, the stages at the ramp's rows. With `pieces`, code's rows are pieces of its
// documents drawn at random (truncation=split, batch_sampling_mode=random).
Config episode_mixture(const Datasets& d, bool web, std::int64_t world, std::int64_t rank, std::int64_t block = 0,
                       bool pieces = false) {
  const bool reference = block > 0;
  Config c = reference ? mixture(d, 1, 1, 0, {ramp_rows_before(5), ramp_rows_before(9)}, !web)
                       : mixture(d, 1, world, rank, {5, 9}, !web);
  c.dataset_mode = Config{}.dataset_mode;           // the sources' own
  if (web) c.mixture[2].keys[3].second = "random";  // batch_sampling_mode
  if (pieces) {
    c.mixture[1].keys.emplace_back("truncation", "split");
    c.mixture[1].keys.emplace_back("batch_sampling_mode", "random");
  }
  if (reference) {
    c.block_size = block;
  } else {
    c.shape_schedule = ramp();
    c.shape_schedule[1].block_size = 24;
    c.shape_schedule[2].block_size = 8;
  }
  return c;
}

Ranks open_episode_ranks(const Datasets& d, bool web, std::int64_t world, bool pieces = false) {
  Ranks ranks;
  for (std::int64_t r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Loader>(episode_mixture(d, web, world, r, 0, pieces)));
  return ranks;
}

// Row g of the run is row g of the single-row mixture, kept at the length of its step (with
// `web`, a random window drawn among that length's starts; with `pieces`, code's piece drawn
// among that length's pieces), on 1, 2 and 4 ranks and resumed from 2 onto 4 ranks inside
// each stage.
void check_rows_at_each_length(const Datasets& d, bool web, bool pieces = false) {
  CAPTURE(web);
  CAPTURE(pieces);
  // Row g of the run is row g of the single-row mixture, kept at the length of its step.
  std::map<std::int64_t, std::vector<Row>> at_length;
  const std::uint64_t total = static_cast<std::uint64_t>(ramp_rows_before(kSteps));
  for (const std::int64_t T : {16, 24, 8}) {
    Loader reference(episode_mixture(d, web, 1, 0, T, pieces));
    at_length[T] = take_rows(reference, total);
  }
  std::vector<Row> expected;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    const std::int64_t T = step < 3 ? 16 : step < 7 ? 24 : 8;
    for (std::int64_t g = ramp_rows_before(step); g < ramp_rows_before(step + 1); ++g) {
      expected.push_back(at_length[T][static_cast<std::size_t>(g)]);
    }
  }
  for (const std::int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    Ranks ranks = open_episode_ranks(d, web, world, pieces);
    CHECK(ranks[0]->batch_shape("train", 2).cols == 16);
    CHECK(ranks[0]->batch_shape("train", 3).cols == 24);
    CHECK(ranks[0]->batch_shape("train", 7).cols == 8);
    CHECK(ranks[0]->batch_shape("val", 7).cols == 16);  // val is never scheduled
    CHECK(take(ranks, kSteps) == expected);
  }
  // Resumed at a step inside each stage, from 2 onto 4 ranks.
  for (const std::int64_t at : {2, 4, 8}) {
    CAPTURE(at);
    Ranks two = open_episode_ranks(d, web, 2, pieces);
    take(two, static_cast<std::uint64_t>(at));
    const std::string state = two[0]->save_state();
    Ranks four = open_episode_ranks(d, web, 4, pieces);
    for (auto& loader : four) loader->load_state(state);
    CHECK(take(four, static_cast<std::uint64_t>(kSteps - at)) ==
          rows_from(expected, ramp_rows_before(at), ramp_rows_before(kSteps)));
  }
}

TEST_CASE(
    "mixture under a sequence-length schedule: each row is the single-row mixture's at its step's length, over "
    "episode sources and a token stream's random windows" *
    doctest::timeout(240)) {
  const Datasets d;
  check_rows_at_each_length(d, false);
  check_rows_at_each_length(d, true);
  // Pieces drawn at random (truncation=split): each row among the pieces at its step's
  // length, as the single-row mixture at that length draws it.
  check_rows_at_each_length(d, true, true);
}

// ---- A sequence-length schedule over packed rows and epoch windows ----

namespace {

// The ramp at block sizes 16 (the key's), 24, then 8, stages as ramped's: with `packed`,
// chat and code packed; with `split` their documents cut at each row's length
// (truncation=split: sft_episode rows, or with `packed` cut while packed); else chat, code
// and web's epoch windows (document-aware).
Config length_mixture(const Datasets& d, bool packed, std::int64_t world, std::int64_t rank, bool split = false) {
  Config c = ramped(d, world, rank, packed || split);
  c.shape_schedule[1].block_size = 24;
  c.shape_schedule[2].block_size = 8;
  if (split) {
    if (!packed) c.dataset_mode = DatasetMode::sft_episode;
    c.truncation = Truncation::split;
  }
  return c;
}

std::vector<std::unique_ptr<Loader>> open_length_ranks(const Datasets& d, bool packed, std::int64_t world,
                                                       bool split = false) {
  Ranks ranks;
  for (std::int64_t r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Loader>(length_mixture(d, packed, world, r, split)));
  return ranks;
}

// Source `i` of the mixture alone, one row a step, its rows under `stages` (ends in its own
// rows): what the mixture's rows from it must be.
Config source_alone(const Datasets& d, bool packed, std::size_t i, std::vector<ShapeStage> stages, bool split) {
  const Config mix = length_mixture(d, packed, 1, 0, split);
  Config c = make_config("", 1, 16);
  c.use_loss_mask = mix.use_loss_mask;
  c.dataset_mode = mix.dataset_mode;
  c.truncation = mix.truncation;
  for (const auto& [key, value] : mix.mixture[i].keys) set_config_value(c, key, value);
  c.shape_schedule = std::move(stages);
  return c;
}

// The reference for sources whose row k depends on the lengths of their rows before it: the
// sources each global row takes (the weights alone decide them: read from the unscheduled
// single-row mixture), and each source alone under the ramp's lengths moved to its own rows
// (its rows before each shape stage's first row, counted here). Row g is then source s's
// next row.
std::vector<Row> rows_by_source_alone(const Datasets& d, bool packed, bool split) {
  const auto total = static_cast<std::uint64_t>(ramp_rows_before(kSteps));
  Loader picks_loader(single_row(d, packed || split));
  std::vector<std::int32_t> picks;
  for (const Row& row : take_rows(picks_loader, total)) picks.push_back(row.source);
  const std::size_t sources = packed || split ? 2 : 3;
  std::vector<std::vector<Row>> alone(sources);
  for (std::size_t i = 0; i < sources; ++i) {
    const auto before = [&](std::int64_t row) {
      return std::count(picks.begin(), picks.begin() + row, static_cast<std::int32_t>(i));
    };
    const std::int64_t end16 = before(ramp_rows_before(3)), end24 = before(ramp_rows_before(7));
    REQUIRE(0 < end16);
    REQUIRE(end16 < end24);  // the source has rows at every length
    Loader loader(source_alone(
        d, packed, i,
        {ShapeStage{end16, std::nullopt, std::nullopt, 16}, ShapeStage{end24, std::nullopt, std::nullopt, 24},
         ShapeStage{std::nullopt, std::nullopt, std::nullopt, 8}},
        split));
    const auto rows = static_cast<std::uint64_t>(before(static_cast<std::int64_t>(total)));
    for (std::uint64_t k = 0; k < rows; ++k) {
      const Batch b = loader.get_batch();
      const std::size_t T = b.cols();
      const auto all = [&](auto span) { return std::vector(span.begin(), span.begin() + T); };
      // A packed or token-stream row's y is its labels.
      const auto y = b.y().empty() ? all(b.labels()) : all(b.y());
      alone[i].push_back(Row{static_cast<std::int32_t>(i), b.episode_ids()[0], all(b.tokens()), y, all(b.labels()),
                             all(b.token_weights()), all(b.position_ids())});
    }
  }
  std::vector<Row> expected;
  std::vector<std::size_t> next(sources, 0);
  for (const std::int32_t s : picks) expected.push_back(alone[static_cast<std::size_t>(s)][next[s]++]);
  return expected;
}

void check_rows_follow_lengths(const Datasets& d, bool packed, bool split = false) {
  CAPTURE(packed);
  CAPTURE(split);
  const std::vector<Row> expected = rows_by_source_alone(d, packed, split);
  for (const std::int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    Ranks ranks = open_length_ranks(d, packed, world, split);
    CHECK(ranks[0]->batch_shape("train", 3).cols == 24);
    CHECK(ranks[0]->batch_shape("train", 7).cols == 8);
    CHECK(take(ranks, kSteps) == expected);
  }
  // Resumed on 2 ranks and from 2 onto 4, before, at and after each boundary (3, 5, 7, 9).
  for (const std::int64_t at : {1, 3, 4, 5, 7, 9, 11}) {
    CAPTURE(at);
    Ranks two = open_length_ranks(d, packed, 2, split);
    take(two, static_cast<std::uint64_t>(at));
    const std::string state = two[0]->save_state();
    for (const std::int64_t world : {2, 4}) {
      Ranks resumed = open_length_ranks(d, packed, world, split);
      for (auto& loader : resumed) loader->load_state(state);
      CHECK(take(resumed, static_cast<std::uint64_t>(kSteps - at)) ==
            rows_from(expected, ramp_rows_before(at), ramp_rows_before(kSteps)));
    }
  }
}

}  // namespace

TEST_CASE(
    "mixture under a sequence-length schedule: packed sources and epoch windows give each source's own rows at "
    "the lengths of the steps that take them" *
    doctest::timeout(300)) {
  const Datasets d;
  check_rows_follow_lengths(d, true);
  check_rows_follow_lengths(d, false);
  // Each such source is opened a second time for its train rows, and its open line says so.
  std::mutex mutex;
  std::vector<std::string> opened;
  const LogHandler previous = set_log_handler([&](LogLevel, std::string_view line) {
    const std::lock_guard lock(mutex);
    if (line.find("[tokenfeed] opened ") != std::string_view::npos) opened.emplace_back(line);
  });
  { const Loader loader(length_mixture(d, true, 1, 0)); }
  set_log_handler(previous);
  const auto noted = [&opened](const std::string& name) {
    return std::count_if(opened.begin(), opened.end(), [&name](const std::string& line) {
      return line.find("(mixture source '" + name + "', its train rows by the mixture's shape_schedule)") !=
             std::string::npos;
    });
  };
  CHECK(opened.size() == 4);
  CHECK(noted("chat") == 1);
  CHECK(noted("code") == 1);
}

TEST_CASE(
    "mixture under a sequence-length schedule: sft_episode and sft_packed sources with truncation=split give each "
    "source's own rows, documents cut at the lengths of the steps that take them" *
    doctest::timeout(300)) {
  const Datasets d;
  check_rows_follow_lengths(d, false, true);
  check_rows_follow_lengths(d, true, true);
}

TEST_CASE(
    "mixture under a sequence-length schedule: a weight change re-derives the packed sources' rows of each length "
    "from its step on" *
    doctest::timeout(300)) {
  const Datasets d;
  // A change is a config stage from its step on: here at steps 4 (inside the 24 stage) and 8.
  Config staged = length_mixture(d, true, 1, 0);
  staged.stages = {stage(4, {}), stage(5, {{"chat", "0.5"}, {"code", "4"}}), stage(8, {{"chat", "1"}, {"code", "1"}}),
                   stage(9, {{"code", "3"}}), stage(std::nullopt, {{"chat", "2"}, {"code", "0"}})};
  Loader reference(staged);
  const std::vector<Row> whole = take_rows(reference, kSteps);
  const auto change = [](Ranks& ranks, std::int64_t step) {
    for (auto& loader : ranks) {
      if (step == 0) loader->set_mixture_weights({{"chat", "0.5"}, {"code", "4"}}, 4);
      if (step == 4) loader->set_mixture_weights({{"code", "3"}}, 8);
    }
  };
  for (const std::int64_t at : {0, 6, 9}) {  // uninterrupted, and resumed from 2 onto 4 ranks
    CAPTURE(at);
    Ranks ranks = open_length_ranks(d, true, 2);
    std::vector<Row> got;
    for (std::int64_t step = 0; step < at; ++step) {
      change(ranks, step);
      const std::vector<Row> rows = take(ranks, 1);
      got.insert(got.end(), rows.begin(), rows.end());
    }
    if (at > 0) {
      const std::string state = ranks[0]->save_state();
      ranks = open_length_ranks(d, true, 4);
      for (auto& loader : ranks) loader->load_state(state);
    }
    for (std::int64_t step = at; step < kSteps; ++step) {
      change(ranks, step);
      const std::vector<Row> rows = take(ranks, 1);
      got.insert(got.end(), rows.begin(), rows.end());
    }
    CHECK(got == whole);
  }
}
