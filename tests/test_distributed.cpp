// Data parallelism without communication between loaders: ranks from the launcher's
// environment, one global stream whatever its split across ranks, and resume at another
// world size with the same global batch.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr const char* kLauncherVariables[] = {"RANK",     "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                              "PMI_RANK", "PMI_SIZE"};

// Sets launcher variables for its lifetime (the others unset), and restores them after.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::map<std::string, std::string>& vars)
      : env_({std::begin(kLauncherVariables), std::end(kLauncherVariables)}, {vars.begin(), vars.end()}) {}

 private:
  ScopedEnv env_;
};

std::string open_line(const Config& c) {
  std::mutex mutex;
  std::string found;
  const LogHandler previous = set_log_handler([&](LogLevel, std::string_view line) {
    std::lock_guard lock(mutex);
    if (line.find("[tokenfeed] opened ") != std::string_view::npos) found = line;
  });
  try {
    Loader loader(c);
  } catch (...) {
    set_log_handler(previous);
    throw;
  }
  set_log_handler(previous);
  return found;
}

void write_stream(const std::filesystem::path& path, std::size_t n) {
  std::vector<std::uint16_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>(i % 60000 + 1);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n * 2));
}

// One dataset of each layout, shared by the cases below.
struct Datasets {
  TempDir sft;     // 50 episodes of 2..40 tokens
  TempDir stream;  // train.bin of 3000 tokens
  Datasets() {
    std::mt19937 rng(5);
    std::vector<TestEpisode> episodes(50);
    for (std::size_t id = 0; id < episodes.size(); ++id) {
      const std::size_t n = 2 + rng() % 39;
      for (std::size_t p = 0; p < n; ++p) {
        episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
        episodes[id].mask.push_back(static_cast<std::uint8_t>(p % 2));
      }
    }
    write_split(sft.path(), "train", episodes, TokenDtype::uint32, true, 2);
    write_stream(stream / "train.bin", 3000);
  }
};

struct Case {
  const char* name;
  DatasetMode mode;
  SamplingMode sampling;
  bool drop_last;
};

Config case_config(const Datasets& data, const Case& k, std::int64_t batch, std::int64_t world, std::int64_t rank) {
  Config c = make_config(k.mode == DatasetMode::token_stream ? data.stream.path() : data.sft.path(), batch, 16);
  c.dataset_mode = k.mode;
  c.batch_sampling_mode = k.sampling;
  c.epoch_drop_last = k.drop_last;
  c.token_dtype = k.mode == DatasetMode::token_stream ? TokenDtype::uint16 : TokenDtype::uint32;
  c.world_size = world;
  c.rank = rank;
  c.decode_threads = 1;
  c.prefetch_depth = 2;
  return c;
}

// One global row: its id, tokens and labels.
struct Row {
  std::int64_t id = 0;
  std::vector<std::int64_t> tokens, labels;
  bool operator==(const Row&) const = default;
};

