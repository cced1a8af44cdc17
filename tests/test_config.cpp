// The XML config: keys, defaults, inheritance, and an error naming the key for every
// kind of bad input.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

using namespace tokenfeed;
using tokenfeed::test::error_of;
using tokenfeed::test::TempDir;
using tokenfeed::test::write_text;

namespace {

Config parse(const std::string& body) { return parse_config_xml("<training>" + body + "</training>", "/base"); }

}  // namespace

TEST_CASE("config: defaults, every key, and <training> as root or child") {
  const Config d = parse("<dataset_dir>/data</dataset_dir><batch_size>8</batch_size><block_size>16</block_size>");
  CHECK(d.dataset_dir == "/data");
  CHECK(d.batch_size == 8);
  CHECK(d.block_size == 16);
  CHECK(d.dataset_mode == DatasetMode::auto_detect);
  CHECK_FALSE(d.use_loss_mask.has_value());  // auto
  CHECK_FALSE(d.batch_sampling_mode.has_value());
  CHECK(d.epoch_shuffle);
  CHECK(d.epoch_drop_last);
  CHECK(d.epoch_seed == 1337);
  CHECK_FALSE(d.pad_token_id.has_value());
  CHECK(d.episode_min_tokens == 2);
  CHECK(d.rank == kFromLauncher);  // absent: from the launcher's environment, else 0 of 1
  CHECK(d.world_size == kFromLauncher);
  CHECK(d.audit_log_dir == "logs/audit");

  const Config c = parse_config_xml(R"(<config><model/><training>
      <!-- a comment -->
      <dataset_dir> rel/data </dataset_dir><dataset_mode>sft_episode</dataset_mode>
      <batch_size>4</batch_size><block_size>32</block_size><use_loss_mask>true</use_loss_mask>
      <batch_sampling_mode>random</batch_sampling_mode><epoch_shuffle>false</epoch_shuffle>
      <epoch_drop_last>0</epoch_drop_last><epoch_seed>7</epoch_seed><pad_token_id>50256</pad_token_id>
      <episode_min_tokens>3</episode_min_tokens><token_dtype>uint32</token_dtype><mask_dtype>float32</mask_dtype>
      <prefetch_depth>16</prefetch_depth><decode_threads>3</decode_threads><rank>1</rank><world_size>2</world_size>
      <audit_log_dir></audit_log_dir></training></config>)",
                                    "/base/dir");
  CHECK(c.dataset_dir == "/base/dir/rel/data");
  CHECK(c.dataset_mode == DatasetMode::sft_episode);
  CHECK(c.use_loss_mask);
  CHECK(c.batch_sampling_mode == SamplingMode::random);
  CHECK_FALSE(c.epoch_shuffle);
  CHECK_FALSE(c.epoch_drop_last);
  CHECK(c.epoch_seed == 7);
  CHECK(c.pad_token_id == 50256);
  CHECK(c.episode_min_tokens == 3);
  CHECK(c.token_dtype == TokenDtype::uint32);
  CHECK(c.mask_dtype == MaskDtype::float32);
  CHECK(c.prefetch_depth == 16);
  CHECK(c.decode_threads == 3);
  CHECK(c.rank == 1);
  CHECK(c.world_size == 2);
  CHECK(c.audit_log_dir.empty());
  CHECK_NOTHROW(validate_config(c));
}

TEST_CASE("config: errors name the key and the problem") {
  CHECK(error_of([] { parse("<batch_size>abc</batch_size>"); }).find("'batch_size': expected an integer") != std::string::npos);
  CHECK(error_of([] { parse("<batch_size>8x</batch_size>"); }).find("batch_size") != std::string::npos);
  CHECK(error_of([] { parse("<epoch_shuffle>yes</epoch_shuffle>"); }).find("'epoch_shuffle': expected true or false") !=
        std::string::npos);
  CHECK(error_of([] {
          parse("<use_loss_mask>yes</use_loss_mask>");
        }).find("'use_loss_mask': expected auto, true or false") != std::string::npos);
  CHECK_FALSE(parse("<use_loss_mask> auto </use_loss_mask>").use_loss_mask.has_value());
  CHECK(parse("<use_loss_mask>0</use_loss_mask>").use_loss_mask == std::optional<bool>(false));
  CHECK(error_of([] { parse("<dataset_mode>packed</dataset_mode>"); }).find("'dataset_mode': unknown value 'packed'") !=
        std::string::npos);
  CHECK(error_of([] { parse("<batch_sampling_mode>shuffle</batch_sampling_mode>"); }).find("batch_sampling_mode") !=
        std::string::npos);
  CHECK(error_of([] { parse("<token_dtype>int8</token_dtype>"); }).find("token_dtype") != std::string::npos);
  CHECK(error_of([] { parse("<batchsize>8</batchsize>"); }).find("unknown config key 'batchsize'") != std::string::npos);
  CHECK(error_of([] { parse("<batch_size>8</batch_size><batch_size>9</batch_size>"); }).find("given twice") !=
        std::string::npos);
  CHECK(error_of([] { parse("<batch_size><x/></batch_size>"); }).find("batch_size") != std::string::npos);
  const std::string malformed = error_of([] { parse_config_xml("<training><batch_size>8</batch_size>", "/"); });
  CHECK(malformed.find("malformed XML at offset") != std::string::npos);
  CHECK(error_of([] { parse_config_xml("<config><model/></config>", "/"); }).find("no <training> element") !=
        std::string::npos);
  CHECK(error_of([] { parse_config_xml("<training foo=\"1\"/>", "/"); }).find("unknown attribute 'foo'") !=
        std::string::npos);
}

