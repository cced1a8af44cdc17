// Weights from dataset sizes through the loader: an "auto" mixture gives the batches of the
// same mixture with the computed weights written out, max_epochs caps hold over the planned
// steps, the fingerprint refuses a state from another weight set, and every bad config
// names the source or key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "sampling/mixture_weights.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

struct SizedFixture {
  TempDir dir;
  std::filesystem::path chat = dir / "chat", code = dir / "code", web = dir / "web";
  SizedFixture() {
    write_split(chat, "train", numbered_episodes(13, {3, 6, 9, 12}));
    write_split(code, "train", numbered_episodes(40, {5, 11, 2}));
    std::vector<std::uint16_t> tokens(400);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(100 + i % 50);
    std::filesystem::create_directories(web);
    std::ofstream(web / "train.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    write_text(web / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 3})");
  }

  // chat, code and web (a token stream), every weight `weight`.
  Config mixture(const std::string& weight) const {
    Config c = make_config("", 4, 8);
    c.use_loss_mask = true;
    c.audit_log_dir.clear();
    c.mixture = {{"chat", weight, {{"dataset_dir", chat.string()}}},
                 {"code", weight, {{"dataset_dir", code.string()}, {"epoch_seed", "7"}}},
                 {"web", weight, {{"dataset_dir", web.string()}, {"dataset_mode", "token_stream"}}}};
    return c;
  }

  // Source i's train split alone at batch_size 1: its tokens and rows of one epoch, the
  // figures docs/mixtures.md says the weights come from.
  SizedSource sized(const Config& mix, std::size_t i) const {
    Config c = make_config("", 1, mix.block_size);
    c.use_loss_mask = mix.use_loss_mask;
    c.dataset_mode = mix.dataset_mode;
    c.audit_log_dir.clear();
    for (const auto& [key, value] : mix.mixture[i].keys) set_config_value(c, key, value);
    Loader alone(c);
    const SplitInfo info = alone.split_info("train");
    return SizedSource{mix.mixture[i].name, info.tokens, info.batches_per_epoch, mix.mixture[i].max_epochs};
  }
};

struct Stream {
  std::vector<std::int32_t> sources;
  std::vector<std::int64_t> tokens;
  bool operator==(const Stream&) const = default;
};

Stream take(Loader& loader, std::size_t batches) {
  Stream s;
  for (std::size_t i = 0; i < batches; ++i) {
    Batch b = loader.get_batch("train");
    s.sources.insert(s.sources.end(), b.source_ids().begin(), b.source_ids().end());
    s.tokens.insert(s.tokens.end(), b.tokens().begin(), b.tokens().end());
  }
  return s;
}

std::vector<std::string> weights_of(const Config& c) {
  std::vector<std::string> out;
  for (const MixtureSource& s : c.mixture) out.push_back(s.weight);
  return out;
}

}  // namespace

TEST_CASE("mixture sizes: an auto mixture gives the batches of its computed weights written out" *
          doctest::timeout(120)) {
  SizedFixture f;
  for (const double alpha : {0.0, 0.3, 1.0}) {
    CAPTURE(alpha);
    Config automatic = f.mixture("auto");
    automatic.mixture_temperature = alpha;
    Loader loader(automatic);
    // The weights are those of the sources' own train figures, computed independently here.
    std::vector<SizedSource> sources;
    double total = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      sources.push_back(f.sized(automatic, i));
      total += std::pow(static_cast<double>(sources.back().tokens), alpha);
    }
    const std::vector<WeightFromSize> expected = weights_from_sizes(sources, alpha, std::nullopt);
    std::vector<std::string> texts;
    for (std::size_t i = 0; i < 3; ++i) {
      texts.push_back(expected[i].text);
      const double share = std::pow(static_cast<double>(sources[i].tokens), alpha) / total;
      CHECK(std::abs(static_cast<double>(expected[i].millionths) / 1e6 - share) <= 1e-6);
    }
    CHECK(weights_of(loader.config()) == texts);
    CHECK_FALSE(loader.config().mixture_temperature);

    Config written = f.mixture("1");
    for (std::size_t i = 0; i < 3; ++i) written.mixture[i].weight = texts[i];
    Loader explicit_loader(written);
    CHECK(loader.fingerprint() == explicit_loader.fingerprint());
    CHECK(take(loader, 40) == take(explicit_loader, 40));
  }
  // Uniform and proportional differ here (the sources' sizes differ), so the check above
  // compares different weight sets.
  Config uniform = f.mixture("auto"), proportional = f.mixture("auto");
  uniform.mixture_temperature = 0.0;
  proportional.mixture_temperature = 1.0;
  CHECK(weights_of(Loader(uniform).config()) != weights_of(Loader(proportional).config()));
}

