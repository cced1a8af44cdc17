// The Loader end to end: the padding rule, mask alignment, fill rows, determinism across
// threads and depths, exact resume, errors, logging and the audit trail.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include "sampling/numpy_random.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/state_file.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Every field of the next `n` batches, flattened, for equality checks.
struct Stream {
  std::vector<std::int64_t> x, y, ids;
  std::vector<float> mask;
  std::vector<std::uint64_t> epochs, real_rows;
  bool operator==(const Stream&) const = default;
};

Stream take(Loader& loader, int n, const char* split = "train") {
  Stream s;
  for (int i = 0; i < n; ++i) {
    Batch b = loader.get_batch(split);
    s.x.insert(s.x.end(), b.x().begin(), b.x().end());
    s.y.insert(s.y.end(), b.y().begin(), b.y().end());
    s.mask.insert(s.mask.end(), b.mask().begin(), b.mask().end());
    s.ids.insert(s.ids.end(), b.episode_ids().begin(), b.episode_ids().end());
    s.epochs.push_back(b.epoch());
    s.real_rows.push_back(b.real_rows());
  }
  return s;
}

// Captures log lines for the lifetime of the object.
class LogCapture {
 public:
  LogCapture() {
    previous_ = set_log_handler([this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { set_log_handler(previous_); }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
  LogHandler previous_;
};

std::string loader_error(const Config& config, ErrorKind kind) {
  return test::error_of([&] { Loader loader(config); }, kind);
}

}  // namespace

TEST_CASE("loader: the padding rule, truncation and mask alignment, row by row") {
  TempDir dir;
  // Lengths around block_size + 1 = 5: shorter, exact, longer.
  const auto episodes = numbered_episodes(6, {2, 4, 5, 6, 9, 3});
  write_split(dir.path(), "train", episodes);
  Config c = make_config(dir.path(), 3, 4);
  c.use_loss_mask = true;
  c.epoch_shuffle = false;
  c.pad_token_id = 7;
  Loader loader(c);
  const std::size_t T = 4, L = 5;
  for (int b = 0; b < 2; ++b) {
    Batch batch = loader.get_batch();
    REQUIRE(batch.rows() == 3);
    REQUIRE(batch.cols() == T);
    REQUIRE(batch.has_mask());
    CHECK(batch.real_rows() == 3);
    for (std::size_t r = 0; r < 3; ++r) {
      const auto id = batch.episode_ids()[r];
      CHECK(id == static_cast<std::int64_t>(b * 3 + r));
      const TestEpisode& e = episodes[static_cast<std::size_t>(id)];
      std::vector<std::int64_t> t(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(std::min(e.tokens.size(), L)));
      std::vector<float> m(e.mask.begin(), e.mask.begin() + static_cast<std::ptrdiff_t>(std::min(e.mask.size(), L)));
      t.resize(L, 7);
      m.resize(L, 0.0f);
      for (std::size_t i = 0; i < T; ++i) {
        CAPTURE(id);
        CAPTURE(i);
        CHECK(batch.x()[r * T + i] == t[i]);
        CHECK(batch.y()[r * T + i] == t[i + 1]);
        CHECK(batch.mask()[r * T + i] == m[i + 1]);  // aligned to y
      }
    }
  }
}

TEST_CASE("loader: drop_last=false completes the last batch with fill rows (x = y = pad, mask 0, id -1)") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(7, {3, 6}));
  Config c = make_config(dir.path(), 4, 4);
  c.use_loss_mask = true;
  c.epoch_drop_last = false;
  c.pad_token_id = 9;
  Loader loader(c);
  CHECK(loader.split_info("train").batches_per_epoch == 2);
  std::multiset<std::int64_t> seen;
  for (int epoch = 0; epoch < 2; ++epoch) {
    seen.clear();
    Batch first = loader.get_batch();
    CHECK(first.real_rows() == 4);
    for (auto id : first.episode_ids()) seen.insert(id);
    first.release();
    Batch last = loader.get_batch();
    CHECK(last.epoch() == static_cast<std::uint64_t>(epoch));
    CHECK(last.real_rows() == 3);
    CHECK(last.episode_ids()[3] == -1);
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(last.x()[12 + i] == 9);
      CHECK(last.y()[12 + i] == 9);
      CHECK(last.mask()[12 + i] == 0.0f);
    }
    for (auto id : last.episode_ids()) seen.insert(id);
    for (std::int64_t id = 0; id < 7; ++id) CHECK(seen.count(id) == 1);  // every kept id once per epoch
  }
}

