// Sequence-length curricula beyond the fixed schedules of the reference tests.
//
// A schedule whose stages all have one block size other than the key's is a curriculum too
// (the rows differ from the key's): its batches must equal those of a loader whose key is
// that length, in every episode mode and in token-stream random and epoch windows.
//
// Resume under random sequence-length curricula: for truncation=split in sft_episode (cut
// epochs, and random draws among the pieces at each step's length) and sft_packed
// (documents cut while packed), and sft_packed without split, many random schedules (stage
// lengths, global batches, ends) with epoch_drop_last true and false, so that epochs end at,
// just before and just after stage boundaries. A state saved after every step, resumed on 1
// rank and on 2, must continue the uninterrupted run row for row. The streams themselves are checked against references
// in test_split_curriculum.cpp, test_split_random_curriculum.cpp, test_packed_curriculum.cpp and
// test_packed_split_curriculum.cpp; this sweep covers the positions those fixed schedules do
// not reach.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "curriculum_support.hpp"
#include "io/npy.hpp"
#include "test_support.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// One row: its episode and every field.
struct SweepRow {
  std::int64_t episode = 0;
  std::vector<std::int64_t> tokens, labels;
  std::vector<std::int32_t> positions;
  bool operator==(const SweepRow&) const = default;
};

std::vector<SweepRow> take_rows(std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps,
                                const RefSchedule& schedule) {
  std::vector<SweepRow> rows;
  read_steps(ranks, steps, schedule, [&](const Batch& b) {
    const std::size_t T = b.cols();
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const auto cut = [&](auto span) { return std::vector(span.begin() + r * T, span.begin() + (r + 1) * T); };
      rows.push_back({b.episode_ids()[r], cut(b.tokens()), cut(b.labels()), cut(b.position_ids())});
    }
  });
  return rows;
}

// A random schedule of 2 or 3 stages over 2 ranks: block sizes among 8..32 (the first the
// key's, 16, or another), global batches 2 or 4, each stage 1 to 5 steps long.
RefSchedule random_schedule(std::mt19937_64& rng) {
  const std::uint64_t lengths[] = {8, 16, 24, 32};
  std::vector<RefStage> stages;
  const std::size_t count = 2 + rng() % 2;
  std::uint64_t end = 0;
  for (std::size_t s = 0; s < count; ++s) {
    end += 1 + rng() % 5;
    stages.push_back({s + 1 == count ? 0 : end, rng() % 2 == 0 ? 2u : 4u, lengths[rng() % 4]});
  }
  return RefSchedule(std::move(stages));
}

struct Mode {
  const char* name;
  DatasetMode mode;
  Truncation truncation;
  bool random = false;  // batch_sampling_mode=random (else the mode's default, epoch)
};

}  // namespace

TEST_CASE("curriculum sweep: stages all at one length other than the key's give the rows of that length" *
          doctest::timeout(120)) {
  TempDir dir;
  write_split(dir.path() / "episodes", "train", random_episodes(12, 70, 32), TokenDtype::uint32, true, 2);
  std::filesystem::create_directories(dir.path() / "stream" / "train");
  {
    std::vector<std::uint16_t> tokens(1500);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i + 1);
    NpyWriter w(dir.path() / "stream" / "train" / "s.npy", "<u2", {tokens.size()});
    w.append(std::span<const std::uint16_t>(tokens));
    w.finish();
  }
  struct Case {
    const char* name;
    DatasetMode mode;
    Truncation truncation;
    SamplingMode sampling;
  };
  const Case cases[] = {{"sft_episode right", DatasetMode::sft_episode, Truncation::right, SamplingMode::epoch},
                        {"sft_episode split", DatasetMode::sft_episode, Truncation::split, SamplingMode::epoch},
                        {"sft_episode split random", DatasetMode::sft_episode, Truncation::split, SamplingMode::random},
                        {"sft_packed right", DatasetMode::sft_packed, Truncation::right, SamplingMode::epoch},
                        {"sft_packed split", DatasetMode::sft_packed, Truncation::split, SamplingMode::epoch},
                        {"token_stream random", DatasetMode::token_stream, Truncation::right, SamplingMode::random},
                        {"token_stream epoch", DatasetMode::token_stream, Truncation::right, SamplingMode::epoch}};
  for (const Case& k : cases) {
    const std::string name = k.name;
    CAPTURE(name);
    const bool stream = k.mode == DatasetMode::token_stream;
    // 3 steps of 4 rows, then 2 rows, all of 24 positions: the key 16 with stages of 24,
    // against the key 24 with stages that set no length.
    const auto config = [&](std::int64_t key, std::optional<std::int64_t> staged) {
      Config c = make_config(dir.path() / (stream ? "stream" : "episodes"), 1, key);
      c.dataset_mode = k.mode;
      c.batch_sampling_mode = k.sampling;
      if (!stream) {
        c.truncation = k.truncation;
        c.use_loss_mask = true;
        c.token_dtype = TokenDtype::uint32;
        c.pack_lookahead = 4;
      }
      c.decode_threads = 1;
      c.shape_schedule = {ShapeStage{3, std::nullopt, 4, staged}, ShapeStage{std::nullopt, std::nullopt, 2, staged}};
      return c;
    };
    Loader staged(config(16, 24)), keyed(config(24, std::nullopt));
    for (std::uint64_t step = 0; step < 12; ++step) {
      CAPTURE(step);
      const Batch a = staged.get_batch();
      const Batch b = keyed.get_batch();
      REQUIRE(a.cols() == 24);
      REQUIRE(a.rows() == b.rows());
      REQUIRE(a.cols() == b.cols());
      const auto same = [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); };
      CHECK(same(a.tokens(), b.tokens()));
      CHECK(same(a.labels(), b.labels()));
      CHECK(same(a.position_ids(), b.position_ids()));
      // Epoch windows under a curriculum are numbered unit x unit tokens + offset (docs/schedules.md).
      if (k.mode != DatasetMode::token_stream || k.sampling == SamplingMode::random)
        CHECK(same(a.episode_ids(), b.episode_ids()));
    }
  }
}

