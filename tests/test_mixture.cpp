// Mixtures: the smooth weighted round-robin against a reference, each source's rows equal
// to its single-source stream, stages, resume, rank slices, the batch contract over mixed
// rows, the audit trail, and every bad config.
#include <doctest/doctest.h>

#include <fstream>
#include <map>

#include "sampling/mixture_schedule.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// The round-robin as docs/mixtures.md states it, replayed pick by pick from row 0.
std::vector<std::uint32_t> reference_sources(const std::vector<std::vector<double>>& stage_weights,
                                             const std::vector<std::uint64_t>& stage_first_rows, std::uint64_t rows) {
  std::vector<std::uint32_t> out;
  std::size_t stage = 0;
  std::vector<double> current;
  for (std::uint64_t g = 0; g < rows; ++g) {
    if (g == 0 || (stage + 1 < stage_first_rows.size() && g == stage_first_rows[stage + 1])) {
      if (g != 0) ++stage;
      current.assign(stage_weights[stage].size(), 0.0);  // restarted at each stage
    }
    const std::vector<double>& w = stage_weights[stage];
    double total = 0;
    for (double x : w) total += x;
    std::size_t best = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      current[i] += w[i];
      if (current[i] > current[best] + 1e-9) best = i;
    }
    current[best] -= total;
    out.push_back(static_cast<std::uint32_t>(best));
  }
  return out;
}

struct Fixture {
  TempDir dir;
  std::filesystem::path chat = dir / "chat", code = dir / "code", web = dir / "web";
  Fixture() {
    write_split(chat, "train", numbered_episodes(13, {3, 6, 9, 12}));
    write_split(chat, "val", numbered_episodes(5, {4, 7}));
    write_split(code, "train", numbered_episodes(7, {5, 11, 2}));
    write_split(code, "val", numbered_episodes(4, {8}));
    // A token stream: token i is 100 + i % 50, with an end-of-text (3) every 9 tokens.
    std::vector<std::uint16_t> tokens(400);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = i % 9 == 8 ? 3 : static_cast<std::uint16_t>(100 + i % 50);
    std::filesystem::create_directories(web);
    for (const char* name : {"train.bin", "val.bin"}) {
      std::ofstream out(web / name, std::ios::binary);
      out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    }
    write_text(web / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 3})");
  }

  // chat:3, code:1 (its own seed), web:1 (token stream, document-aware).
  Config mixture(std::int64_t batch, std::int64_t block) const {
    Config c = make_config("", batch, block);
    c.use_loss_mask = true;
    c.mixture = {{"chat", "3", {{"dataset_dir", chat.string()}}},
                 {"code", "1", {{"dataset_dir", code.string()}, {"epoch_seed", "7"}}},
                 {"web",
                  "1",
                  {{"dataset_dir", web.string()},
                   {"dataset_mode", "token_stream"},
                   {"document_aware", "true"},
                   {"batch_sampling_mode", "epoch"}}}};
    return c;
  }
  // What source i gives alone at batch_size 1, world_size 1 with the same keys.
  Config single(const Config& mix, std::size_t i) const {
    Config c = make_config("", 1, mix.block_size);
    c.use_loss_mask = mix.use_loss_mask;
    for (const auto& [key, value] : mix.mixture[i].keys) set_config_value(c, key, value);
    return c;
  }
};

// One row of a batch, every field.
struct Row {
  std::vector<std::int64_t> tokens, y, labels;
  std::vector<float> weights;
  std::vector<std::int32_t> positions;
  std::int64_t id = 0;
  bool operator==(const Row&) const = default;
};

Row row_of(const Batch& b, std::size_t r) {
  const std::size_t T = b.cols();
  const auto cut = [&](auto span) { return std::vector(span.begin() + r * T, span.begin() + (r + 1) * T); };
  return Row{cut(b.tokens()),       cut(b.y()),        cut(b.labels()), cut(b.token_weights()),
             cut(b.position_ids()), b.episode_ids()[r]};
}