TEST_CASE("mixture sizes: a max_epochs cap holds over the planned steps, the rest goes to the others" *
          doctest::timeout(120)) {
  SizedFixture f;
  Config capped = f.mixture("auto");
  capped.mixture_temperature = 1.0;
  capped.mixture_planned_steps = 50;   // 200 rows
  capped.mixture[1].max_epochs = 1.5;  // code: 40 rows an epoch, at most 60 of the 200
  Loader loader(capped);
  std::vector<SizedSource> sources;
  for (std::size_t i = 0; i < 3; ++i) sources.push_back(f.sized(capped, i));
  const auto expected = weights_from_sizes(sources, 1.0, 200);
  REQUIRE(expected[1].capped);
  CHECK(expected[1].text == "0.300000");
  std::vector<std::string> texts;
  for (const WeightFromSize& w : expected) texts.push_back(w.text);
  CHECK(weights_of(loader.config()) == texts);
  // Over the planned steps, code gives at most 1.5 epochs of rows.
  const Stream planned = take(loader, 50);
  const auto code_rows = std::count(planned.sources.begin(), planned.sources.end(), 1);
  CHECK(code_rows <= 60);
  CHECK(code_rows >= 59);
  // Uncapped, proportional to size, code would give more.
  Config free = f.mixture("auto");
  free.mixture_temperature = 1.0;
  Loader uncapped(free);
  const Stream more = take(uncapped, 50);
  CHECK(std::count(more.sources.begin(), more.sources.end(), 1) > 60);
}

TEST_CASE("mixture sizes: a packed source's cap counts the packed rows of its epoch 0" * doctest::timeout(120)) {
  SizedFixture f;
  Config packed = f.mixture("auto");
  packed.mixture.pop_back();  // web: a token stream cannot be packed
  packed.dataset_mode = DatasetMode::sft_packed;
  packed.block_size = 16;
  packed.mixture_temperature = 1.0;
  packed.mixture_planned_steps = 10;   // 40 rows
  packed.mixture[1].max_epochs = 1.5;  // code: at most 1.5 times its epoch 0's packed rows
  Loader loader(packed);
  std::vector<SizedSource> sources;
  for (std::size_t i = 0; i < 2; ++i) sources.push_back(f.sized(packed, i));
  const std::uint64_t code_epoch_rows = sources[1].rows_per_epoch;
  // Packed rows, not episodes: several of code's 40 episodes share a row.
  REQUIRE(code_epoch_rows < 40);
  const auto expected = weights_from_sizes(sources, 1.0, 40);
  REQUIRE(expected[1].capped);
  std::vector<std::string> texts;
  for (const WeightFromSize& w : expected) texts.push_back(w.text);
  CHECK(weights_of(loader.config()) == texts);
  const Stream planned = take(loader, 10);
  const auto code_rows = static_cast<double>(std::count(planned.sources.begin(), planned.sources.end(), 1));
  CHECK(code_rows <= 1.5 * static_cast<double>(code_epoch_rows));
  CHECK(code_rows >= 1.5 * static_cast<double>(code_epoch_rows) - 1.0);
}

TEST_CASE("mixture sizes: a state from another weight set is refused" * doctest::timeout(60)) {
  SizedFixture f;
  Config a = f.mixture("auto"), b = f.mixture("auto");
  a.mixture_temperature = 0.3;
  b.mixture_temperature = 1.0;
  Loader first(a);
  first.get_batch("train");
  const std::string state = first.save_state();
  Loader second(b);
  CHECK(error_of([&] { second.load_state(state); }, ErrorKind::state).find("stage.0") != std::string::npos);
  Loader same(a);
  same.load_state(state);
  Loader reference(a);
  reference.get_batch("train");
  CHECK(take(same, 5) == take(reference, 5));
}