TEST_CASE("config: validation of ranges names the key") {
  Config c;
  c.dataset_dir = "/d";
  c.batch_size = 8;
  c.block_size = 16;
  CHECK_NOTHROW(validate_config(c));
  const auto with = [&](auto change) {
    Config copy = c;
    change(copy);
    return error_of([&] { validate_config(copy); });
  };
  CHECK(with([](Config& x) { x.batch_size = 0; }).find("'batch_size' is required") != std::string::npos);
  CHECK(with([](Config& x) { x.block_size = -4; }).find("'block_size' must be > 0, got -4") != std::string::npos);
  CHECK(with([](Config& x) { x.dataset_dir.clear(); }).find("dataset_dir") != std::string::npos);
  CHECK(with([](Config& x) { x.episode_min_tokens = 1; }).find("episode_min_tokens") != std::string::npos);
  CHECK(with([](Config& x) { x.epoch_seed = 1LL << 32; }).find("epoch_seed") != std::string::npos);
  CHECK(with([](Config& x) { x.prefetch_depth = -1; }).find("prefetch_depth") != std::string::npos);
  CHECK(with([](Config& x) { x.decode_threads = -1; }).find("decode_threads") != std::string::npos);
  CHECK(with([](Config& x) { x.world_size = 0; }).find("world_size") != std::string::npos);
  CHECK(with([](Config& x) { x.rank = 2; x.world_size = 2; }).find("'rank'") != std::string::npos);
  CHECK(with([](Config& x) { x.pad_token_id = -1; }).find("pad_token_id") != std::string::npos);
  CHECK(with([](Config& x) { x.ignore_index = 0; }).find("'ignore_index' must be negative") != std::string::npos);
  CHECK(with([](Config& x) { x.batch_size = 1 << 16; x.block_size = 1 << 15; }).find("2^31 - 1 positions") !=
        std::string::npos);
  // A size given as 0 is a bad value, not a missing key.
  Config parsed = c;
  CHECK(error_of([&] { set_config_value(parsed, "batch_size", "0"); }).find("'batch_size' must be > 0, got 0") !=
        std::string::npos);
}

TEST_CASE("config: inherits overrides base keys, resolves paths per file, rejects cycles and missing files") {
  TempDir dir;
  write_text(dir / "base/base.xml",
             "<training><dataset_dir>data</dataset_dir><batch_size>8</batch_size><block_size>64</block_size>"
             "<epoch_seed>1</epoch_seed></training>");
  write_text(dir / "exp/exp.xml", "<training inherits=\"../base/base.xml\"><epoch_seed>42</epoch_seed></training>");
  const Config c = load_config_file(dir / "exp/exp.xml");
  CHECK(c.epoch_seed == 42);
  CHECK(c.batch_size == 8);
  CHECK(c.dataset_dir == (dir.path() / "base/data").lexically_normal());

  write_text(dir / "a.xml", "<training inherits=\"b.xml\"/>");
  write_text(dir / "b.xml", "<training inherits=\"a.xml\"/>");
  CHECK(error_of([&] { load_config_file(dir / "a.xml"); }).find("cycle") != std::string::npos);
  write_text(dir / "c.xml", "<training inherits=\"missing.xml\"/>");
  CHECK(error_of([&] { load_config_file(dir / "c.xml"); }).find("missing.xml") != std::string::npos);
  CHECK(error_of([&] { load_config_file(dir / "nope.xml"); }, ErrorKind::io).find("nope.xml") != std::string::npos);
  write_text(dir / "bad.xml", "<training><batch_size>1</batch_size>");
  CHECK(error_of([&] { load_config_file(dir / "bad.xml"); }).find("bad.xml") != std::string::npos);
}

