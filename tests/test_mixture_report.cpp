// The mixture's report (src/inspect/mixture_report: what `tokenfeed inspect --config FILE
// --steps N` prints and tokenfeed.inspect(config, steps=N) returns), against figures counted
// here from the datasets' episode lengths and a loader's own batches.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>

#include "inspect/mixture_report.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// chat: 13 episodes of lengths 3, 6, 9, 12 (by id); code: 7 of lengths 5, 11, 2.
struct ReportFixture {
  TempDir dir;
  std::filesystem::path chat = dir / "chat", code = dir / "code";
  const std::vector<std::size_t> chat_lengths{3, 6, 9, 12}, code_lengths{5, 11, 2};
  ReportFixture() {
    write_split(chat, "train", numbered_episodes(13, chat_lengths));
    write_split(code, "train", numbered_episodes(7, code_lengths));
  }
  // chat:3 and code:1 until step 4, then 1:1 until step 20, then chat alone.
  Config mixture() const {
    Config c = make_config("", 4, 8);
    c.use_loss_mask = true;
    c.audit_log_dir = (dir / "audit").string();      // the report runs without it
    c.fields = batch_field_bit(BatchField::tokens);  // the report reads every field it needs
    c.mixture = {{"chat", "3", {{"dataset_dir", chat.string()}}},
                 {"code", "1", {{"dataset_dir", code.string()}, {"epoch_seed", "7"}}}};
    c.stages = {{4, {}}, {20, {{"chat", "1"}}}, {std::nullopt, {{"code", "0"}}}};
    return c;
  }
};

