// The token-stream (pretraining) mode: layouts, .npy validation, window carving, epoch
// coverage, random windows, document-aware fields and resume.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include "io/npy.hpp"
#include "test_support.hpp"
#include "dataset/token_stream.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Token i of file f is 10000 * (f + 1) + i, so a window can be traced to its file and offset.
std::vector<std::uint16_t> file_tokens(std::size_t file, std::size_t n) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(10000 * (file + 1) + i);
  return t;
}

void write_bin(const std::filesystem::path& path, const std::vector<std::uint16_t>& tokens) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

void write_npy(const std::filesystem::path& path, const std::vector<std::uint16_t>& tokens) {
  std::filesystem::create_directories(path.parent_path());
  NpyWriter w(path, "<u2", {tokens.size()});
  w.append(std::span<const std::uint16_t>(tokens));
  w.finish();
}

// A sharded split with files of lengths 10, 7, 23 and 3 (.npy and .bin mixed).
void write_sharded(const std::filesystem::path& root) {
  write_npy(root / "train/a_000.npy", file_tokens(0, 10));
  write_bin(root / "train/a_001.bin", file_tokens(1, 7));
  write_npy(root / "train/a_002.npy", file_tokens(2, 23));
  write_npy(root / "train/a_003.npy", file_tokens(3, 3));
  write_text(root / "dataset_metadata.json", R"({"token_dtype": "uint16"})");
}

Config stream_config(const std::filesystem::path& dir, std::int64_t batch, std::int64_t block, SamplingMode mode) {
  Config c = make_config(dir, batch, block);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = mode;
  c.pad_token_id.reset();
  return c;
}

std::string stream_error(const std::filesystem::path& root, std::optional<TokenDtype> dtype = TokenDtype::uint16) {
  try {
    TokenStreamSplit::open(root, "train", dtype);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected an Error");
  return {};
}

}  // namespace

TEST_CASE("token stream: windows carved per file at multiples of block_size + 1, remainders unused") {
  TempDir dir;
  write_sharded(dir.path());
  Config c = stream_config(dir.path(), 1, 4, SamplingMode::epoch);
  c.epoch_shuffle = false;
  Loader loader(c);
  // Windows of 5 tokens: 2 from the first file, 1, 4, and none from the 3-token file.
  CHECK(loader.split_info("train").windows == 7);
  CHECK(loader.split_info("train").shards == 4);
  const std::vector<std::pair<std::size_t, std::size_t>> expected = {{0, 0}, {0, 5}, {1, 0}, {2, 0}, {2, 5}, {2, 10}, {2, 15}};
  for (std::size_t w = 0; w < expected.size(); ++w) {
    Batch b = loader.get_batch();
    const auto [file, offset] = expected[w];
    CAPTURE(w);
    CHECK(b.window_ids()[0] == static_cast<std::int64_t>(w));
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(b.x()[i] == static_cast<std::int64_t>(10000 * (file + 1) + offset + i));
      CHECK(b.y()[i] == static_cast<std::int64_t>(10000 * (file + 1) + offset + i + 1));
    }
    CHECK(b.doc_ids().empty());
  }
  CHECK(loader.get_batch().epoch() == 1);
}

TEST_CASE("token stream: every window exactly once per shuffled epoch, identical across threads and depths") {
  TempDir dir;
  write_sharded(dir.path());
  for (const int threads : {1, 3}) {
    Config c = stream_config(dir.path(), 2, 4, SamplingMode::epoch);
    c.epoch_drop_last = false;
    c.decode_threads = threads;
    c.prefetch_depth = threads == 1 ? 1 : 16;
    Loader loader(c);
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      std::multiset<std::int64_t> seen;
      for (int b = 0; b < 4; ++b) {
        Batch batch = loader.get_batch();
        CHECK(batch.epoch() == epoch);
        for (auto id : batch.window_ids()) seen.insert(id);
      }
      CHECK(seen.count(-1) == 1);  // 7 windows in batches of 2: one fill row
      for (std::int64_t w = 0; w < 7; ++w) CHECK(seen.count(w) == 1);
    }
  }
}

