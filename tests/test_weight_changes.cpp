// Weight changes from the trainer (Loader::set_mixture_weights): a change equals a config
// stage at its step bit for bit, is refused too early or with bad input (the loader
// unchanged and usable), gives every rank its slice of one stream, and resumes exactly
// (also at another world size) from a state that records it.
#include <doctest/doctest.h>

#include <map>

#include "tokenfeed/audit.hpp"
#include "splits/weight_changes.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Three episode datasets of different sizes and lengths.
struct Sources {
  TempDir dir;
  Sources() {
    write_split(dir / "a", "train", numbered_episodes(11, {3, 7, 5}));
    write_split(dir / "b", "train", numbered_episodes(6, {9, 4}));
    write_split(dir / "c", "train", numbered_episodes(17, {2, 6, 8, 3}));
  }
  // a:2, b:1, c:1 at a fixed prefetch depth (earliest_weight_step = step + 2).
  Config mixture(std::int64_t batch_size, std::int64_t world_size = 1, std::int64_t rank = 0) const {
    Config c = make_config("", batch_size, 8);
    c.world_size = world_size;
    c.rank = rank;
    c.prefetch_depth = 2;
    c.mixture = {{"a", "2", {{"dataset_dir", (dir / "a").string()}}},
                 {"b", "1", {{"dataset_dir", (dir / "b").string()}, {"epoch_seed", "5"}}},
                 {"c", "1", {{"dataset_dir", (dir / "c").string()}}}};
    return c;
  }
};

// Every batch's tokens, labels, weights and source ids, one vector per batch.
struct Stream {
  std::vector<std::vector<std::int64_t>> tokens, labels;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<std::int32_t>> sources;
  bool operator==(const Stream&) const = default;
};

void read_into(Stream& s, Loader& loader, std::size_t batches) {
  for (std::size_t i = 0; i < batches; ++i) {
    const Batch b = loader.get_batch("train");
    s.tokens.emplace_back(b.tokens().begin(), b.tokens().end());
    s.labels.emplace_back(b.labels().begin(), b.labels().end());
    s.weights.emplace_back(b.token_weights().begin(), b.token_weights().end());
    s.sources.emplace_back(b.source_ids().begin(), b.source_ids().end());
  }
}

Stream read(Loader& loader, std::size_t batches) {
  Stream s;
  read_into(s, loader, batches);
  return s;
}

MixtureStage stage(std::optional<std::int64_t> until, std::vector<std::pair<std::string, std::string>> weights) {
  MixtureStage st;
  st.until_step = until;
  st.weights = std::move(weights);
  return st;
}

// The run the tests resume: 12 batches, with a change at step 4 (made at step 0) and one
// at step 9 (made at step 3), of `rows_per_rank` rows on each of `world` ranks.
struct Run {
  std::size_t saved_at = 0;  // 0: no save
  std::string state;
};
Stream changed_run(const Sources& s, std::int64_t rows, Run* run = nullptr) {
  Loader loader(s.mixture(rows));
  loader.set_mixture_weights({{"a", "0.5"}, {"c", "3"}}, 4);
  Stream out = read(loader, 3);
  loader.set_mixture_weights({{"b", "0"}}, 9);
  for (std::size_t step = 3; step < 12; ++step) {
    if (run != nullptr && step == run->saved_at) run->state = loader.save_state();
    read_into(out, loader, 1);
  }
  return out;
}

Stream tail(const Stream& s, std::size_t from) {
  Stream t;
  const auto at = static_cast<std::ptrdiff_t>(from);
  t.tokens.assign(s.tokens.begin() + at, s.tokens.end());
  t.labels.assign(s.labels.begin() + at, s.labels.end());
  t.weights.assign(s.weights.begin() + at, s.weights.end());
  t.sources.assign(s.sources.begin() + at, s.sources.end());
  return t;
}

}  // namespace