TEST_CASE("curriculum sweep: random schedules, a state after every step resumes the run on 1 and 2 ranks" *
          doctest::timeout(600)) {
  TempDir dir;
  // 10 documents of 2 to 70 tokens: an epoch is a few steps, so epochs end near boundaries.
  write_split(dir.path(), "train", random_episodes(10, 70, 31), TokenDtype::uint32, true, 2);
  std::mt19937_64 rng(20261129);
  constexpr std::uint64_t kRun = 12;
  // The random mode last: the modes before it keep the schedules the generator gave them.
  const Mode modes[] = {{"sft_episode split", DatasetMode::sft_episode, Truncation::split},
                        {"sft_packed split", DatasetMode::sft_packed, Truncation::split},
                        {"sft_packed right", DatasetMode::sft_packed, Truncation::right},
                        {"sft_episode split random", DatasetMode::sft_episode, Truncation::split, true}};
  for (const Mode& mode : modes) {
    for (int trial = 0; trial < 8; ++trial) {
      const RefSchedule schedule = random_schedule(rng);
      const bool drop_last = trial % 2 == 0;
      const std::string name = mode.name;
      CAPTURE(name);
      std::string stages;
      for (const RefStage& st : schedule.stages())
        stages +=
            std::to_string(st.end) + "/" + std::to_string(st.global_batch) + "/" + std::to_string(st.block_size) + " ";
      CAPTURE(stages);
      CAPTURE(trial);
      CAPTURE(drop_last);
      const auto open = [&](std::int64_t world) {
        return open_loaders(world, [&](std::int64_t rank) {
          Config c = curriculum_rank_config(dir.path(), 16, schedule, 5 + static_cast<std::uint32_t>(trial), drop_last,
                                            world, rank);
          c.dataset_mode = mode.mode;
          c.truncation = mode.truncation;
          if (mode.random) c.batch_sampling_mode = SamplingMode::random;
          c.pack_lookahead = 4;
          c.decode_threads = 1;
          return c;
        });
      };
      const auto read = [&](auto& ranks, std::uint64_t steps) { return take_rows(ranks, steps, schedule); };
      auto whole_ranks = open(1);
      const std::vector<SweepRow> whole = read(whole_ranks, kRun);
      for (std::uint64_t at = 1; at < kRun; ++at) {
        CAPTURE(at);
        const std::vector<SweepRow> rest(whole.begin() + static_cast<std::ptrdiff_t>(schedule.rows_before(at)),
                                         whole.end());
        for (const std::int64_t world : {1, 2}) {
          CAPTURE(world);
          auto resumed = resumed_after(open, read, at, 1, world);
          const std::vector<SweepRow> got = read(resumed, kRun - at);
          CHECK(got == rest);
          if (got != rest && world == 1) {
            for (std::size_t i = 0; i < std::min(got.size(), rest.size()); ++i) {
              if (!(got[i] == rest[i])) {
                MESSAGE("first diff row " << i << " got ep " << got[i].episode << " want ep " << rest[i].episode
                                          << " got tok0 " << got[i].tokens[0] << " want " << rest[i].tokens[0]);
                break;
              }
            }
            MESSAGE("sizes " << got.size() << " " << rest.size());
          }
        }
      }
    }
  }
}