struct Taken {
  std::vector<std::int32_t> sources;
  std::vector<Row> rows;
  bool operator==(const Taken&) const = default;
};

Taken take(Loader& loader, std::uint64_t batches, const char* split = "train") {
  Taken t;
  for (std::uint64_t i = 0; i < batches; ++i) {
    Batch b = loader.get_batch(split);
    REQUIRE(b.source_ids().size() == b.rows());
    for (std::size_t r = 0; r < b.rows(); ++r) {
      t.sources.push_back(b.source_ids()[r]);
      t.rows.push_back(row_of(b, r));
    }
  }
  return t;
}

}  // namespace

TEST_CASE("mixture: the schedule is the smooth weighted round-robin, restarted at each stage") {
  // Integer, decimal and zero weights; stages of 7 and 5 steps at 3 rows per step.
  const std::vector<MixtureSchedule::StageSpec> specs = {
      {{"5", "1", "2"}, 7}, {{"0.25", "0", "0.5"}, 12}, {{"1", "3", "0"}, std::nullopt}};
  const MixtureSchedule schedule({"a", "b", "c"}, specs, 3);
  const std::uint64_t rows = 3 * 40;
  const auto expected = reference_sources({{5, 1, 2}, {0.25, 0, 0.5}, {1, 3, 0}}, {0, 21, 36}, rows);
  std::vector<std::uint64_t> seen(3, 0);
  for (std::uint64_t g = 0; g < rows; ++g) {
    const MixtureSchedule::Pick pick = schedule.pick(g);
    CHECK(pick.source == expected[g]);
    CHECK(pick.index == seen[pick.source]);  // the source's k-th row over the whole run
    for (std::uint32_t i = 0; i < 3; ++i) CHECK(schedule.rows_before(i, g) == seen[i]);
    ++seen[pick.source];
  }
  CHECK(schedule.stage_of_step(6) == 0);
  CHECK(schedule.stage_of_step(7) == 1);
  CHECK(schedule.stage_of_step(12) == 2);
  CHECK(schedule.stage_weights(1) == std::vector<std::uint64_t>{1, 0, 2});
  // Far rows without replay agree with the period's arithmetic: within 1 of the share.
  const std::uint64_t far = 1'000'000'007;
  const double share = schedule.rows_before(1, far) - schedule.rows_before(1, 36);
  CHECK(std::abs(share - 0.75 * static_cast<double>(far - 36)) <= 1.0);

  // Ties go to the earliest declared: equal weights alternate starting with the first.
  const MixtureSchedule tie({"x", "y"}, {{{"1", "1"}, std::nullopt}}, 1);
  CHECK(tie.pick(0).source == 0);
  CHECK(tie.pick(1).source == 1);
}

TEST_CASE("mixture: each source's rows are its single-source stream, whatever threads and depth" *
          doctest::timeout(120)) {
  Fixture f;
  const Config mix = f.mixture(4, 8);
  Loader loader(mix);
  CHECK(loader.source_names() == std::vector<std::string>{"chat", "code", "web"});
  const Taken taken = take(loader, 30);  // several epochs of every source
  std::vector<std::vector<Row>> per_source(3);
  for (std::size_t i = 0; i < taken.rows.size(); ++i) per_source[taken.sources[i]].push_back(taken.rows[i]);
  for (std::size_t s = 0; s < 3; ++s) {
    Loader alone(f.single(mix, s));
    REQUIRE(!per_source[s].empty());
    for (std::size_t k = 0; k < per_source[s].size(); ++k) {
      Batch b = alone.get_batch();
      Row expected = row_of(b, 0);
      if (s == 2) expected.y = expected.labels;  // a window's y is its labels
      CHECK(per_source[s][k] == expected);
    }
  }
  // 3:1:1 over 120 rows.
  CHECK(per_source[0].size() == 72);
  CHECK(per_source[1].size() == 24);
  CHECK(per_source[2].size() == 24);

  Config other = mix;
  other.decode_threads = 1;
  other.prefetch_depth = 1;
  Loader again(other);
  CHECK(take(again, 30) == taken);
}