TEST_CASE("loader: epoch order equals numpy's permutation of the kept ids, across shards") {
  TempDir dir;
  // Episodes of length 1 are filtered out (episode_min_tokens = 2).
  write_split(dir.path(), "train", numbered_episodes(30, {1, 4, 3, 5}), TokenDtype::uint32, true, 4);
  Config c = make_config(dir.path(), 2, 8);
  c.token_dtype = TokenDtype::uint32;  // short episodes fit both widths: inference would refuse
  c.epoch_seed = 99;
  Loader loader(c);
  std::vector<std::uint64_t> kept;
  for (std::uint64_t id = 0; id < 30; ++id) {
    if (id % 4 != 0) kept.push_back(id);
  }
  CHECK(loader.split_info("train").kept_episodes == kept.size());
  const auto n_batches = static_cast<int>(kept.size() / 2);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const Stream s = take(loader, n_batches);
    const auto perm = numpy_permutation(static_cast<std::uint32_t>(99 + epoch), kept.size());
    std::vector<std::int64_t> expected;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n_batches) * 2; ++i) {
      expected.push_back(static_cast<std::int64_t>(kept[perm[i]]));
    }
    CHECK(s.ids == expected);
    // Tokens trace back to their episode: token = 1000 * id + position + 1.
    for (std::size_t r = 0; r < s.ids.size(); ++r) CHECK(s.x[r * 8] == 1000 * s.ids[r] + 1);
  }
}

TEST_CASE("loader: identical output for decode_threads 1..8 and prefetch_depth 1..32" * doctest::timeout(120)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(40, {3, 17, 9, 30, 2}), TokenDtype::uint16, true, 3);
  Config base = make_config(dir.path(), 4, 16);
  base.use_loss_mask = true;
  base.epoch_drop_last = false;
  for (const auto mode : {SamplingMode::epoch, SamplingMode::random}) {
    base.batch_sampling_mode = mode;
    base.decode_threads = 1;
    base.prefetch_depth = 1;
    Loader reference_loader(base);
    const Stream reference = take(reference_loader, 25);
    for (const int threads : {1, 2, 3, 8}) {
      for (const int depth : {1, 2, 7, 32}) {
        Config c = base;
        c.decode_threads = threads;
        c.prefetch_depth = depth;
        Loader loader(c);
        CAPTURE(threads);
        CAPTURE(depth);
        CHECK(take(loader, 25) == reference);
      }
    }
  }
}

TEST_CASE("loader: resume at arbitrary points gives exactly the batches that would have come" * doctest::timeout(120)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(23, {3, 8, 5}));
  write_split(dir.path(), "val", numbered_episodes(9, {4, 6}));
  for (const auto mode : {SamplingMode::epoch, SamplingMode::random}) {
    Config c = make_config(dir.path(), 3, 6);
    c.use_loss_mask = true;
    c.batch_sampling_mode = mode;
    c.epoch_drop_last = false;
    Loader straight(c);
    const Stream all = take(straight, 30);
    const Stream val_all = take(straight, 5, "val");
    for (const int cut : {0, 1, 7, 8, 16, 29}) {
      CAPTURE(cut);
      std::string state;
      {
        Loader first(c);
        take(first, cut);
        take(first, 2, "val");
        state = first.save_state();
      }
      Loader resumed(c);
      resumed.load_state(state);
      Stream rest = take(resumed, 30 - cut);
      Stream expected;
      const std::size_t cells = 3 * 6;
      expected.x.assign(all.x.begin() + cut * static_cast<std::ptrdiff_t>(cells), all.x.end());
      expected.y.assign(all.y.begin() + cut * static_cast<std::ptrdiff_t>(cells), all.y.end());
      expected.mask.assign(all.mask.begin() + cut * static_cast<std::ptrdiff_t>(cells), all.mask.end());
      expected.ids.assign(all.ids.begin() + cut * 3, all.ids.end());
      expected.epochs.assign(all.epochs.begin() + cut, all.epochs.end());
      expected.real_rows.assign(all.real_rows.begin() + cut, all.real_rows.end());
      CHECK(rest == expected);
      const Stream val_rest = take(resumed, 3, "val");
      CHECK(val_rest.ids == std::vector<std::int64_t>(val_all.ids.begin() + 6, val_all.ids.end()));
    }
    // Restoring mid-stream on a loader that has prefetched far ahead also works.
    Loader busy(c);
    take(busy, 12);
    Loader other(c);
    take(other, 4);
    busy.load_state(other.save_state());
    CHECK(take(busy, 1).ids == std::vector<std::int64_t>(all.ids.begin() + 12, all.ids.begin() + 15));
  }
}