TEST_CASE("weight changes: a change at step N equals a config stage starting at N, bit for bit" *
          doctest::timeout(120)) {
  Sources s;
  // The config's own stages: a:2 b:1 c:1 until 8, then b:3 as written.
  Config staged = s.mixture(3);
  staged.stages = {stage(8, {}), stage(std::nullopt, {{"b", "3"}})};
  // Changes at 5 (before the config stage) and two at 10 (after it, the later call wins
  // for a): as if the config had stages at 5 and 10.
  Config reference = s.mixture(3);
  reference.stages = {stage(5, {}), stage(8, {{"a", "0.25"}, {"c", "4"}}),
                      stage(10, {{"a", "2"}, {"c", "1"}, {"b", "3"}}), stage(std::nullopt, {{"a", "7"}, {"c", "0"}})};
  Loader expected(reference);
  const Stream want = read(expected, 14);

  Loader loader(staged);
  CHECK(loader.earliest_weight_step() == 2);
  loader.set_mixture_weights({{"a", "0.25"}, {"c", "4.000"}}, 5);
  Stream got = read(loader, 4);
  CHECK(loader.earliest_weight_step() == 6);
  loader.set_mixture_weights({{"a", "1"}, {"c", "0"}}, 10);
  loader.set_mixture_weights({{"a", "7"}}, 10);
  read_into(got, loader, 10);
  CHECK(got == want);
  // And not the stream without the changes.
  Loader unchanged(staged);
  CHECK(read(unchanged, 14) != want);
}

TEST_CASE("weight changes: too early, bad input or no mixture is an error that changes nothing" *
          doctest::timeout(120)) {
  Sources s;
  Loader plain(s.mixture(3));
  const Stream want = read(plain, 10);

  Loader loader(s.mixture(3));
  Stream got = read(loader, 3);
  REQUIRE(loader.earliest_weight_step() == 5);
  const std::string early = error_of([&] { loader.set_mixture_weights({{"a", "1"}}, 4); }, ErrorKind::usage);
  CHECK(early.find("at_step=4") != std::string::npos);
  CHECK(early.find("earliest step the loader can still change is 5") != std::string::npos);
  CHECK(error_of([&] { loader.set_mixture_weights({{"d", "1"}}, 6); }).find("unknown source 'd'") != std::string::npos);
  for (const char* bad : {"-1", "nan", "1e3", "0.1234567", ""}) {
    CAPTURE(bad);
    CHECK(error_of([&] { loader.set_mixture_weights({{"b", bad}}, 6); }).find("of source 'b'") != std::string::npos);
  }
  CHECK(error_of([&] {
          loader.set_mixture_weights({{"a", "0"}, {"b", "0"}, {"c", "0"}}, 7);
        }).find("the weights from step 7 (set_mixture_weights): every source's weight is zero") != std::string::npos);
  CHECK(error_of([&] { loader.set_mixture_weights({}, 7); }).find("names no source") != std::string::npos);
  CHECK(loader.save_state().find("weight_changes") == std::string::npos);
  read_into(got, loader, 7);
  CHECK(got == want);

  Sources one;
  Config single = make_config(one.dir / "a", 2, 8);
  Loader dataset(single);
  CHECK(error_of([&] { (void)dataset.earliest_weight_step(); }).find("one dataset") != std::string::npos);
  CHECK(error_of([&] { dataset.set_mixture_weights({{"a", "1"}}, 9); }).find("one dataset") != std::string::npos);
  (void)dataset.get_batch("train");
}

TEST_CASE("weight changes: two ranks making the same changes read slices of one stream" * doctest::timeout(120)) {
  Sources s;
  const Stream whole = changed_run(s, 4);
  std::vector<Stream> ranks;
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    Loader loader(s.mixture(2, 2, rank));
    loader.set_mixture_weights({{"a", "0.5"}, {"c", "3"}}, 4);
    Stream got = read(loader, 3);
    loader.set_mixture_weights({{"b", "0"}}, 9);
    read_into(got, loader, 9);
    ranks.push_back(got);
  }
  for (std::size_t step = 0; step < 12; ++step) {
    std::vector<std::int32_t> joined = ranks[0].sources[step];
    joined.insert(joined.end(), ranks[1].sources[step].begin(), ranks[1].sources[step].end());
    CHECK(joined == whole.sources[step]);
    std::vector<std::int64_t> tokens = ranks[0].tokens[step];
    tokens.insert(tokens.end(), ranks[1].tokens[step].begin(), ranks[1].tokens[step].end());
    CHECK(tokens == whole.tokens[step]);
  }
}

