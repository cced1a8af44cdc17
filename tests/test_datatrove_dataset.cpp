// datatrove tokenized files (NAME.ds + NAME.ds.index + NAME.ds.metadata) read in place as
// token streams: the files datatrove's own writer made (tests/data/datatrove/, written by
// tests/data/make_datatrove_fixtures.py through datatrove 0.10.1's TokenizedFile) against
// the documents that script describes, document_aware rows from the .ds.index, and every
// kind of damage refused naming the file and the first bad entry.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "dataset/datatrove_index.hpp"
#include "dataset/episode_dataset.hpp"
#include "dataset/token_stream.hpp"
#include "document_rows.hpp"
#include "inspect/inspect_dataset.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(TOKENFEED_TEST_DATA_DIR) / "datatrove";
constexpr std::uint64_t kDocuments = 40;

// The tokens make_datatrove_fixtures.py wrote, and where its documents start.
struct Expected {
  std::vector<std::uint32_t> tokens;
  std::set<std::uint64_t> starts;
};

Expected expected(std::uint32_t vocab) {
  Expected e;
  for (std::uint64_t d = 0; d < kDocuments; ++d) {
    e.starts.insert(e.tokens.size());
    for (std::uint64_t j = 0; j < 1 + (d * 7) % 23; ++j) {
      e.tokens.push_back(static_cast<std::uint32_t>((d * 131 + j * 17) % vocab + 1));
    }
  }
  return e;
}

// A split train/ holding copies of the fixture files named `stem` (*.ds, .index, .metadata).
void copy_fixture(const fs::path& root, const std::string& stem) {
  fs::create_directories(root / "train");
  for (const char* ext : {".ds", ".ds.index", ".ds.metadata"}) {
    fs::copy_file(kFixtures / (stem + ext), root / "train" / (stem + ext), fs::copy_options::overwrite_existing);
  }
}

std::string file_text(const fs::path& path) {
  const std::vector<char> bytes = read_bytes(path);
  return {bytes.begin(), bytes.end()};
}

std::string open_error(const fs::path& root, ErrorKind kind = ErrorKind::format) {
  return error_of([&] { TokenStreamSplit::open(root, "train", std::nullopt); }, kind);
}

Config stream_config(const fs::path& dir, std::int64_t batch, std::int64_t block) {
  Config c = make_config(dir, batch, block);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = SamplingMode::random;
  c.pad_token_id.reset();
  return c;
}

}  // namespace

TEST_CASE("datatrove: files of datatrove's writer open with their token size, tokenizer and documents") {
  for (const auto& [stem, vocab, dtype, tokenizer] :
       {std::tuple{"web_00000_unshuffled", 50000u, TokenDtype::uint16, "gpt2"},
        std::tuple{"wide_00000_unshuffled", 120000u, TokenDtype::uint32, "meta-llama/Llama-3.1-8B"}}) {
    CAPTURE(stem);
    TempDir dir;
    copy_fixture(dir.path(), stem);
    const Expected e = expected(vocab);
    const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", std::nullopt);
    REQUIRE(split.files().size() == 1);
    const StreamFile& f = split.files()[0];
    CHECK(f.format == StreamFileFormat::datatrove);
    CHECK(f.dtype == dtype);
    CHECK(f.tokenizer == tokenizer);
    CHECK(f.documents == kDocuments);
    REQUIRE(f.tokens == e.tokens.size());
    std::vector<std::int64_t> read(e.tokens.size());
    split.read(0, 0, e.tokens.size(), read.data());
    CHECK(std::equal(read.begin(), read.end(), e.tokens.begin(), e.tokens.end()));
    for (std::uint64_t t = 0; t < e.tokens.size(); ++t) {
      const auto next = e.starts.upper_bound(t);
      CHECK(f.document_starts->next_start_after(t) == (next == e.starts.end() ? UINT64_MAX : *next));
    }
  }
}