TEST_CASE("loader: a state file resumes exactly, and a FIFO, a missing file or a foreign state are refused" *
          doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(23, {3, 8, 5}));
  Config c = make_config(dir.path(), 3, 6);
  Loader straight(c);
  const Stream all = take(straight, 9);
  namespace fs = std::filesystem;
  const fs::path file = dir.path() / "state.txt";
  {
    Loader first(c);
    take(first, 4);
    save_state_file(first, file);
  }
  const std::vector<char> saved = read_bytes(file);
  {
    Loader again(c);
    take(again, 4);
    CHECK(std::string(saved.begin(), saved.end()) == again.save_state() + "\n");
  }
  Loader resumed(c);
  load_state_file(resumed, file);
  CHECK(take(resumed, 5).ids == std::vector<std::int64_t>(all.ids.begin() + 4 * 3, all.ids.end()));

  Loader untouched(c);
  take(untouched, 2);
  CHECK_THROWS_WITH_AS(load_state_file(untouched, dir.path() / "missing.txt"), doctest::Contains("missing.txt"), Error);
  const fs::path fifo = dir.path() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(load_state_file(untouched, fifo), doctest::Contains("is a FIFO, expected a regular file"),
                       Error);
  std::ofstream(dir.path() / "foreign.txt") << "not a state";
  CHECK_THROWS_AS(load_state_file(untouched, dir.path() / "foreign.txt"), Error);
  // Each refusal left the loader where it was.
  CHECK(take(untouched, 1).ids == std::vector<std::int64_t>(all.ids.begin() + 2 * 3, all.ids.begin() + 3 * 3));
  CHECK_THROWS_WITH_AS(save_state_file(untouched, dir.path() / "no_such_dir" / "state.txt"),
                       doctest::Contains("no_such_dir"), Error);
}

TEST_CASE("loader: a state from another dataset or sampling config is refused, and malformed states too") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(20, {4, 6}));
  Config c = make_config(dir.path(), 2, 4);
  Loader loader(c);
  take(loader, 3);
  const std::string state = loader.save_state();
  CHECK(state.size() < 400);  // small: not proportional to the dataset

  Config other_seed = c;
  other_seed.epoch_seed = 5;
  Loader different(other_seed);
  CHECK_THROWS_WITH_AS(different.load_state(state), doctest::Contains("another dataset or sampling config"), Error);
  Config other_batch = c;
  other_batch.batch_size = 3;
  CHECK_THROWS_AS(Loader(other_batch).load_state(state), Error);

  TempDir other_dir;
  write_split(other_dir.path(), "train", numbered_episodes(20, {4, 7}));
  Config other_data = c;
  other_data.dataset_dir = other_dir.path();
  CHECK_THROWS_AS(Loader(other_data).load_state(state), Error);

  for (const char* bad : {"", "{", "[]", R"({"format":"x"})",
                          R"({"format":"tokenfeed-state","version":1,"fingerprint":"a","splits":{"train":{"step":-1}}})"}) {
    CAPTURE(bad);
    test::error_of([&] { loader.load_state(bad); }, ErrorKind::state);
  }
  // A failed restore leaves the loader where it was.
  Loader fresh(c);
  take(fresh, 3);
  CHECK(take(loader, 1).ids == take(fresh, 1).ids);
}

namespace {

// A copy of `from`'s dataset with byte `at` of `file` changed: same lengths, one token differs.
void copy_with_one_token_changed(const std::filesystem::path& from, const std::filesystem::path& to,
                                 const std::filesystem::path& file, std::size_t at) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  std::vector<char> bytes = read_bytes(to / file);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  write_raw(to / file, bytes.data(), bytes.size());
}

}  // namespace