TEST_CASE("mixture: mixed episode and window rows obey the batch contract") {
  Fixture f;
  Loader loader(f.mixture(5, 8));
  for (int step = 0; step < 12; ++step) {
    Batch b = loader.get_batch();
    const std::size_t cells = b.rows() * b.cols();
    REQUIRE(b.cu_seqlens().size() == b.num_sequences() + 1);
    CHECK(b.cu_seqlens().front() == 0);
    CHECK(static_cast<std::size_t>(b.cu_seqlens().back()) == cells);
    CHECK(b.real_rows() == b.rows());
    CHECK(b.doc_ids().size() == cells);  // the web source is document-aware
    for (std::size_t q = 0; q < b.num_sequences(); ++q) {
      const auto begin = static_cast<std::size_t>(b.cu_seqlens()[q]);
      const auto end = static_cast<std::size_t>(b.cu_seqlens()[q + 1]);
      CHECK(begin / b.cols() == (end - 1) / b.cols());  // a sequence stays in its row
      for (std::size_t p = begin; p < end; ++p) CHECK(b.position_ids()[p] == static_cast<std::int32_t>(p - begin));
    }
    for (std::size_t p = 0; p < cells; ++p) {
      CHECK((b.labels()[p] == -100) == (b.token_weights()[p] == 0.0f));
    }
    for (std::size_t r = 0; r < b.rows(); ++r) {
      if (b.source_ids()[r] != 2) continue;
      // A window row: weight 1 on every labelled position.
      for (std::size_t c = 0; c < b.cols(); ++c) {
        const std::size_t p = r * b.cols() + c;
        if (b.labels()[p] != -100) CHECK(b.token_weights()[p] == 1.0f);
      }
    }
  }
}

TEST_CASE("mixture: stages switch at their until_step, weights carried over" * doctest::timeout(60)) {
  Fixture f;
  Config mix = f.mixture(3, 8);
  MixtureStage first;
  first.until_step = 4;  // the sources' weights 3:1:1 for steps 0..3
  MixtureStage second;
  second.until_step = 9;
  second.weights = {{"chat", "0"}, {"web", "2"}};  // code keeps 1
  MixtureStage third;
  third.weights = {{"code", "0"}, {"chat", "1.5"}};  // web keeps 2
  mix.stages = {first, second, third};
  Loader loader(mix);
  const Taken taken = take(loader, 14);
  const auto expected = reference_sources({{3, 1, 1}, {0, 1, 2}, {1.5, 0, 2}}, {0, 12, 27}, 42);
  CHECK(taken.sources == std::vector<std::int32_t>(expected.begin(), expected.end()));
  // Rows of a stage come only from that stage's sources.
  for (std::size_t g = 12; g < 27; ++g) CHECK(taken.sources[g] != 0);
  for (std::size_t g = 27; g < 42; ++g) CHECK(taken.sources[g] != 1);
}

TEST_CASE("mixture: resume mid-stage and across a stage boundary is exact" * doctest::timeout(120)) {
  Fixture f;
  Config mix = f.mixture(3, 8);
  MixtureStage first;
  first.until_step = 5;
  MixtureStage second;
  second.weights = {{"chat", "1"}, {"code", "2"}};
  mix.stages = {first, second};
  Loader reference(mix);
  const Taken all = take(reference, 12);
  for (const std::uint64_t at : {3u, 5u, 7u}) {
    Loader first_run(mix);
    take(first_run, at);
    (void)first_run.get_batch("val");  // another split's position travels too
    const std::string state = first_run.save_state();
    Loader resumed(mix);
    resumed.load_state(state);
    const Taken rest = take(resumed, 12 - at);
    CHECK(std::equal(rest.rows.begin(), rest.rows.end(), all.rows.begin() + static_cast<std::ptrdiff_t>(at * 3)));
    CHECK(std::equal(rest.sources.begin(), rest.sources.end(),
                     all.sources.begin() + static_cast<std::ptrdiff_t>(at * 3)));
  }
  // A state from another schedule is refused.
  Config changed = mix;
  changed.stages[1].weights = {{"chat", "2"}};
  Loader other(changed);
  Loader first_run(mix);
  take(first_run, 2);
  CHECK(error_of([&] { other.load_state(first_run.save_state()); }, ErrorKind::state).find("fingerprint") !=
        std::string::npos);
}