TEST_CASE("token stream: random windows are deterministic, in range and never straddle files") {
  TempDir dir;
  write_sharded(dir.path());
  const Config c = stream_config(dir.path(), 8, 4, SamplingMode::random);
  Loader a(c), b(c);
  CHECK(a.split_info("train").windows == 6 + 3 + 19);
  const std::map<int, std::pair<std::int64_t, std::int64_t>> files = {{0, {0, 10}}, {1, {10, 17}}, {2, {17, 40}}};
  std::set<std::int64_t> starts;
  for (int k = 0; k < 50; ++k) {
    Batch ba = a.get_batch();
    Batch bb = b.get_batch();
    CHECK(std::vector<std::int64_t>(ba.x().begin(), ba.x().end()) == std::vector<std::int64_t>(bb.x().begin(), bb.x().end()));
    for (std::size_t r = 0; r < 8; ++r) {
      const std::int64_t start = ba.window_ids()[r];  // the global token offset of the window
      starts.insert(start);
      const std::int64_t first = ba.x()[r * 4];
      const int file = static_cast<int>(first / 10000) - 1;
      REQUIRE(files.count(file) == 1);
      const auto [begin, end] = files.at(file);
      CHECK(start == begin + first % 10000);
      CHECK(start + 5 <= end);  // the whole window, label included, is inside one file
      CHECK(ba.y()[r * 4 + 3] == first + 4);
    }
  }
  CHECK(starts.size() == 28);  // 400 draws reach every one of the 28 valid starts
  Config other = c;
  other.epoch_seed = 7;
  Loader d(other), e(c);
  Batch from_other_seed = d.get_batch();
  Batch from_same_seed = e.get_batch();
  CHECK(std::vector<std::int64_t>(from_other_seed.window_ids().begin(), from_other_seed.window_ids().end()) !=
        std::vector<std::int64_t>(from_same_seed.window_ids().begin(), from_same_seed.window_ids().end()));
}

TEST_CASE("token stream: nanoGPT train.bin/val.bin auto-detected, .bin needs a dtype") {
  TempDir dir;
  write_bin(dir / "train.bin", file_tokens(0, 100));
  write_bin(dir / "val.bin", file_tokens(1, 30));
  Config c = make_config(dir.path(), 2, 8);
  c.pad_token_id.reset();
  CHECK(test::error_of([&] { Loader loader(c); })
            .find("train.bin': the token dtype of a .bin file is not known; set token_dtype") != std::string::npos);
  c.token_dtype = TokenDtype::uint16;
  Loader loader(c);
  CHECK(loader.config().dataset_mode == DatasetMode::token_stream);
  CHECK(loader.config().batch_sampling_mode == SamplingMode::random);
  CHECK(loader.has_split("val"));
  CHECK(loader.get_batch("val").x()[0] / 10000 == 2);
}