// Per stage and source, counted from a loader's batches: rows, input positions holding the
// episode (its length - 1, at most the block), and positions of non-zero weight.
std::map<std::pair<std::size_t, std::int32_t>, MixtureSourceShare> counted(const ReportFixture& f,
                                                                           std::uint64_t steps) {
  Config config = f.mixture();
  config.audit_log_dir.clear();
  config.fields = kEveryBatchField;
  Loader loader(config);
  std::map<std::pair<std::size_t, std::int32_t>, MixtureSourceShare> out;
  for (std::uint64_t step = 0; step < steps; ++step) {
    const std::size_t stage = step < 4 ? 0 : step < 20 ? 1 : 2;
    Batch b = loader.get_batch("train");
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const std::int32_t source = b.source_ids()[r];
      const auto& lengths = source == 0 ? f.chat_lengths : f.code_lengths;
      const std::size_t length = lengths[static_cast<std::size_t>(b.episode_ids()[r]) % lengths.size()];
      MixtureSourceShare& c = out[{stage, source}];
      c.rows += 1;
      c.real_tokens += std::min<std::size_t>(length - 1, b.cols());
      for (std::size_t p = 0; p < b.cols(); ++p) c.trained_tokens += b.token_weights()[r * b.cols() + p] != 0.0f;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("mixture report: each stage's rows, real and trained tokens per source, and the epochs" *
          doctest::timeout(60)) {
  ReportFixture f;
  const MixtureReport report = mixture_report(f.mixture(), 24, "steps");
  CHECK(report.sources == std::vector<std::string>{"chat", "code"});
  CHECK(report.steps == 24);
  CHECK(report.rank == 0);
  CHECK(report.batch_size == 4);
  CHECK(report.block_size == 8);
  CHECK_FALSE(report.weights_from_sizes.has_value());
  REQUIRE(report.stages.size() == 3);
  const std::uint64_t firsts[] = {0, 4, 20}, lasts[] = {3, 19, 23};
  const auto expected = counted(f, 24);
  for (std::size_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    const MixtureStageFigures& stage = report.stages[s];
    CHECK(stage.first_step == firsts[s]);
    CHECK(stage.last_step == lasts[s]);
    REQUIRE(stage.sources.size() == 2);
    std::uint64_t rows = 0, real = 0, trained = 0;
    for (std::int32_t i = 0; i < 2; ++i) {
      const MixtureSourceShare& got = stage.sources[static_cast<std::size_t>(i)];
      const auto want = expected.find({s, i});
      const MixtureSourceShare none;
      const MixtureSourceShare& w = want == expected.end() ? none : want->second;
      CHECK(got.rows == w.rows);
      CHECK(got.real_tokens == w.real_tokens);
      CHECK(got.trained_tokens == w.trained_tokens);
      rows += got.rows;
      real += got.real_tokens;
      trained += got.trained_tokens;
    }
    CHECK(rows == 4 * (lasts[s] - firsts[s] + 1));
    for (const MixtureSourceShare& got : stage.sources) {
      CHECK(got.row_share == doctest::Approx(100.0 * static_cast<double>(got.rows) / static_cast<double>(rows)));
      CHECK(got.real_share ==
            doctest::Approx(100.0 * static_cast<double>(got.real_tokens) / static_cast<double>(real)));
      CHECK(got.trained_share ==
            doctest::Approx(100.0 * static_cast<double>(got.trained_tokens) / static_cast<double>(trained)));
    }
  }
  // 3:1 over stage 0's 16 rows, 1:1 over stage 1's 64, chat alone over stage 2's 16.
  CHECK(report.stages[0].sources[0].rows == 12);
  CHECK(report.stages[1].sources[1].rows == 32);
  CHECK(report.stages[2].sources[1].rows == 0);
  CHECK(report.stages[2].sources[1].row_share == 0.0);
  // chat: 12 + 32 + 16 = 60 rows of 13 an epoch: epoch 4; code: 4 + 32 = 36 of 7: epoch 5.
  CHECK(report.epochs == std::vector<std::optional<std::uint64_t>>{4, 5});
  CHECK_FALSE(std::filesystem::exists(f.dir / "audit"));  // a look, not a run: no audit log
}

TEST_CASE("mixture report: a stage after the steps read is not reached") {
  ReportFixture f;
  const MixtureReport report = mixture_report(f.mixture(), 6, "steps");
  REQUIRE(report.stages.size() == 3);
  CHECK(report.stages[1].last_step == 5);
  CHECK(report.stages[2].first_step == 20);
  CHECK_FALSE(report.stages[2].last_step.has_value());
  CHECK(report.stages[2].sources.empty());
}

TEST_CASE("mixture report: weights from dataset sizes with the epochs over the steps read" * doctest::timeout(60)) {
  ReportFixture f;
  Config config = f.mixture();
  config.stages.clear();
  config.mixture_temperature = 1.0;
  for (MixtureSource& source : config.mixture) source.weight = "auto";
  const MixtureReport report = mixture_report(config, 10, "steps");
  REQUIRE(report.weights_from_sizes.has_value());
  const MixtureWeightsFromSizes& sizes = *report.weights_from_sizes;
  CHECK(sizes.temperature == 1.0);
  CHECK_FALSE(sizes.planned_steps.has_value());
  REQUIRE(sizes.sources.size() == 2);
  // chat: 13 episodes of 3, 6, 9, 12, ... tokens; code: 7 of 5, 11, 2, ...
  const std::uint64_t tokens[] = {3 + 6 + 9 + 12 + 3 + 6 + 9 + 12 + 3 + 6 + 9 + 12 + 3, 5 + 11 + 2 + 5 + 11 + 2 + 5};
  const std::uint64_t rows_per_epoch[] = {13, 7};
  for (std::size_t i = 0; i < 2; ++i) {
    const MixtureSizedSource& s = sizes.sources[i];
    CHECK(s.sized.name == report.sources[i]);
    CHECK(s.sized.tokens == tokens[i]);
    CHECK(s.sized.rows_per_epoch == rows_per_epoch[i]);
    // Proportional to size, as an exact 6-decimal text.
    const double weight = static_cast<double>(tokens[i]) / static_cast<double>(tokens[0] + tokens[1]);
    CHECK(std::strtod(s.sized.weight.text.c_str(), nullptr) == doctest::Approx(weight).epsilon(1e-5));
    REQUIRE(s.epochs_in_steps.has_value());
    CHECK(*s.epochs_in_steps == doctest::Approx(40.0 * std::strtod(s.sized.weight.text.c_str(), nullptr) /
                                                static_cast<double>(rows_per_epoch[i])));
  }
}

TEST_CASE("mixture report: refusals name the count or the missing mixture") {
  ReportFixture f;
  for (const std::int64_t steps : {std::int64_t{0}, std::int64_t{-3}, kMaxInspectSteps + 1}) {
    CHECK(error_of([&] { mixture_report(f.mixture(), steps, "inspect --steps"); }, ErrorKind::usage) ==
          "inspect --steps " + std::to_string(steps) +
              ": must be in [1, 10000000] (inspect reads every batch of the "
              "steps it describes)");
  }
  CHECK(error_of([&] { mixture_report(make_config(f.chat, 4, 8), 5, "steps"); }, ErrorKind::usage) ==
        "the config has no mixture");
  check_inspect_steps(kMaxInspectSteps, "steps");
}