TEST_CASE("mixture: rank slices together are the single-rank stream" * doctest::timeout(120)) {
  Fixture f;
  const Config whole = f.mixture(6, 8);
  Loader one(whole);
  const Taken all = take(one, 8);
  std::vector<Taken> slices;
  for (int rank = 0; rank < 3; ++rank) {
    Config c = f.mixture(2, 8);
    c.world_size = 3;
    c.rank = rank;
    Loader loader(c);
    slices.push_back(take(loader, 8));
  }
  Taken joined;
  for (std::size_t step = 0; step < 8; ++step) {
    for (const Taken& s : slices) {
      for (std::size_t r = 0; r < 2; ++r) {
        joined.sources.push_back(s.sources[step * 2 + r]);
        joined.rows.push_back(s.rows[step * 2 + r]);
      }
    }
  }
  CHECK(joined == all);
}

TEST_CASE("mixture: sft_packed rows hold episodes of one source, each its packed stream" * doctest::timeout(60)) {
  Fixture f;
  Config mix = make_config("", 2, 16);
  mix.dataset_mode = DatasetMode::sft_packed;
  mix.mixture = {{"chat", "2", {{"dataset_dir", f.chat.string()}}}, {"code", "1", {{"dataset_dir", f.code.string()}}}};
  Loader loader(mix);
  const Taken taken = take(loader, 9);
  for (std::size_t s = 0; s < 2; ++s) {
    Config c = f.single(mix, s);
    c.dataset_mode = DatasetMode::sft_packed;
    Loader alone(c);
    for (std::size_t i = 0; i < taken.rows.size(); ++i) {
      if (taken.sources[i] != static_cast<std::int32_t>(s)) continue;
      Batch b = alone.get_batch();
      CHECK(taken.rows[i] == row_of(b, 0));
    }
  }
  // Resuming a packed mixture walks each source's epochs of varying length.
  Loader first_run(mix);
  take(first_run, 5);
  Loader resumed(mix);
  resumed.load_state(first_run.save_state());
  const Taken rest = take(resumed, 4);
  CHECK(std::equal(rest.rows.begin(), rest.rows.end(), taken.rows.begin() + 10));

  mix.mixture[1].keys.emplace_back("dataset_mode", "token_stream");
  mix.mixture[1].keys[0].second = f.web.string();
  CHECK(error_of([&] { Loader bad(mix); }).find("mixture source 'code'") != std::string::npos);
}