TEST_CASE("token stream: .npy validation rejects wrong dtype, 2-D, Fortran order and truncated files") {
  TempDir dir;
  const auto write_header = [&](const std::string& header, std::size_t data_bytes) {
    std::filesystem::create_directories(dir / "train");
    std::ofstream out(dir / "train/x.npy", std::ios::binary | std::ios::trunc);
    std::string h = header;
    while ((10 + h.size() + 1) % 64 != 0) h.push_back(' ');
    h.push_back('\n');
    out.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
    out.write(len, 2);
    out << h << std::string(data_bytes, '\0');
  };
  write_header("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 32);
  CHECK(stream_error(dir.path()).find("dtype '<i8' is not a little-endian uint16 or uint32") != std::string::npos);
  write_header("{'descr': '>u2', 'fortran_order': False, 'shape': (4,), }", 8);
  CHECK(stream_error(dir.path()).find("'>u2'") != std::string::npos);
  write_header("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), }", 8);
  CHECK(stream_error(dir.path()).find("expected a 1-D array, got 2 dimensions") != std::string::npos);
  write_header("{'descr': '<u2', 'fortran_order': True, 'shape': (4,), }", 8);
  CHECK(stream_error(dir.path()).find("Fortran order") != std::string::npos);
  write_header("{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 7);
  CHECK(stream_error(dir.path()).find("truncated or corrupt") != std::string::npos);
  write_header("{'descr': '<u4', 'fortran_order': False, 'shape': (4,), }", 16);
  CHECK(TokenStreamSplit::open(dir.path(), "train", std::nullopt).total_tokens() == 4);
  {
    std::ofstream out(dir / "train/x.npy", std::ios::binary | std::ios::trunc);
    out << "\x93NUMPY\x01";  // the magic, and a header cut short
  }
  CHECK(stream_error(dir.path()).find("bad magic") != std::string::npos);
  std::filesystem::remove(dir / "train/x.npy");
  CHECK(stream_error(dir.path()).find("no *.bin, *.npy or *.ds") != std::string::npos);
  CHECK(stream_error(dir / "nowhere").find("not found") != std::string::npos);
  write_bin(dir / "train/odd.bin", {1, 2, 3});
  {
    std::ofstream out(dir / "train/odd.bin", std::ios::binary | std::ios::app);
    out.put('\0');  // 7 bytes: not a multiple of 2
  }
  CHECK(stream_error(dir.path()).find("not a multiple of 2") != std::string::npos);
}

TEST_CASE(
    "token stream: a headerless .npy (OLMo-core, nanoGPT memmaps) reads as flat tokens of the token_dtype given") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = file_tokens(0, 50);
  write_bin(dir / "train/part-0-00000.npy", tokens);  // raw uint16, no .npy header
  const std::string refusal =
      test::error_of([&] { TokenStreamSplit::open(dir.path(), "train", std::nullopt); }, ErrorKind::config);
  CHECK(refusal.find("part-0-00000.npy' has no .npy header") != std::string::npos);
  CHECK(refusal.find("set token_dtype (uint16 or uint32)") != std::string::npos);
  const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", TokenDtype::uint16);
  REQUIRE(split.files().size() == 1);
  CHECK(split.files()[0].format == StreamFileFormat::raw);
  CHECK(split.files()[0].data_offset == 0);
  CHECK(split.total_tokens() == 50);
  CHECK(TokenStreamSplit::open(dir.path(), "train", TokenDtype::uint32).total_tokens() == 25);
  Config c = stream_config(dir.path(), 1, 9, SamplingMode::epoch);
  c.epoch_shuffle = false;
  c.token_dtype = TokenDtype::uint16;
  Loader loader(c);
  for (std::size_t w = 0; w < 5; ++w) {
    Batch b = loader.get_batch();
    for (std::size_t i = 0; i < 9; ++i) {
      CHECK(b.x()[i] == tokens[w * 10 + i]);
      CHECK(b.y()[i] == tokens[w * 10 + i + 1]);
    }
  }
  write_bin(dir / "train/part-0-00000.npy", {1, 2, 3});
  {
    std::ofstream out(dir / "train/part-0-00000.npy", std::ios::binary | std::ios::app);
    out.put('\0');  // 7 bytes: not a multiple of 2
  }
  CHECK(stream_error(dir.path()).find("part-0-00000.npy': size 7 bytes is not a multiple of 2") != std::string::npos);
}

TEST_CASE("token stream: document-aware fields on hand-made rows") {
  const std::int64_t E = 0;  // end of text
  const auto run = [&](std::vector<std::int64_t> x, std::vector<std::int64_t> y) {
    std::vector<std::int32_t> doc(x.size()), pos(x.size());
    apply_document_boundaries(x.data(), y.data(), doc.data(), pos.data(), x.size(), E, -100);
    return std::tuple{y, doc, pos};
  };
  SUBCASE("no boundary") {
    const auto [y, doc, pos] = run({5, 6, 7, 8}, {6, 7, 8, 9});
    CHECK(y == std::vector<std::int64_t>{6, 7, 8, 9});
    CHECK(doc == std::vector<std::int32_t>{0, 0, 0, 0});
    CHECK(pos == std::vector<std::int32_t>{0, 1, 2, 3});
  }
  SUBCASE("a boundary at the first position") {
    const auto [y, doc, pos] = run({E, 6, 7, 8}, {6, 7, 8, 9});
    CHECK(y == std::vector<std::int64_t>{-100, 7, 8, 9});
    CHECK(doc == std::vector<std::int32_t>{0, 1, 1, 1});
    CHECK(pos == std::vector<std::int32_t>{0, 0, 1, 2});
  }
  SUBCASE("a boundary at the last position") {
    const auto [y, doc, pos] = run({5, 6, 7, E}, {6, 7, E, 9});
    CHECK(y == std::vector<std::int64_t>{6, 7, E, -100});  // predicting the end of text is trained
    CHECK(doc == std::vector<std::int32_t>{0, 0, 0, 0});
    CHECK(pos == std::vector<std::int32_t>{0, 1, 2, 3});
  }
  SUBCASE("two boundaries in a row") {
    const auto [y, doc, pos] = run({5, E, E, 8}, {E, E, 8, 9});
    CHECK(y == std::vector<std::int64_t>{E, -100, -100, 9});
    CHECK(doc == std::vector<std::int32_t>{0, 0, 1, 2});
    CHECK(pos == std::vector<std::int32_t>{0, 1, 0, 0});
  }
}

TEST_CASE("token stream: the loader returns document fields with the metadata's end-of-text id") {
  TempDir dir;
  std::vector<std::uint16_t> tokens;
  for (int doc = 0; doc < 30; ++doc) {
    for (int i = 0; i < 1 + doc % 6; ++i) tokens.push_back(static_cast<std::uint16_t>(100 + i));
    tokens.push_back(1);  // end of text
  }
  write_npy(dir / "train/s.npy", tokens);
  write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 1})");
  Config c = stream_config(dir.path(), 4, 16, SamplingMode::random);
  c.document_aware = true;
  Loader loader(c);
  CHECK(loader.config().eos_token_id == 1);
  for (int k = 0; k < 10; ++k) {
    Batch b = loader.get_batch();
    REQUIRE(b.doc_ids().size() == 64);
    for (std::size_t r = 0; r < 4; ++r) {
      // Recompute the fields from x alone and compare with what the loader produced.
      const std::vector<std::int64_t> x(b.x().begin() + r * 16, b.x().begin() + (r + 1) * 16);
      const std::vector<std::int64_t> y(b.y().begin() + r * 16, b.y().begin() + (r + 1) * 16);
      std::int32_t doc = 0, pos = 0;
      for (std::size_t i = 0; i < 16; ++i) {
        CAPTURE(i);
        CHECK(b.doc_ids()[r * 16 + i] == doc);
        CHECK(b.position_ids()[r * 16 + i] == pos);
        if (x[i] == 1) {
          CHECK(y[i] == -100);  // the label after an end of text belongs to the next document
          ++doc;
          pos = 0;
        } else {
          CHECK(y[i] != -100);
          if (i + 1 < 16) CHECK(y[i] == x[i + 1]);
          ++pos;
        }
      }
    }
  }
  Config no_eos = stream_config(dir.path(), 4, 16, SamplingMode::random);
  no_eos.document_aware = true;
  write_text(dir / "dataset_metadata.json", "{}");
  CHECK_THROWS_WITH_AS(Loader{no_eos}, doctest::Contains("needs an end-of-text id"), Error);
}