TEST_CASE("weight changes: resume before and after the changes equals the uninterrupted run, at any world size" *
          doctest::timeout(180)) {
  Sources s;
  const Stream whole = changed_run(s, 4);
  for (const std::size_t at : {3u, 6u, 10u}) {
    CAPTURE(at);
    Run run{at, {}};
    CHECK(changed_run(s, 4, &run) == whole);
    // A fresh loader applies the state's changes, the one at step 9 not reached yet too.
    Loader resumed(s.mixture(4));
    resumed.load_state(run.state);
    CHECK(read(resumed, 12 - at) == tail(whole, at));
    // Two ranks of 2 rows: the same global batch.
    for (std::int64_t rank = 0; rank < 2; ++rank) {
      Loader half(s.mixture(2, 2, rank));
      half.load_state(run.state);
      const Stream got = read(half, 12 - at);
      for (std::size_t k = 0; k < got.sources.size(); ++k) {
        const auto first = whole.sources[at + k].begin() + 2 * rank;
        CHECK(got.sources[k] == std::vector<std::int32_t>(first, first + 2));
        const auto tokens = whole.tokens[at + k].begin() + 2 * 8 * rank;
        CHECK(got.tokens[k] == std::vector<std::int64_t>(tokens, tokens + 2 * 8));
      }
    }
  }
  Run run{6, {}};
  changed_run(s, 4, &run);
  // A loader with the same changes loads it; one with other changes refuses it, unchanged.
  Loader same(s.mixture(4));
  same.set_mixture_weights({{"a", "0.5"}, {"c", "3"}}, 4);
  same.set_mixture_weights({{"b", "0"}}, 9);
  same.load_state(run.state);
  CHECK(read(same, 6) == tail(whole, 6));
  Loader other(s.mixture(4));
  other.set_mixture_weights({{"a", "0.5"}}, 4);
  const std::string refused = error_of([&] { other.load_state(run.state); }, ErrorKind::state);
  CHECK(refused.find("other mixture weight changes (step 4: a=0.5,c=3; step 9: b=0) than this loader made "
                     "(step 4: a=0.5)") != std::string::npos);
  // A state without changes into a loader without: the fingerprint is the config's alone.
  Loader none(s.mixture(4));
  (void)none.get_batch("train");
  const std::string plain = none.save_state();
  CHECK(plain.find("weight_changes") == std::string::npos);
  Loader changed(s.mixture(4));
  changed.set_mixture_weights({{"a", "1"}}, 5);
  CHECK(changed.fingerprint() != none.fingerprint());
  CHECK(error_of([&] { changed.load_state(plain); }, ErrorKind::state).find("than this loader made") !=
        std::string::npos);
}

TEST_CASE("weight changes: the audit log records each change, one read back as an event" * doctest::timeout(60)) {
  Sources s;
  Config c = s.mixture(2);
  c.audit_log_dir = s.dir / "audit";
  Loader loader(c);
  loader.set_mixture_weights({{"b", "2.50"}, {"a", "1"}}, 7);
  (void)loader.get_batch("train");
  std::filesystem::path log;
  for (const auto& entry : std::filesystem::directory_iterator(s.dir / "audit")) log = entry.path();
  const AuditLogContents contents = read_audit_log(log);
  std::size_t changes = 0;
  for (const AuditEvent& e : contents.events) {
    if (e.action != "weights_changed") continue;
    ++changes;
    CHECK(e.field("split") == "train");
    CHECK(e.field("step") == "7");
    CHECK(e.field("weights") == "a=1,b=2.5");
  }
  CHECK(changes == 1);
}