TEST_CASE("datatrove: document_aware rows take their boundaries from the .ds.index, without an eos id") {
  TempDir dir;
  copy_fixture(dir.path(), "web_00000_unshuffled");
  const Expected e = expected(50000);
  const std::size_t T = 12;
  Config c = stream_config(dir.path(), 4, T);
  c.document_aware = true;
  Loader loader(c);
  CHECK(loader.config().token_dtype == TokenDtype::uint16);
  std::size_t boundaries = 0;
  for (int k = 0; k < 25; ++k) boundaries += check_document_rows(loader.get_batch(), 4, T, e.tokens, e.starts);
  CHECK(boundaries > 20);
}

TEST_CASE("datatrove: inspect reports a .ds file's dtype, documents and tokenizer") {
  TempDir dir;
  copy_fixture(dir.path(), "wide_00000_unshuffled");
  InspectRequest request;
  request.dataset_dir = dir.path().string();
  request.block_size = 8;
  const DatasetReport report = inspect_dataset(request);
  REQUIRE(report.splits.size() == 1);
  const SplitReport& train = report.splits[0];
  CHECK(train.verdict == "ok");
  REQUIRE(train.stream);
  REQUIRE(train.stream->files.size() == 1);
  const StreamFileFigures& f = train.stream->files[0];
  CHECK(f.dtype == TokenDtype::uint32);
  CHECK(f.dtype_source == DtypeSource::datatrove_metadata);
  CHECK(f.documents == kDocuments);
  CHECK(f.docs_file == "wide_00000_unshuffled.ds.index");
  CHECK(f.tokenizer == "meta-llama/Llama-3.1-8B");
  // The suggested config is document-aware: the .ds.index has the documents, no eos id needed.
  const auto aware = std::find_if(report.suggested_config.begin(), report.suggested_config.end(),
                                  [](const SuggestedKey& k) { return k.key == "document_aware"; });
  REQUIRE(aware != report.suggested_config.end());
  CHECK(aware->value == "true");
}

TEST_CASE("datatrove: without its .ds.metadata the token size comes from token_dtype, else it is refused") {
  TempDir dir;
  copy_fixture(dir.path(), "web_00000_unshuffled");
  fs::remove(dir / "train/web_00000_unshuffled.ds.metadata");
  CHECK(open_error(dir.path(), ErrorKind::config).find("set token_dtype") != std::string::npos);
  const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", TokenDtype::uint16);
  CHECK(split.files()[0].documents == kDocuments);
  CHECK(split.files()[0].tokenizer.empty());
}