TEST_CASE("config: set_config_value and config_entries round trip") {
  Config c;
  set_config_value(c, "batch_size", "12");
  set_config_value(c, "use_loss_mask", "true");
  CHECK(c.batch_size == 12);
  CHECK(c.use_loss_mask == std::optional<bool>(true));
  CHECK_THROWS_AS(set_config_value(c, "nope", "1"), Error);
  Config copy;
  for (const auto& [key, value] : config_entries(c)) {
    if (!value.empty()) set_config_value(copy, key, value);
  }
  CHECK(config_entries(copy) == config_entries(c));
}

TEST_CASE("config: per-split epoch settings in <train> and <val>, and max_held_batches") {
  const Config c = parse(
      "<epoch_shuffle>true</epoch_shuffle><val><epoch_shuffle>false</epoch_shuffle>"
      "<epoch_drop_last>0</epoch_drop_last></val><train><epoch_drop_last>false</epoch_drop_last></train>"
      "<max_held_batches>8</max_held_batches>");
  CHECK(c.val_overrides.epoch_shuffle == std::optional<bool>(false));
  CHECK(c.val_overrides.epoch_drop_last == std::optional<bool>(false));
  CHECK_FALSE(c.train_overrides.epoch_shuffle.has_value());
  CHECK(c.shuffle_for("train"));
  CHECK_FALSE(c.shuffle_for("val"));
  CHECK_FALSE(c.drop_last_for("train"));
  CHECK(c.max_held_batches == 8);
  CHECK(parse("").max_held_batches == 4);
  // The flat keys, for set_config_value and bindings, round trip through config_entries.
  Config flat;
  set_config_value(flat, "val.epoch_shuffle", "false");
  bool listed = false;
  for (const auto& [key, value] : config_entries(flat))
    listed = listed || (key == "val.epoch_shuffle" && value == "false");
  CHECK(listed);
  CHECK(error_of([] { parse("<val><seed>3</seed></val>"); })
            .find("unknown key 'seed' in <val> (per-split keys: epoch_shuffle, epoch_drop_last, batch_size, "
                  "block_size)") != std::string::npos);
  CHECK(error_of([] {
          parse("<train><batch_size>3</batch_size></train>");
        }).find("unknown key 'batch_size' in <train> (per-split keys: epoch_shuffle, epoch_drop_last;") !=
        std::string::npos);
  CHECK(error_of([] { parse("<val><epoch_shuffle>maybe</epoch_shuffle></val>"); }).find("val.epoch_shuffle") !=
        std::string::npos);
  CHECK(error_of([] { parse("<val>false</val>"); }).find("<val> holds keys") != std::string::npos);
}

TEST_CASE("config: an inherits name the file system refuses is a config error, not a filesystem exception") {
  const std::string xml =
      "<training inherits=\"" + std::string(5000, 'x') + ".xml\"><batch_size>1</batch_size></training>";
  const std::string message =
      test::error_of([&] { (void)parse_config_xml(xml, std::filesystem::temp_directory_path()); });
  CHECK(message.find("inherited config") != std::string::npos);
}

TEST_CASE(
    "config: docs/config.md's key table has a row for every key with its default, and its truncation row names every "
    "rule") {
  std::ifstream in(std::string(TOKENFEED_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string page = text.str();
  // A row's first cell names its keys: "| `rank`, `world_size` | `env` | ...".
  const auto row_of = [&page](const std::string& key) -> std::string {
    std::istringstream lines(page);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("| ", 0) != 0) continue;
      const std::string first = line.substr(0, line.find(" |", 1));
      if (first.find("`" + key + "`") != std::string::npos) return line;
    }
    return {};
  };
  const auto default_cell = [](const std::string& row) {
    const std::size_t begin = row.find(" | ") + 3;
    return row.substr(begin, row.find(" |", begin) - begin);
  };
  for (const auto& [key, value] : config_entries(Config{})) {
    CAPTURE(key);
    // A per-split key ("val.epoch_shuffle") is documented in the <train>, <val> row.
    const bool per_split = key.find('.') != std::string::npos;
    const std::string row = row_of(per_split ? "<" + key.substr(0, key.find('.')) + ">" : key);
    REQUIRE_FALSE(row.empty());
    // A default the library states as a value is the table's, written as code; one it
    // leaves empty (required, from the metadata, by mode) is described in words.
    if (!per_split && !value.empty()) CHECK(default_cell(row) == "`" + value + "`");
    if (value.empty()) CHECK(default_cell(row).find('`') == std::string::npos);
  }
  const std::string truncation = row_of("truncation");
  for (const Truncation rule : {Truncation::right, Truncation::drop_oldest_turns, Truncation::split}) {
    CAPTURE(to_string(rule));
    CHECK(truncation.find(std::string("`") + to_string(rule) + "`") != std::string::npos);
  }
}