TEST_CASE("loader: a copy of the dataset with one token changed refuses the state, naming the content") {
  TempDir dir;
  write_split(dir / "a", "train", numbered_episodes(20, {4, 6}));
  copy_with_one_token_changed(dir / "a", dir / "b", "train/tokens.bin", 30);
  std::vector<std::uint16_t> stream(600);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<std::uint16_t>(i % 300 + 1);
  write_raw(dir / "s" / "train.bin", stream.data(), stream.size() * 2);
  copy_with_one_token_changed(dir / "s", dir / "t", "train.bin", 1001);
  for (const auto& [original, changed, mode] :
       {std::tuple{"a", "b", DatasetMode::sft_episode}, std::tuple{"s", "t", DatasetMode::token_stream}}) {
    CAPTURE(to_string(mode));
    Config c = make_config(dir / original, 2, 4);
    c.dataset_mode = mode;
    c.token_dtype = TokenDtype::uint16;
    Loader loader(c);
    loader.get_batch();
    const std::string state = loader.save_state();
    c.dataset_dir = dir / changed;
    Loader copy(c);
    const std::string message = error_of([&] { copy.load_state(state); }, ErrorKind::state);
    CHECK_MESSAGE(message.find("the content of the dataset's 'train' split differs") != std::string::npos, message);
    // The unchanged copy's state resumes.
    c.dataset_dir = dir / original;
    Loader same(c);
    same.load_state(state);
    CHECK(same.get_batch().step() == 1);
  }
}

TEST_CASE("loader: dataset-level errors at open") {
  TempDir dir;
  SUBCASE("missing dataset_dir / split directory") {
    CHECK(loader_error(make_config(dir / "nope", 2, 4), ErrorKind::io).find("does not exist") != std::string::npos);
    write_split(dir.path(), "val", numbered_episodes(4, {4}));
    CHECK(loader_error(make_config(dir.path(), 2, 4), ErrorKind::io).find("train") != std::string::npos);
  }
  SUBCASE("no episode left after filtering") {
    write_split(dir.path(), "train", numbered_episodes(4, {1}));
    CHECK(loader_error(make_config(dir.path(), 2, 4), ErrorKind::format).find("no episode left after filtering") !=
          std::string::npos);
  }
  SUBCASE("pad_token_id from dataset_metadata.json, else a clear error") {
    write_split(dir.path(), "train", numbered_episodes(4, {4}));
    Config c = make_config(dir.path(), 2, 8);
    c.pad_token_id.reset();
    CHECK(loader_error(c, ErrorKind::config).find("pad_token_id") != std::string::npos);
    write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 11})");
    CHECK(Loader(c).config().pad_token_id == 11);
    write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 11, "eot_token_id": 12, "token_dtype": "uint16"})");
    Loader loader(c);
    CHECK(loader.config().pad_token_id == 12);
    CHECK(loader.get_batch().x()[7] == 12);  // episodes have 4 tokens; position 7 is padding
    write_text(dir / "dataset_metadata.json", R"({"token_dtype": "int3"})");
    CHECK(loader_error(c, ErrorKind::format).find("token_dtype") != std::string::npos);
    write_text(dir / "dataset_metadata.json", "{not json");
    CHECK(loader_error(c, ErrorKind::format).find("dataset_metadata.json") != std::string::npos);
  }
  SUBCASE("token_stream mode on an episode dataset: no token stream to read") {
    write_split(dir.path(), "train", numbered_episodes(4, {4}));
    Config c = make_config(dir.path(), 2, 4);
    c.dataset_mode = DatasetMode::token_stream;
    CHECK(loader_error(c, ErrorKind::format).find("is an episode-indexed split") != std::string::npos);
    TempDir sharded;
    write_split(sharded.path(), "train", numbered_episodes(4, {4}), TokenDtype::uint16, true, 2);
    c.dataset_dir = sharded.path();
    CHECK(loader_error(c, ErrorKind::format).find("no *.bin, *.npy or *.ds shard files") != std::string::npos);
  }
  SUBCASE("an unknown split") {
    write_split(dir.path(), "train", numbered_episodes(4, {4}));
    Loader loader(make_config(dir.path(), 2, 4));
    CHECK_THROWS_WITH_AS(loader.get_batch("val"), doctest::Contains("split 'val' is not in the dataset"), Error);
    CHECK_THROWS_AS(loader.get_batch("test"), Error);
  }
}

TEST_CASE("loader: use_loss_mask without mask.bin gives x and y only, with one warning") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(6, {4}), TokenDtype::uint16, false);
  write_split(dir.path(), "val", numbered_episodes(4, {4}), TokenDtype::uint16, false);
  Config c = make_config(dir.path(), 2, 4);
  c.use_loss_mask = true;
  LogCapture logs;
  Loader loader(c);
  Batch b = loader.get_batch();
  CHECK_FALSE(b.has_mask());
  CHECK(b.mask().empty());
  int warnings = 0;
  for (const auto& line : logs.lines()) warnings += line.find("use_loss_mask=true but the dataset has no mask.bin") != std::string::npos;
  CHECK(warnings == 1);
}