TEST_CASE("datatrove: each kind of damage is refused naming the file and the first bad entry") {
  TempDir dir;
  const std::string stem = "web_00000_unshuffled";
  const std::string ds = file_text(kFixtures / (stem + ".ds")), index = file_text(kFixtures / (stem + ".ds.index")),
                    meta = file_text(kFixtures / (stem + ".ds.metadata"));
  const std::uint64_t tokens = ds.size() / 2;
  const auto end_at = [](std::string& bytes, std::size_t d, std::uint64_t value) {
    std::memcpy(bytes.data() + 8 * d, &value, 8);
  };
  struct Damage {
    std::string what;
    std::function<void(std::string& ds, std::string& index, std::string& meta)> make;
    std::string expected;
  };
  const std::vector<Damage> damages = {
      {"odd index", [](std::string&, std::string& i, std::string&) { i.pop_back(); },
       ".ds.index': size 319 bytes is not a multiple of 8"},
      {"empty index", [](std::string&, std::string& i, std::string&) { i.clear(); },
       ".ds.index': holds no document end, but its data file holds " + std::to_string(tokens)},
      {"decreasing", [&](std::string&, std::string& i, std::string&) { end_at(i, 3, 2); },
       ".ds.index': document end 3 is 2, below the previous one"},
      {"past the tokens", [&](std::string&, std::string& i, std::string&) { end_at(i, 10, tokens + 1); },
       ".ds.index': document end 10 is " + std::to_string(tokens + 1) + ", past the " + std::to_string(tokens)},
      {"last short", [&](std::string&, std::string& i, std::string&) { end_at(i, kDocuments - 1, tokens - 1); },
       ".ds.index': the last document end (39) is " + std::to_string(tokens - 1)},
      {"trailing tokens",
       [](std::string& d, std::string&, std::string& m) {
         d.append(2, '\0');
         m = "gpt2|2\n" + std::to_string(d.size() / 2) + "\n";
       },
       ".ds.index': the last document end (39) is " + std::to_string(tokens) + ", but its data file holds " +
           std::to_string(tokens + 1)},
      {"odd .ds", [](std::string& d, std::string&, std::string&) { d.push_back('\0'); },
       ".ds': size " + std::to_string(2 * tokens + 1) + " bytes is not a multiple of 2"},
      {"no bar", [](std::string&, std::string&, std::string& m) { m = "gpt2\n486\n"; },
       ".ds.metadata': first line is not TOKENIZER|TOKEN_SIZE"},
      {"token size", [](std::string&, std::string&, std::string& m) { m = "gpt2|8\n486\n"; },
       ".ds.metadata': token size '8'"},
      {"count", [](std::string&, std::string&, std::string& m) { m = "gpt2|2\nmany\n"; },
       ".ds.metadata': second line 'many' is not a token count"},
      {"count disagrees", [](std::string&, std::string&, std::string& m) { m = "gpt2|2\n485\n"; },
       ".ds.metadata': token count 485, but 'web_00000_unshuffled.ds' holds " + std::to_string(tokens)},
      {"size disagrees", [](std::string&, std::string&, std::string& m) { m = "gpt2|4\n486\n"; },
       ".ds.metadata': token count 486, but 'web_00000_unshuffled.ds' holds 243 tokens of uint32"},
  };
  fs::create_directories(dir / "train");
  for (const Damage& damage : damages) {
    CAPTURE(damage.what);
    std::string d = ds, i = index, m = meta;
    damage.make(d, i, m);
    write_raw(dir / "train" / (stem + ".ds"), d.data(), d.size());
    write_raw(dir / "train" / (stem + ".ds.index"), i.data(), i.size());
    write_raw(dir / "train" / (stem + ".ds.metadata"), m.data(), m.size());
    const std::string error = open_error(dir.path());
    CAPTURE(error);
    CHECK(error.find(damage.expected) != std::string::npos);
    CHECK(error.find((dir / "train" / stem).string()) != std::string::npos);  // the full path
  }
  // A .ds without its index, and an index without its .ds.
  write_raw(dir / "train" / (stem + ".ds.metadata"), meta.data(), meta.size());
  write_raw(dir / "train" / (stem + ".ds"), ds.data(), ds.size());
  fs::remove(dir / "train" / (stem + ".ds.index"));
  CHECK(open_error(dir.path()).find(".ds': has no 'web_00000_unshuffled.ds.index' beside it") != std::string::npos);
  write_raw(dir / "train" / "orphan.ds.index", index.data(), index.size());
  CHECK(open_error(dir.path()).find("orphan.ds.index' holds document ends, but its token file 'orphan.ds'") !=
        std::string::npos);
}