TEST_CASE("token stream: the positions carrying loss, with and without the contract fields") {
  // What batch.hpp promises for token streams, and what `tokenfeed run` counts as trained:
  // with the contract fields, the nonzero token_weights; without them, the labels (== y)
  // that are not ignore_index. Both are every position of a real row but the end-of-text
  // inputs (document-aware), and none of a fill row.
  TempDir dir;
  std::vector<std::uint16_t> tokens(17 * 11);  // 11 whole windows at block 16
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 7 == 3 ? 0 : 100 + i % 50);
  write_bin(dir / "train.bin", tokens);
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eos_token_id": 0})");
  for (const bool documents : {false, true}) {
    CAPTURE(documents);
    std::vector<std::size_t> trained[2];
    for (const bool contract : {true, false}) {
      Config c = stream_config(dir.path(), 4, 16, SamplingMode::epoch);
      c.epoch_shuffle = false;
      c.epoch_drop_last = false;  // 11 windows: the third batch has one fill row
      c.document_aware = documents;
      c.contract_fields = contract;
      Loader loader(c);
      for (int k = 0; k < 3; ++k) {
        Batch b = loader.get_batch();
        CAPTURE(contract);
        CAPTURE(k);
        const std::size_t rows = k < 2 ? 4 : 3;
        CHECK(b.real_rows() == rows);
        CHECK(b.real_positions() == rows * 16);
        REQUIRE(b.labels().data() == b.y().data());  // y is the labels in both cases
        CHECK(b.cu_seqlens().empty() == !contract);
        CHECK(b.token_weights().empty() == !contract);
        CHECK(b.position_ids().empty() == (!contract && !documents));
        if (!contract) CHECK(b.num_sequences() == 0);
        std::size_t expected = 0;
        for (std::size_t p = 0; p < rows * 16; ++p) expected += !documents || b.x()[p] != 0 ? 1 : 0;
        std::size_t with_label = 0;
        for (const std::int64_t l : b.labels()) with_label += l != c.ignore_index ? 1 : 0;
        CHECK(with_label == expected);
        if (contract) {
          std::size_t weighted = 0;
          for (const float w : b.token_weights()) weighted += w != 0.0f ? 1 : 0;
          CHECK(weighted == expected);
        }
        trained[contract ? 0 : 1].push_back(with_label);
      }
    }
    CHECK(trained[0] == trained[1]);
  }
}