TEST_CASE("loader: use_loss_mask=auto (the default) follows the dataset's mask.bin files") {
  const auto count = [](LogCapture& logs, std::string_view text) {
    int n = 0;
    for (const auto& line : logs.lines()) n += line.find(text) != std::string::npos;
    return n;
  };
  SUBCASE("every split has masks: on, so an SFT run does not train on its prompts") {
    TempDir dir;
    write_split(dir.path(), "train", numbered_episodes(6, {4}));
    write_split(dir.path(), "val", numbered_episodes(4, {4}));
    Config c = make_config(dir.path(), 2, 4);
    REQUIRE_FALSE(c.use_loss_mask.has_value());
    Loader loader(c);
    CHECK(loader.get_batch().has_mask());
    CHECK(loader.get_batch("val").has_mask());
    CHECK(loader.config().use_loss_mask == std::optional<bool>(true));
  }
  SUBCASE("no split has masks: off, with a warning") {
    TempDir dir;
    write_split(dir.path(), "train", numbered_episodes(6, {4}), TokenDtype::uint16, false);
    Config c = make_config(dir.path(), 2, 4);
    LogCapture logs;
    Loader loader(c);
    CHECK_FALSE(loader.get_batch().has_mask());
    CHECK(loader.config().use_loss_mask == std::optional<bool>(false));
    CHECK(count(logs, "use_loss_mask=auto and the dataset has no mask.bin") == 1);
  }
  SUBCASE("an explicit false is honoured and logged as a deliberate choice") {
    TempDir dir;
    write_split(dir.path(), "train", numbered_episodes(6, {4}));
    Config c = make_config(dir.path(), 2, 4);
    c.use_loss_mask = false;
    LogCapture logs;
    Loader loader(c);
    CHECK_FALSE(loader.get_batch().has_mask());
    CHECK(count(logs, "use_loss_mask=false set in the config") == 1);
  }
  SUBCASE("train with masks and val without: an error naming both, not a guess") {
    TempDir dir;
    write_split(dir.path(), "train", numbered_episodes(6, {4}));
    write_split(dir.path(), "val", numbered_episodes(4, {4}), TokenDtype::uint16, false);
    const std::string what = loader_error(make_config(dir.path(), 2, 4), ErrorKind::config);
    CHECK(what.find("split train") != std::string::npos);
    CHECK(what.find("split val has none") != std::string::npos);
  }
}

TEST_CASE("loader: log lines at open and at epoch boundaries, the audit log records consumption") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.audit_log_dir = dir / "audit";
  c.epoch_seed = 42;
  c.prefetch_depth = 8;  // prefetches into epoch 1; only consumption is logged
  LogCapture logs;
  {
    Loader loader(c);
    take(loader, 5);
  }
  const auto lines = logs.lines();
  const auto has = [&](const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  CHECK(has("[tokenfeed] split=train episodes=8 kept=8 tokens=32"));
  CHECK(has("[tokenfeed] split=train epoch=0 episodes=8 batches=4 shuffle=true drop_last=true pad_id=0 mask=true"));
  CHECK(has("[tokenfeed] split=train epoch=1 episodes=8 batches=4"));
  CHECK_FALSE(has("epoch=2"));

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "audit")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  std::ifstream in(files[0]);
  std::vector<std::string> audit;
  for (std::string line; std::getline(in, line);) audit.push_back(line);
  REQUIRE(audit.size() == 4);  // dataset_load, epoch_start 0, epoch_complete 0, epoch_start 1
  CHECK(audit[0].find(" | TRAINING | INFO | action=dataset_load | dataset_dir=") != std::string::npos);
  CHECK(audit[0].find("epoch_seed=42") != std::string::npos);
  CHECK(audit[0].find("dataset_fingerprint=") != std::string::npos);
  const auto perm = numpy_permutation(42, 8);
  std::string first = "first_episode_ids=\"[";
  for (std::size_t i = 0; i < 8; ++i) first += (i ? ", " : "") + std::to_string(perm[i]);
  CHECK(audit[1].find("action=epoch_start | split=train | epoch=0 | seed=42") != std::string::npos);
  CHECK(audit[1].find(first + "]\"") != std::string::npos);
  CHECK(audit[2].find("action=epoch_complete | split=train | epoch=0 | seed_used=42 | episodes_seen=8") != std::string::npos);
  CHECK(audit[3].find("action=epoch_start | split=train | epoch=1 | seed=43") != std::string::npos);
  CHECK(audit[0].substr(0, 2) == "20");  // an ISO timestamp: 2026-...Z
  CHECK(audit[0].find("Z | TRAINING") == 23);
}