// The global rows of the next `steps` batches of `ranks` (rank order within a step).
std::vector<Row> global_rows(std::vector<std::unique_ptr<Loader>>& ranks, int steps) {
  std::vector<Row> rows;
  for (int s = 0; s < steps; ++s) {
    for (auto& loader : ranks) {
      Batch b = loader->get_batch();
      const std::size_t T = b.cols();
      for (std::size_t r = 0; r < b.rows(); ++r) {
        Row row;
        row.id = b.episode_ids()[r];
        row.tokens.assign(b.tokens().begin() + static_cast<std::ptrdiff_t>(r * T),
                          b.tokens().begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
        row.labels.assign(b.labels().begin() + static_cast<std::ptrdiff_t>(r * T),
                          b.labels().begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Datasets& data, const Case& k, std::int64_t batch,
                                                std::int64_t world) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Loader>(case_config(data, k, batch, world, r)));
  return ranks;
}

const Case kCases[] = {
    {"sft_episode epoch", DatasetMode::sft_episode, SamplingMode::epoch, true},
    {"sft_episode epoch, drop_last=false", DatasetMode::sft_episode, SamplingMode::epoch, false},
    {"sft_episode random", DatasetMode::sft_episode, SamplingMode::random, true},
    {"sft_packed epoch", DatasetMode::sft_packed, SamplingMode::epoch, true},
    {"sft_packed epoch, drop_last=false", DatasetMode::sft_packed, SamplingMode::epoch, false},
    {"token_stream epoch", DatasetMode::token_stream, SamplingMode::epoch, true},
    {"token_stream random", DatasetMode::token_stream, SamplingMode::random, true},
};

}  // namespace

TEST_CASE(
    "ranks: from the launcher's variables by default or with env, explicit values win, the open line says which") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(16, {4}));
  Config c = make_config(dir.path(), 2, 4);
  REQUIRE(c.rank == kFromLauncher);  // the defaults: from the launcher
  REQUIRE(c.world_size == kFromLauncher);
  {
    LauncherEnv env({});
    CHECK(Loader(c).config().rank == 0);
    CHECK(Loader(c).config().world_size == 1);
    CHECK(open_line(c).find("rank=0 of 1 (no launcher variables: rank 0 of 1)") != std::string::npos);
  }
  {
    LauncherEnv env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
    const Loader loader(c);
    CHECK(loader.config().rank == 2);
    CHECK(loader.config().world_size == 4);
    CHECK(open_line(c).find("rank=2 of 4 (RANK/WORLD_SIZE)") != std::string::npos);
    Config given = c;  // explicit values win
    given.rank = 1;
    given.world_size = 2;
    CHECK(Loader(given).config().rank == 1);
    CHECK(open_line(given).find("rank=1 of 2 (config)") != std::string::npos);
    given.world_size = kFromLauncher;  // one given, one from the launcher
    CHECK(Loader(given).config().world_size == 4);
    CHECK(open_line(given).find("(rank from config, world_size from WORLD_SIZE)") != std::string::npos);
  }
  {
    LauncherEnv env(
        {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
    CHECK(Loader(c).config().rank == 1);
    CHECK(open_line(c).find("(OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)") != std::string::npos);
  }
  {
    LauncherEnv env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
    CHECK(Loader(c).config().world_size == 2);
    CHECK(open_line(c).find("(PMI_RANK/PMI_SIZE)") != std::string::npos);
  }
  // The XML key "env" is the default, spelled out.
  Config xml = parse_config_xml("<training><dataset_dir>" + dir.path().string() +
                                    "</dataset_dir><batch_size>2</batch_size><block_size>4</block_size>"
                                    "<rank>env</rank><world_size>env</world_size><pad_token_id>0</pad_token_id>"
                                    "<audit_log_dir></audit_log_dir></training>",
                                "/");
  CHECK(xml.rank == kFromLauncher);
  CHECK(xml.world_size == kFromLauncher);
  bool printed = false;
  for (const auto& [key, value] : config_entries(xml)) printed |= key == "rank" && value == "env";
  CHECK(printed);
  {
    LauncherEnv env({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
    CHECK(Loader(xml).config().rank == 3);
  }
  // Errors name the variable.
  {
    LauncherEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    CHECK(error_of([&] { Loader loader(c); }).find("rank 4 (from RANK) is outside [0, world_size) = [0, 4)") !=
          std::string::npos);
  }
  {
    LauncherEnv env(std::map<std::string, std::string>{{"RANK", "1"}});
    CHECK(error_of([&] { Loader loader(c); }).find("WORLD_SIZE is not set but RANK is") != std::string::npos);
  }
  {
    LauncherEnv env({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    CHECK(error_of([&] { Loader loader(c); }).find("RANK='one' is not an integer") != std::string::npos);
  }
  {
    LauncherEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    Config given = c;
    given.rank = 2;  // explicit, and outside the launcher's world
    CHECK(error_of([&] { Loader loader(given); }).find("rank 2 (from config)") != std::string::npos);
  }
  CHECK(error_of([&] { set_config_value(c, "rank", "-3"); }).find("'rank'") != std::string::npos);
}

TEST_CASE("ranks from the launcher slice one stream: disjoint, together the single-process stream" *
          doctest::timeout(120)) {
  const Datasets data;
  for (const Case& k : kCases) {
    CAPTURE(k.name);
    std::vector<std::unique_ptr<Loader>> single;
    single.push_back(std::make_unique<Loader>(case_config(data, k, 12, 1, 0)));
    const std::vector<Row> expected = global_rows(single, 6);
    std::vector<std::unique_ptr<Loader>> ranks;
    for (int r = 0; r < 4; ++r) {
      LauncherEnv env({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "4"}});
      Config c = case_config(data, k, 3, kFromLauncher, kFromLauncher);
      ranks.push_back(std::make_unique<Loader>(c));
      CHECK(ranks.back()->config().rank == r);
    }
    CHECK(global_rows(ranks, 6) == expected);
  }
}

TEST_CASE("elastic resume: 3x4 for 7 steps, then 2x6, 4x3 or 1x12 continue the single-process stream of batch 12" *
          doctest::timeout(300)) {
  const Datasets data;
  for (const Case& k : kCases) {
    CAPTURE(k.name);
    std::vector<std::unique_ptr<Loader>> single;
    single.push_back(std::make_unique<Loader>(case_config(data, k, 12, 1, 0)));
    const std::vector<Row> expected = global_rows(single, 16);

    auto first = open_ranks(data, k, 4, 3);
    const std::vector<Row> before = global_rows(first, 7);
    CHECK(before == std::vector<Row>(expected.begin(), expected.begin() + 7 * 12));
    const std::string state = first[0]->save_state();
    for (const auto& other : first) CHECK(other->save_state() == state);  // every rank saves the same

    for (const std::pair<int, int>& split : {std::pair<int, int>{6, 2}, {3, 4}, {12, 1}}) {
      const int batch = split.first, world = split.second;
      CAPTURE(batch);
      CAPTURE(world);
      auto resumed = open_ranks(data, k, batch, world);
      for (auto& loader : resumed) loader->load_state(state);
      CHECK(global_rows(resumed, 9) == std::vector<Row>(expected.begin() + 7 * 12, expected.end()));
    }
  }
}

TEST_CASE("elastic resume: the fingerprint guards the global batch and the order config, naming the field") {
  const Datasets data;
  const Case k{"sft_episode epoch", DatasetMode::sft_episode, SamplingMode::epoch, true};
  Loader saved(case_config(data, k, 4, 3, 1));
  saved.get_batch();
  const std::string state = saved.save_state();
  CHECK(Loader(case_config(data, k, 6, 2, 0)).fingerprint() == saved.fingerprint());

  const std::string other_batch =
      error_of([&] { Loader(case_config(data, k, 4, 2, 0)).load_state(state); }, ErrorKind::state);
  CHECK(other_batch.find("fingerprint") != std::string::npos);
  CHECK(other_batch.find("global_batch_size (batch_size x the data-parallel size) is 12 in the state but 8 here: set "
                         "batch_size x the data-parallel size = 12 (batch_size=6 at data-parallel size 2)") !=
        std::string::npos);
  const std::string indivisible =
      error_of([&] { Loader(case_config(data, k, 2, 5, 0)).load_state(state); }, ErrorKind::state);
  CHECK(indivisible.find("12 is not a multiple of the data-parallel size 5") != std::string::npos);

  Config seed = case_config(data, k, 6, 2, 0);
  seed.epoch_seed = 7;
  CHECK(error_of([&] { Loader(seed).load_state(state); }, ErrorKind::state)
            .find("epoch_seed is 1337 in the state but 7 here: set epoch_seed=1337") != std::string::npos);
  Config random = case_config(data, k, 6, 2, 0);
  random.batch_sampling_mode = SamplingMode::random;
  CHECK(error_of([&] { Loader(random).load_state(state); }, ErrorKind::state)
            .find("batch_sampling_mode is epoch in the state but random here") != std::string::npos);
  TempDir other;
  write_split(other.path(), "train", numbered_episodes(50, {5}), TokenDtype::uint32, true);
  Config moved = case_config(data, k, 6, 2, 0);
  moved.dataset_dir = other.path();
  CHECK(error_of([&] { Loader(moved).load_state(state); }, ErrorKind::state)
            .find("the dataset's 'train' split differs") != std::string::npos);
  // block_size is not part of sft_episode's order.
  Config longer = case_config(data, k, 6, 2, 0);
  longer.block_size = 32;
  Loader(longer).load_state(state);
}

TEST_CASE("a world size whose global batch overflows is a config error naming the keys, in every mode" *
          doctest::timeout(60)) {
  Datasets data;
  for (const Case& k : kCases) {
    CAPTURE(k.name);
    for (const std::int64_t world : {std::int64_t{1} << 62, (std::int64_t{1} << 40) + 1}) {
      CAPTURE(world);
      // The config's own value, and the launcher's (RANK=0 WORLD_SIZE=...).
      const std::string message = error_of([&] { Loader loader(case_config(data, k, 4, world, 0)); });
      CHECK_MESSAGE(message.find("config key 'batch_size' x the data-parallel size = 4 x " + std::to_string(world) +
                                 " exceed 2^40 rows per step") != std::string::npos,
                    message);
      LauncherEnv env({{"RANK", "0"}, {"WORLD_SIZE", std::to_string(world)}});
      Config c = case_config(data, k, 4, 1, 0);
      c.world_size = kFromLauncher;
      c.rank = kFromLauncher;
      CHECK(error_of([&] { Loader loader(c); }).find("'batch_size' x the data-parallel size") != std::string::npos);
    }
  }
}