TEST_CASE("weight changes: the merge rule and canonical weights") {
  CHECK(canonical_weight_text(ExactWeight{15000, 4}) == "1.5");
  CHECK(canonical_weight_text(ExactWeight{5, 3}) == "0.005");
  CHECK(canonical_weight_text(ExactWeight{0, 2}) == "0");
  CHECK(canonical_weight_text(ExactWeight{120, 0}) == "120");
  const std::vector<std::string> names{"x", "y"};
  const MixtureSchedule config(names, {{{"1", "1"}, 10}, {{"2", "0"}, std::nullopt}}, 1);
  const MergedStages merged = stages_with_changes(
      config, {make_weight_change({{"y", "5"}}, 12, names), make_weight_change({{"x", "3"}}, 4, names)}, names);
  REQUIRE(merged.specs.size() == 4);
  CHECK(merged.specs[0].weights == std::vector<std::string>{"1", "1"});
  CHECK(merged.specs[0].until == 4u);
  CHECK(merged.specs[1].weights == std::vector<std::string>{"3", "1"});  // y keeps its weight
  CHECK(merged.specs[1].until == 10u);
  CHECK(merged.specs[2].weights == std::vector<std::string>{"2", "0"});  // the config's stage as written
  CHECK(merged.specs[3].weights == std::vector<std::string>{"2", "5"});
  CHECK(!merged.specs[3].until);
  CHECK(merged.names[3] == "the weights from step 12 (set_mixture_weights)");
}

TEST_CASE("weight changes: a schedule sharing another's stages picks the same rows") {
  const std::vector<std::string> names{"x", "y", "z"};
  const MixtureSchedule config(names, {{{"1", "2", "1"}, 30}, {{"0", "1", "1"}, std::nullopt}}, 5);
  std::vector<WeightChange> changes;
  for (std::uint64_t step = 2; step < 80; step += 3) {
    changes.push_back(make_weight_change({{names[step % 3], std::to_string(step % 7) + ".5"}}, step, names));
  }
  const std::vector<WeightChange> first_half(changes.begin(), changes.begin() + 13);
  const MergedStages before = stages_with_changes(config, first_half, names);
  const MixtureSchedule in_use(names, before.specs, 5, before.names);
  const MergedStages all = stages_with_changes(config, changes, names);
  const MixtureSchedule fresh(names, all.specs, 5, all.names);
  const MixtureSchedule shared(names, all.specs, 5, all.names, &in_use);
  REQUIRE(shared.stages() == fresh.stages());
  for (std::uint64_t g = 0; g < 100 * 5; ++g) {
    const MixtureSchedule::Pick a = fresh.pick(g);
    const MixtureSchedule::Pick b = shared.pick(g);
    CHECK(a.source == b.source);
    CHECK(a.index == b.index);
  }
  for (std::size_t s = 0; s < fresh.stages(); ++s) CHECK(fresh.stage_of_step(fresh.stage_first_step(s)) == s);
}

TEST_CASE("weight changes: a change every step while the pipeline runs equals the same changes made up front" *
          doctest::timeout(120)) {
  Sources s;
  Config c = s.mixture(3);
  c.decode_threads = 2;
  const auto change = [](std::uint64_t i) {
    return std::map<std::string, std::string>{{i % 2 == 0 ? "a" : "c", std::to_string(i % 5) + ".25"}};
  };
  Loader up_front(c);
  for (std::uint64_t i = 0; i < 20; ++i) up_front.set_mixture_weights(change(i), i + 2);
  const Stream want = read(up_front, 24);
  Loader each_step(c);
  Stream got;
  for (std::uint64_t i = 0; i < 20; ++i) {
    REQUIRE(each_step.earliest_weight_step() == i + 2);
    each_step.set_mixture_weights(change(i), i + 2);
    read_into(got, each_step, 1);
  }
  read_into(got, each_step, 4);
  CHECK(got == want);
  CHECK(each_step.save_state() == up_front.save_state());
}