TEST_CASE("mixture sizes: every bad config names the source or key") {
  SizedFixture f;
  const std::string head =
      "<training><batch_size>4</batch_size><block_size>8</block_size><use_loss_mask>true</use_loss_mask>"
      "<pad_token_id>0</pad_token_id><audit_log_dir></audit_log_dir>";
  const auto error = [&](const std::string& mixture) {
    return error_of([&] { Loader bad(parse_config_xml(head + mixture + "</training>", f.dir.path())); });
  };
  const std::string chat = "<source name=\"chat\" dataset_dir=\"chat\" weight=\"auto\"/>";
  const std::string code = "<source name=\"code\" dataset_dir=\"code\" weight=\"auto\" max_epochs=\"2\"/>";
  CHECK(error("<mixture>" + chat + "</mixture>")
            .find("mixture source 'chat': weight 'auto' needs <mixture temperature") != std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\">" + chat + code + "</mixture>")
            .find("mixture source 'code': max_epochs needs <mixture planned_steps") != std::string::npos);
  for (const char* bad : {"1.5", "-0.1", "nan", "inf", "x", ""}) {
    CAPTURE(bad);
    const std::string e = error("<mixture temperature=\"" + std::string(bad) + "\">" + chat + "</mixture>");
    CHECK(e.find("temperature") != std::string::npos);
  }
  CHECK(error("<mixture temperature=\"0.3\" planned_steps=\"0\">" + chat + code + "</mixture>")
            .find("planned_steps must be > 0") != std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\" planned_steps=\"1.5\">" + chat + code + "</mixture>")
            .find("config key 'mixture_planned_steps': expected an integer, got '1.5'") != std::string::npos);
  for (const char* bad : {"0", "-1", "nan", "two"}) {
    CAPTURE(bad);
    const std::string e =
        error("<mixture temperature=\"0.3\" planned_steps=\"10\">" + chat +
              "<source name=\"code\" dataset_dir=\"code\" weight=\"auto\" max_epochs=\"" + bad + "\"/></mixture>");
    CHECK(e.find("mixture source 'code'") != std::string::npos);
    CHECK(e.find("max_epochs") != std::string::npos);
  }
  CHECK(error("<mixture temperature=\"0.3\">" + chat +
              "<source name=\"code\" dataset_dir=\"code\" weight=\"2\"/></mixture>")
            .find("mixture source 'code': weight '2' next to 'auto' weights") != std::string::npos);
  CHECK(error("<mixture planned_steps=\"10\"><source name=\"code\" dataset_dir=\"code\" weight=\"2\" "
              "max_epochs=\"1\"/></mixture>")
            .find("mixture source 'code': max_epochs caps a weight 'auto' only") != std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\"><source name=\"code\" dataset_dir=\"code\" weight=\"2\"/></mixture>")
            .find("no source has weight 'auto'") != std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\" planned_steps=\"10\">" + chat + "</mixture>")
            .find("no source has max_epochs") != std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\">" + chat + "<stage><weight source=\"chat\">auto</weight></stage></mixture>")
            .find("mixture stage 0: weight 'auto' of source 'chat'") != std::string::npos);
  CHECK(
      error("<mixture temprature=\"0.3\">" + chat + "</mixture>").find("unknown attribute 'temprature' on <mixture>") !=
      std::string::npos);
  CHECK(error("<mixture temperature=\"0.3\" planned_steps=\"10\">" + chat +
              "<source name=\"code\" dataset_dir=\"code\" weight=\"auto\" max_epochs=\"2\" "
              "batch_sampling_mode=\"random\"/></mixture>")
            .find("mixture source 'code': max_epochs with batch_sampling_mode=random") != std::string::npos);
  // Both sources capped at a long plan: nothing may take the rest.
  CHECK(error("<mixture temperature=\"0.3\" planned_steps=\"1000\">"
              "<source name=\"chat\" dataset_dir=\"chat\" weight=\"auto\" max_epochs=\"1\"/>" +
              code + "</mixture>")
            .find("max_epochs caps every source with tokens (chat <= ") != std::string::npos);
}