TEST_CASE("loader: try_get_batch that times out consumes nothing" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(12, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.prefetch_depth = 1;
  c.decode_threads = 1;
  const Stream expected = [&] {
    Loader loader(c);
    return take(loader, 9);
  }();
  Loader loader(c);
  Stream got;
  int timeouts = 0;
  while (got.epochs.size() < 9) {
    std::optional<Batch> b = loader.try_get_batch("train", std::chrono::microseconds(0));
    if (!b) {
      ++timeouts;
      continue;
    }
    got.x.insert(got.x.end(), b->x().begin(), b->x().end());
    got.y.insert(got.y.end(), b->y().begin(), b->y().end());
    got.mask.insert(got.mask.end(), b->mask().begin(), b->mask().end());
    got.ids.insert(got.ids.end(), b->episode_ids().begin(), b->episode_ids().end());
    got.epochs.push_back(b->epoch());
    got.real_rows.push_back(b->real_rows());
  }
  CHECK(got == expected);
  MESSAGE("timed out " << timeouts << " times");
}

TEST_CASE("loader: per-split epoch_shuffle and epoch_drop_last, they change the fingerprint") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(10, {4}));
  write_split(dir.path(), "val", numbered_episodes(7, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.val_overrides.epoch_shuffle = false;
  c.val_overrides.epoch_drop_last = false;
  Loader loader(c);
  CHECK(loader.split_info("val").batches_per_epoch == 4);  // 7 episodes, the remainder kept
  CHECK(loader.split_info("train").batches_per_epoch == 5);
  std::vector<std::int64_t> val_ids;
  for (int i = 0; i < 4; ++i) {
    const Batch b = loader.get_batch("val");
    val_ids.insert(val_ids.end(), b.episode_ids().begin(), b.episode_ids().end());
  }
  CHECK(val_ids == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, -1});  // in order, one fill row
  std::vector<std::int64_t> train_ids;
  for (int i = 0; i < 5; ++i) {
    const Batch b = loader.get_batch("train");
    train_ids.insert(train_ids.end(), b.episode_ids().begin(), b.episode_ids().end());
  }
  CHECK_FALSE(std::is_sorted(train_ids.begin(), train_ids.end()));  // train still shuffles
  Config plain = make_config(dir.path(), 2, 4);
  CHECK(Loader(plain).fingerprint() != loader.fingerprint());
  Config same_as_global = plain;
  same_as_global.val_overrides.epoch_shuffle = true;
  CHECK(Loader(same_as_global).fingerprint() != Loader(c).fingerprint());
  CHECK(Loader(c).fingerprint() == loader.fingerprint());
}

TEST_CASE("loader: max_held_batches raises the held limit, and the pool grows with it" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(20, {4}));
  Config c = make_config(dir.path(), 1, 4);
  c.max_held_batches = 8;
  Loader loader(c);
  std::vector<Batch> held;
  for (int i = 0; i < 8; ++i) held.push_back(loader.get_batch());
  CHECK_THROWS_WITH_AS(loader.get_batch(), doctest::Contains("already holds 8 batches"), Error);
  held.front().release();
  CHECK(loader.get_batch().valid());
  c.max_held_batches = 0;
  CHECK(loader_error(c, ErrorKind::config).find("'max_held_batches' must be in [1, 1024]") != std::string::npos);
}

TEST_CASE("loader: one info line at open, the per-split lines and epoch boundaries are debug lines") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.prefetch_depth = 4;  // a fixed depth: auto logs when it grows
  std::vector<std::pair<LogLevel, std::string>> lines;
  std::mutex mutex;
  const LogHandler previous = set_log_handler([&](LogLevel level, std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(level, std::string(line));
  });
  {
    Loader loader(c);
    take(loader, 5);
  }
  set_log_handler(previous);
  int info = 0;
  for (const auto& [level, line] : lines) {
    CAPTURE(line);
    if (level >= LogLevel::info) {
      ++info;
      CHECK(line.find("[tokenfeed] opened '") == 0);
      CHECK(line.find("train=8_episodes") != std::string::npos);
      CHECK(line.find("audit_log=off") != std::string::npos);
    }
    if (line.find(" epoch=") != std::string::npos) CHECK(level == LogLevel::debug);
  }
  CHECK(info == 1);
}