TEST_CASE("mixture: the audit log names each source's epochs and each stage's start") {
  Fixture f;
  Config mix = f.mixture(4, 8);
  mix.audit_log_dir = f.dir / "audit";
  MixtureStage first;
  first.until_step = 2;
  MixtureStage second;
  second.weights = {{"web", "0"}};
  mix.stages = {first, second};
  {
    Loader loader(mix);
    take(loader, 8);
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(f.dir / "audit")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  std::ifstream in(files[0]);
  std::map<std::string, int> count;
  for (std::string line; std::getline(in, line);) {
    if (line.find("action=stage_start") != std::string::npos) ++count["stage_start"];
    if (line.find("action=epoch_start | split=train | source=chat | epoch=1") != std::string::npos) ++count["chat1"];
    if (line.find("action=epoch_complete | split=train | source=chat | epoch=0") != std::string::npos) ++count["chat0"];
    if (line.find("action=epoch_start | split=train | source=code | epoch=0") != std::string::npos) ++count["code0"];
    if (line.find("action=dataset_load") != std::string::npos &&
        line.find("mixture=\"chat:3 code:1 web:1\"") != std::string::npos) {
      ++count["load"];
    }
  }
  CHECK(count["stage_start"] == 2);
  CHECK(count["chat1"] == 1);
  CHECK(count["chat0"] == 1);
  CHECK(count["code0"] == 1);
  CHECK(count["load"] == 1);
}

TEST_CASE("mixture: XML config, and every bad config names what is wrong") {
  Fixture f;
  const std::string head =
      "<training><batch_size>4</batch_size><block_size>8</block_size>"
      "<pad_token_id>0</pad_token_id><audit_log_dir></audit_log_dir>";
  const std::string xml = head +
                          "<mixture>"
                          "<source name=\"chat\" dataset_dir=\"chat\" weight=\"3\"/>"
                          "<source name=\"code\" dataset_dir=\"code\" weight=\"1\" epoch_seed=\"7\"/>"
                          "<source name=\"web\" dataset_dir=\"web\" weight=\"0\" dataset_mode=\"token_stream\" "
                          "document_aware=\"true\"/>"
                          "<stage until_step=\"2\"/>"
                          "<stage><weight source=\"chat\">1</weight><weight source=\"web\">1</weight></stage>"
                          "</mixture></training>";
  const Config c = parse_config_xml(xml, f.dir.path());
  REQUIRE(c.mixture.size() == 3);
  CHECK(c.mixture[0].keys[0].second == (f.dir / "chat").string());
  CHECK(c.stages.size() == 2);
  Loader loader(c);
  const Taken taken = take(loader, 3);
  for (std::size_t g = 0; g < 8; ++g) CHECK(taken.sources[g] != 2);  // web weighs 0 in stage 0
  const auto expected = reference_sources({{3, 1, 0}, {1, 1, 1}}, {0, 8}, 12);
  CHECK(taken.sources == std::vector<std::int32_t>(expected.begin(), expected.end()));

  const auto xml_error = [&](const std::string& mixture) {
    return error_of([&] { Loader bad(parse_config_xml(head + mixture + "</training>", f.dir.path())); });
  };
  const std::string chat = "<source name=\"chat\" dataset_dir=\"chat\" weight=\"1\"/>";
  CHECK(xml_error("<dataset_dir>chat</dataset_dir><mixture>" + chat + "</mixture>").find("both 'dataset_dir'") !=
        std::string::npos);
  CHECK(xml_error("<mixture>" + chat + "<stage><weight source=\"chat\">0</weight></stage></mixture>")
            .find("every source's weight is zero") != std::string::npos);
  CHECK(xml_error("<mixture>" + chat + "<stage><weight source=\"cod\">1</weight></stage></mixture>")
            .find("names source 'cod'") != std::string::npos);
  CHECK(xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"1\" epoch_sed=\"1\"/></mixture>")
            .find("mixture source 'chat': unknown or loader-wide attribute 'epoch_sed'") != std::string::npos);
  CHECK(xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"1\" batch_size=\"2\"/></mixture>")
            .find("loader-wide attribute 'batch_size'") != std::string::npos);
  CHECK(xml_error("<mixture>" + chat + chat + "</mixture>").find("'chat' is declared twice") != std::string::npos);
  CHECK(xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"-1\"/></mixture>")
            .find("mixture source 'chat': weight '-1'") != std::string::npos);
  CHECK(xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"1\" epoch_seed=\"x\"/></mixture>")
            .find("mixture source 'chat'") != std::string::npos);
  CHECK(xml_error("<mixture>" + chat + "<stage/><stage/></mixture>").find("mixture stage 0 has no until_step") !=
        std::string::npos);
  CHECK(xml_error("<mixture>" + chat + "<stage until_step=\"3\"/></mixture>").find("last stage") != std::string::npos);
  CHECK(xml_error("<mixture>" + chat + "<stage until_step=\"3\"/><stage until_step=\"3\"/><stage/></mixture>")
            .find("must be greater than 3") != std::string::npos);
  const std::string missing = error_of(
      [&] {
        Loader bad(parse_config_xml(head + "<mixture><source name=\"gone\" dataset_dir=\"nowhere\" "
                                           "weight=\"1\"/></mixture></training>",
                                    f.dir.path()));
      },
      ErrorKind::io);
  CHECK(missing.find("mixture source 'gone': dataset_dir") != std::string::npos);
}