TEST_CASE("token stream: resume at arbitrary points, both modes" * doctest::timeout(120)) {
  TempDir dir;
  write_sharded(dir.path());
  for (const auto mode : {SamplingMode::epoch, SamplingMode::random}) {
    const Config c = stream_config(dir.path(), 2, 4, mode);
    Loader straight(c);
    std::vector<std::int64_t> all;
    for (int i = 0; i < 20; ++i) {
      Batch b = straight.get_batch();
      all.insert(all.end(), b.x().begin(), b.x().end());
    }
    for (const int cut : {0, 3, 9, 19}) {
      std::string state;
      {
        Loader first(c);
        for (int i = 0; i < cut; ++i) first.get_batch();
        state = first.save_state();
      }
      Loader resumed(c);
      resumed.load_state(state);
      std::vector<std::int64_t> rest;
      for (int i = cut; i < 20; ++i) {
        Batch b = resumed.get_batch();
        rest.insert(rest.end(), b.x().begin(), b.x().end());
      }
      CAPTURE(cut);
      CHECK(rest == std::vector<std::int64_t>(all.begin() + cut * 8, all.end()));
    }
    // A different block_size carves different windows: the state is refused.
    Config other = c;
    other.block_size = 3;
    Loader different(other);
    CHECK_THROWS_AS(different.load_state(straight.save_state()), Error);
  }
}

TEST_CASE("token stream: NAME.docs.npy beside a shard is its document offsets, never a shard, and is validated") {
  TempDir dir;
  const auto write_docs = [](const std::filesystem::path& path, const std::vector<std::uint64_t>& offsets,
                             const char* descr = "<u8") {
    NpyWriter w(path, descr, {offsets.size()});
    w.append(std::span<const std::uint64_t>(offsets));
    w.finish();
  };
  const std::filesystem::path docs = dir / "train/shard_00000.docs.npy";
  write_npy(dir / "train/shard_00000.npy", file_tokens(0, 20));
  write_npy(dir / "train/shard_00001.npy", file_tokens(1, 12));
  write_docs(docs, {0, 5, 11});
  {
    const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", std::nullopt);
    REQUIRE(split.files().size() == 2);
    CHECK(split.total_tokens() == 32);
    CHECK(split.files()[0].documents == std::optional<std::uint64_t>(3));
    CHECK_FALSE(split.files()[1].documents.has_value());
  }
  const auto refused = [&](const std::filesystem::path& named) {
    const std::string message =
        error_of([&] { TokenStreamSplit::open(dir.path(), "train", std::nullopt); }, ErrorKind::format);
    CAPTURE(message);
    CHECK(message.find(named.string()) != std::string::npos);
    return message;
  };
  write_docs(docs, {1, 5});
  CHECK(refused(docs).find("not 0") != std::string::npos);
  write_docs(docs, {0, 5, 5});
  CHECK(refused(docs).find("strictly increasing") != std::string::npos);
  write_docs(docs, {0, 20});
  CHECK(refused(docs).find("past the shard's last token") != std::string::npos);
  write_docs(docs, {0, 5}, "<i8");
  CHECK(refused(docs).find("uint64") != std::string::npos);
  write_docs(docs, {0, 5});
  const std::filesystem::path orphan = dir / "train/shard_00002.docs.npy";
  write_docs(orphan, {0});
  CHECK(refused(orphan).find("shard_00002.npy") != std::string::npos);
  // Offsets alone are no token stream.
  TempDir only;
  std::filesystem::create_directories(only / "train");
  write_docs(only / "train/shard_00000.docs.npy", {0});
  CHECK_FALSE(TokenStreamSplit::has_split(only.path(), "train"));
}