TEST_CASE("loader: a failure while planning reaches get_batch in order, with its message" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(4, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.epoch_seed = 0xffffffffLL;  // epoch 1 would need seed 2^32: numpy refuses it, and so do we
  Loader loader(c);
  take(loader, 2);  // epoch 0 is fine
  CHECK_THROWS_WITH_AS(loader.get_batch(), doctest::Contains("exceeds numpy's seed range"), Error);
  CHECK_THROWS_WITH_AS(loader.get_batch(), doctest::Contains("exceeds numpy's seed range"), Error);  // and stays failed
}

TEST_CASE("loader: holding too many batches is a usage error, not a deadlock" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(10, {4}));
  Loader loader(make_config(dir.path(), 1, 4));
  std::vector<Batch> held;
  for (std::size_t i = 0; i < Loader::kMaxHeldBatches; ++i) held.push_back(loader.get_batch());
  CHECK_THROWS_WITH_AS(loader.get_batch(), doctest::Contains("already holds"), Error);
  held.front().release();
  CHECK(loader.get_batch().valid());
  // Batches stay valid after the loader is gone.
  Batch survivor = std::move(held.back());
  held.clear();
}

TEST_CASE("loader: a batch outlives its loader") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(10, {6}));
  Batch b;
  std::vector<std::int64_t> copy;
  {
    Loader loader(make_config(dir.path(), 2, 4));
    b = loader.get_batch();
    copy.assign(b.x().begin(), b.x().end());
  }
  CHECK(std::vector<std::int64_t>(b.x().begin(), b.x().end()) == copy);
  CHECK(b.split() == "train");
}

TEST_CASE("loader: dataset_metadata.json's dtypes come first, a config naming another one is an error") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(6, {4}), TokenDtype::uint16, true);
  write_text(dir / "dataset_metadata.json", R"({"eot_token_id": 7, "token_dtype": "uint16", "mask_dtype": "uint8"})");
  Config c = make_config(dir.path(), 2, 4);
  c.token_dtype = TokenDtype::uint16;  // agrees: fine
  CHECK(Loader(c).config().token_dtype == TokenDtype::uint16);
  c.token_dtype = TokenDtype::uint32;
  const std::string e = loader_error(c, ErrorKind::config);
  CHECK(e.find("config key 'token_dtype' is uint32 but") != std::string::npos);
  CHECK(e.find("dataset_metadata.json' says uint16") != std::string::npos);
  c.token_dtype.reset();
  c.mask_dtype = MaskDtype::float32;
  CHECK(loader_error(c, ErrorKind::config).find("config key 'mask_dtype' is float32") != std::string::npos);
  // Without a metadata dtype, the config's is used, and the effective mask dtype is
  // reported even when inferred.
  write_text(dir / "dataset_metadata.json", R"({"eot_token_id": 7})");
  c.mask_dtype.reset();
  c.token_dtype = TokenDtype::uint16;
  CHECK(Loader(c).config().mask_dtype == MaskDtype::uint8);
}

TEST_CASE("loader: token_ids reports the ids it settled, pad eot-first and end-of-text eos-first") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(6, {4}), TokenDtype::uint16);
  write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 11, "eot_token_id": 12, "token_dtype": "uint16"})");
  Config c = make_config(dir.path(), 2, 4);
  c.pad_token_id.reset();
  const TokenIds ids = Loader(c).token_ids();
  CHECK(ids.pad == 12);          // pad_token_id's rule: the metadata's pad, eot, eos
  CHECK(ids.end_of_text == 11);  // document_aware's rule: eos, else eot
  CHECK(ids.eot == 12);
  CHECK(ids.eos == 11);
  c.pad_token_id = 3;
  c.eos_token_id = 5;
  const TokenIds given = Loader(c).token_ids();
  CHECK(given.pad == 3);
  CHECK(given.end_of_text == 5);
  CHECK(given.eos == 5);
  CHECK(given.eot == 12);
}