TEST_CASE("datatrove: sft_packed reads each document of datatrove's files as an episode, as prepared episodes would") {
  for (const auto& fixture : {std::tuple{"web_00000_unshuffled", 50000u, TokenDtype::uint16},
                              std::tuple{"wide_00000_unshuffled", 120000u, TokenDtype::uint32}}) {
    const std::string stem = std::get<0>(fixture);
    const std::uint32_t vocab = std::get<1>(fixture);
    const TokenDtype dtype = std::get<2>(fixture);
    CAPTURE(stem);
    TempDir dir, reference;
    copy_fixture(dir.path(), stem);
    const Expected e = expected(vocab);
    // The documents from the tokens and the starts the fixture script describes.
    std::vector<std::vector<std::uint32_t>> documents;
    std::vector<TestEpisode> episodes;
    for (auto it = e.starts.begin(); it != e.starts.end(); ++it) {
      const std::uint64_t end = std::next(it) == e.starts.end() ? e.tokens.size() : *std::next(it);
      documents.emplace_back(e.tokens.begin() + static_cast<std::ptrdiff_t>(*it),
                             e.tokens.begin() + static_cast<std::ptrdiff_t>(end));
      episodes.push_back({documents.back(), {}});
    }
    REQUIRE(documents.size() == kDocuments);
    write_split(reference.path(), "train", episodes, dtype, false, 1);
    const std::size_t T = 10;
    Config c = make_config(dir.path(), 2, T);
    c.dataset_mode = DatasetMode::sft_packed;
    c.truncation = Truncation::right;
    {
      Loader loader(c);
      CHECK(loader.config().token_dtype == dtype);
      std::size_t segments = 0;
      for (int k = 0; k < 6; ++k) segments += check_document_segments(loader.get_batch(), T, documents);
      CHECK(segments >= 12);
    }
    c.truncation = Truncation::split;
    Config r = c;
    r.dataset_dir = reference.path();
    r.token_dtype = dtype;
    Loader foreign(c), prepared(r);
    check_same_batches(foreign, prepared, 30);
  }
}

TEST_CASE("datatrove: val_fraction splits datatrove's documents by hash, train and val together the whole file") {
  TempDir dir;
  copy_fixture(dir.path(), "web_00000_unshuffled");
  const Expected e = expected(50000);
  Config c = stream_config(dir.path(), 1, 3);
  c.batch_sampling_mode = SamplingMode::epoch;
  c.val_fraction = 0.3;
  Loader loader(c);
  const std::uint64_t train = loader.split_info("train").tokens, val = loader.split_info("val").tokens;
  CHECK(train > 0);
  CHECK(val > 0);
  CHECK(train + val == e.tokens.size());
  CHECK_NOTHROW(loader.get_batch("val"));
}

TEST_CASE("datatrove: val_fraction in sft_packed holds the token stream's val documents as episodes, train the rest") {
  TempDir dir;
  copy_fixture(dir.path(), "web_00000_unshuffled");
  const Expected e = expected(50000);
  const DocumentHashSplit by_hash{0.3, 0};
  std::uint64_t tokens = 0, episodes = 0;
  for (const char* name : {"train", "val"}) {
    CAPTURE(name);
    const TokenStreamSplit stream = TokenStreamSplit::open(dir.path(), name, std::nullopt, {}, by_hash);
    const EpisodeSplit split = EpisodeSplit::open_documents(dir.path(), name, {}, {}, by_hash);
    // Episode k is the stream split's k-th document, where the stream's index puts it.
    std::vector<std::uint64_t> starts;
    for (const DocumentRange& r : stream.ranges()) {
      for (std::uint64_t d = 0; d < r.documents; ++d) {
        starts.push_back(stream.files()[r.file].document_starts->document_start(r.first_document + d));
      }
    }
    REQUIRE(split.num_episodes() == starts.size());
    CHECK(split.num_episodes() > 3);
    for (std::uint64_t k = 0; k < split.num_episodes(); ++k) CHECK(split.spans()[k].start == starts[k]);
    CHECK(split.total_tokens() == stream.total_tokens());
    tokens += split.total_tokens();
    episodes += split.num_episodes();
  }
  CHECK(tokens == e.tokens.size());
  CHECK(episodes == kDocuments);  // the fixture has no empty document
  Config c = make_config(dir.path(), 2, 10);
  c.dataset_mode = DatasetMode::sft_packed;
  c.val_fraction = by_hash.fraction;
  Loader loader(c);
  CHECK(loader.split_info("train").episodes + loader.split_info("val").episodes == kDocuments);
  CHECK_NOTHROW(loader.get_batch("val"));
  CHECK_NOTHROW(loader.get_batch());
}