TEST_CASE("mixture: counts that overflow are config errors naming the keys, never a wrapped stage" *
          doctest::timeout(60)) {
  Fixture f;
  // until_step x rows per step wraps 64 bits: the second stage would start at row 0.
  Config late = f.mixture(4, 8);
  MixtureStage first;
  first.until_step = std::int64_t{1} << 62;
  first.weights = {{"chat", "1"}, {"code", "0"}, {"web", "0"}};
  MixtureStage second;
  second.weights = {{"chat", "0"}, {"code", "1"}};
  late.stages = {first, second};
  std::string message = error_of([&] { Loader loader(late); });
  CHECK_MESSAGE(message.find("mixture stage 1's first step (the until_step before it) x batch_size x world_size = "
                             "4611686018427387904 x 4 overflows 64 bits") != std::string::npos,
                message);
  // A world size whose global batch no row counter holds.
  Config huge = f.mixture(4, 8);
  huge.world_size = std::int64_t{1} << 62;
  huge.rank = 0;
  message = error_of([&] { Loader loader(huge); });
  CHECK_MESSAGE(
      message.find("'batch_size' x the data-parallel size = 4 x 4611686018427387904 exceed 2^40") != std::string::npos,
      message);
  // A global batch spanning millions of epochs of a source: refused, not walked epoch by epoch.
  Config wide = f.mixture(1, 8);
  wide.world_size = std::int64_t{1} << 36;
  wide.rank = 5;
  wide.audit_log_dir = f.dir / "audit";
  message = error_of([&] { Loader loader(wide); });
  CHECK_MESSAGE(message.find("mixture source 'chat': one step of batch_size x world_size = 68719476736 rows spans up "
                             "to") != std::string::npos,
                message);
}

TEST_CASE("mixture: elastic resume, a state saved at 1x8 continues at 2x4 across stages" * doctest::timeout(120)) {
  Fixture f;
  Config one = f.mixture(8, 8);
  MixtureStage first;
  first.until_step = 3;
  MixtureStage second;
  second.weights = {{"chat", "1"}, {"web", "3"}};
  one.stages = {first, second};
  Loader reference(one);
  const Taken all = take(reference, 6);
  Loader saved(one);
  take(saved, 2);
  const std::string state = saved.save_state();
  std::vector<Taken> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    Config c = one;
    c.batch_size = 4;
    c.world_size = 2;
    c.rank = rank;
    Loader loader(c);
    loader.load_state(state);
    ranks.push_back(take(loader, 4));
  }
  Taken joined;
  for (std::size_t step = 0; step < 4; ++step) {
    for (const Taken& t : ranks) {
      for (std::size_t r = 0; r < 4; ++r) {
        joined.sources.push_back(t.sources[step * 4 + r]);
        joined.rows.push_back(t.rows[step * 4 + r]);
      }
    }
  }
  CHECK(std::equal(joined.rows.begin(), joined.rows.end(), all.rows.begin() + 16));
  CHECK(std::equal(joined.sources.begin(), joined.sources.end(), all.sources.begin() + 16));
  // Another global batch is still refused, naming it and what to set.
  Config other = one;
  other.batch_size = 3;
  other.world_size = 2;
  other.rank = 0;
  Loader wrong(other);
  CHECK(error_of([&] { wrong.load_state(state); }, ErrorKind::state)
            .find("global_batch_size (batch_size x the data-parallel size) is 8 in the state but 6 here") !=
        std::string::npos);
}