TEST_CASE("loader: use_loss_mask does not change the resume fingerprint (the order is the same)") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(20, {4, 6}), TokenDtype::uint16, true);
  Config c = make_config(dir.path(), 2, 4);
  c.use_loss_mask = true;
  Loader with_mask(c);
  take(with_mask, 3);
  c.use_loss_mask = false;
  Loader without_mask(c);
  CHECK(with_mask.fingerprint() == without_mask.fingerprint());
  without_mask.load_state(with_mask.save_state());
  CHECK(take(without_mask, 2).ids == take(with_mask, 2).ids);
  // Removing the masks from the dataset does change it.
  TempDir other;
  write_split(other.path(), "train", numbered_episodes(20, {4, 6}), TokenDtype::uint16, false);
  Config d = make_config(other.path(), 2, 4);
  CHECK(Loader(d).fingerprint() != without_mask.fingerprint());
}

TEST_CASE("loader: a val split smaller than one batch fails only when used, a small train split fails at open") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(20, {4, 6}));
  write_split(dir.path(), "val", numbered_episodes(3, {5}));
  Config c = make_config(dir.path(), 4, 4);
  LogCapture logs;
  Loader loader(c);
  CHECK(loader.get_batch("train").rows() == 4);
  CHECK_THROWS_WITH_AS(loader.get_batch("val"), doctest::Contains("split 'val'"), Error);
  CHECK(test::error_of([&] { loader.get_batch("val"); }).find("has 3 kept episodes, fewer than one global batch") !=
        std::string::npos);
  bool warned = false;
  for (const auto& line : logs.lines()) warned |= line.find("get_batch(\"val\") will fail") != std::string::npos;
  CHECK(warned);
  // A state saved now resumes (val never advanced); the same for sft_packed and epoch
  // token windows (which compress or carve differently).
  Loader again(c);
  again.load_state(loader.save_state());
  c.dataset_mode = DatasetMode::sft_packed;
  Loader packed(c);
  CHECK(packed.get_batch("train").rows() == 4);
  CHECK_THROWS_AS(packed.get_batch("val"), Error);
  // drop_last=false forms a batch with fill rows.
  c.dataset_mode = DatasetMode::sft_episode;
  c.epoch_drop_last = false;
  CHECK(Loader(c).get_batch("val").real_rows() == 3);
  // train too small: an error at open.
  c.epoch_drop_last = true;
  c.batch_size = 32;
  CHECK(loader_error(c, ErrorKind::config).find("split 'train'") != std::string::npos);
}

TEST_CASE("loader: a dataset file truncated under a running loader is an io error from get_batch, not a crash" *
          doctest::timeout(60)) {
  TempDir dir;
  // 64 episodes of 2048 uint16 tokens: each one's first tokens lie on their own page.
  write_split(dir.path(), "train", numbered_episodes(64, {2048}), TokenDtype::uint16, true);
  Config c = make_config(dir.path(), 2, 16);
  c.use_loss_mask = true;
  c.decode_threads = 1;
  c.prefetch_depth = 1;
  Loader loader(c);
  loader.get_batch();
  std::filesystem::resize_file(dir / "train/tokens.bin", 0);
  std::string message;
  for (int i = 0; i < 32 && message.empty(); ++i) {
    try {
      loader.get_batch();
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::io);
      message = e.what();
    }
  }
  CHECK(message.find("tokens.bin' became shorter than when it was opened") != std::string::npos);
  CHECK_THROWS_AS(loader.get_batch(), Error);  // and again on every later call
}

TEST_CASE("loader: a run resumed mid-epoch logs epoch_resume, loaders opened together get their own audit files") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.audit_log_dir = dir / "audit";
  std::string state;
  {
    Loader first(c);
    take(first, 2);
    state = first.save_state();
  }
  LogCapture logs;
  {
    Loader resumed(c);
    resumed.load_state(state);
    take(resumed, 3);  // batches 2 and 3 of epoch 0, then epoch 1
  }
  bool logged = false;
  for (const auto& line : logs.lines()) logged |= line.find("split=train epoch=0 resumed_at_batch=2 episodes=8") != std::string::npos;
  CHECK(logged);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "audit")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == 2);
  std::vector<std::string> actions;
  std::ifstream in(files[1]);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("action=");
    actions.push_back(line.substr(at, line.find(" |", at) - at));
  }
  CHECK(actions == std::vector<std::string>{"action=dataset_load", "action=epoch_resume", "action=epoch_complete",
                                            "action=epoch_start"});

  // Several loaders in one process, opened within the same millisecond: one file each.
  TempDir many;
  c.audit_log_dir = many.path();
  {
    std::vector<std::unique_ptr<Loader>> loaders;
    for (int i = 0; i < 4; ++i) loaders.push_back(std::make_unique<Loader>(c));
  }
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(many.path())) ++count;
  CHECK(count == 4);
}
