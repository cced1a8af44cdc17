// Megatron-LM indexed datasets (NAME.bin + NAME.idx) read in place as token streams:
// windows against the raw token arrays, document_aware rows against the .idx documents,
// and every kind of damage refused naming the file and the first bad entry.
//
// Pairs written by megatron-core's own IndexedDatasetBuilder are in tests/data/megatron_pairs/
// (tests/data/make_megatron_fixtures.py made them; the first test reads them). The other
// tests' files are written by MegatronWriter below, implemented from the published MMIDIDX format
// (megatron/core/datasets/indexed_dataset.py, _IndexWriter): the magic, version 1, the
// dtype code, the sequence count, the document-index count (len(document_indices), the
// documents + 1), int32 lengths, int64 byte pointers laid out one after another, int64
// document indices from 0 to the sequence count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dataset/episode_dataset.hpp"
#include "dataset/megatron_index.hpp"
#include "document_rows.hpp"
#include "dataset/token_stream.hpp"
#include "inspect/inspect_dataset.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/npy_writer.hpp"
#include "util/sha256.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

namespace fs = std::filesystem;

using Sequence = std::vector<std::uint16_t>;
using Document = std::vector<Sequence>;  // a document is one or more sequences (none: empty)

// One Megatron dataset's contents as a writer lays them out, before they become bytes.
struct MegatronWriter {
  std::uint8_t dtype_code = 8;  // uint16; 4 (int32) writes the tokens as int32
  std::vector<std::uint16_t> tokens;
  std::vector<std::int32_t> lengths;
  std::vector<std::int64_t> document_indices{0};
  std::set<std::uint64_t> document_starts;  // token offsets, for the reference

  explicit MegatronWriter(const std::vector<Document>& documents) {
    for (const Document& doc : documents) {
      document_starts.insert(tokens.size());
      for (const Sequence& seq : doc) {
        tokens.insert(tokens.end(), seq.begin(), seq.end());
        lengths.push_back(static_cast<std::int32_t>(seq.size()));
      }
      document_indices.push_back(static_cast<std::int64_t>(lengths.size()));
    }
    document_starts.erase(tokens.size());  // an empty last document starts at the end
  }

  std::string index_bytes() const {
    std::string out("MMIDIDX\0\0", 9);
    const auto put = [&out](const auto value) { out.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
    put(std::uint64_t{1});
    put(dtype_code);
    put(static_cast<std::uint64_t>(lengths.size()));
    put(static_cast<std::uint64_t>(document_indices.size()));
    for (const std::int32_t length : lengths) put(length);
    std::int64_t pointer = 0;
    for (const std::int32_t length : lengths) {
      put(pointer);
      pointer += static_cast<std::int64_t>(length) * static_cast<std::int64_t>(width());
    }
    for (const std::int64_t index : document_indices) put(index);
    return out;
  }

  std::size_t width() const { return dtype_code == 4 ? 4 : 2; }

  std::string bin_bytes() const {
    if (width() == 2) return {reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2};
    std::string out;
    for (const std::uint16_t t : tokens) {
      const auto wide = static_cast<std::int32_t>(t);
      out.append(reinterpret_cast<const char*>(&wide), 4);
    }
    return out;
  }

  void write(const fs::path& prefix) const {
    const std::string idx = index_bytes(), bin = bin_bytes();
    write_raw(fs::path(prefix).replace_extension(".idx"), idx.data(), idx.size());
    write_raw(fs::path(prefix).replace_extension(".bin"), bin.data(), bin.size());
  }
};

// `count` documents of 0 to 3 sequences of 0 to 20 tokens in [2, 50000), from `seed`.
std::vector<Document> random_documents(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Document> docs(count);
  for (Document& doc : docs) {
    doc.resize(rng() % 4);
    for (Sequence& seq : doc) {
      seq.resize(rng() % 21);
      for (std::uint16_t& t : seq) t = static_cast<std::uint16_t>(2 + rng() % 49998);
    }
  }
  return docs;
}

// Where each row of `b` (block T) starts: its file among `files` and its offset there,
// from the window id (random mode: the global token offset).
std::pair<std::size_t, std::uint64_t> locate(const std::vector<MegatronWriter>& files, std::int64_t window_id) {
  auto offset = static_cast<std::uint64_t>(window_id);
  for (std::size_t f = 0; f < files.size(); ++f) {
    if (offset < files[f].tokens.size()) return {f, offset};
    offset -= files[f].tokens.size();
  }
  FAIL("window id past the split");
  return {};
}

Config megatron_config(const fs::path& dir, std::int64_t batch, std::int64_t block, SamplingMode mode) {
  Config c = make_config(dir, batch, block);
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = mode;
  c.pad_token_id.reset();
  return c;
}

std::string open_error(const fs::path& root) {
  return error_of([&] { TokenStreamSplit::open(root, "train", std::nullopt); }, ErrorKind::format);
}

}  // namespace

TEST_CASE("megatron: pairs written by megatron-core's IndexedDatasetBuilder, uint16 and int32") {
  // The documents make_megatron_fixtures.py describes: document d of 30 has 1 + d % 4
  // sentences (none for 7 and 19), sentence s 1 + (d * 5 + s * 3) % 11 tokens.
  for (const auto& [stem, vocab, dtype] : {std::tuple{"web_text_document", 50000u, TokenDtype::uint16},
                                           std::tuple{"wide_text_document", 150000u, TokenDtype::int32}}) {
    CAPTURE(stem);
    std::vector<std::uint32_t> tokens;
    std::set<std::uint64_t> starts;
    for (std::uint32_t d = 0; d < 30; ++d) {
      if (d == 7 || d == 19) continue;
      starts.insert(tokens.size());
      for (std::uint32_t s = 0; s < 1 + d % 4; ++s) {
        for (std::uint32_t j = 0; j < 1 + (d * 5 + s * 3) % 11; ++j)
          tokens.push_back((d * 977 + s * 31 + j * 7) % vocab + 1);
      }
    }
    TempDir dir;
    fs::create_directories(dir / "train");
    for (const char* ext : {".bin", ".idx"}) {
      fs::copy_file(fs::path(TOKENFEED_TEST_DATA_DIR) / "megatron_pairs" / (std::string(stem) + ext),
                    dir / "train" / (std::string(stem) + ext));
    }
    const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", std::nullopt);
    REQUIRE(split.files().size() == 1);
    const StreamFile& f = split.files()[0];
    CHECK(f.dtype == dtype);
    CHECK(f.documents == 30);
    REQUIRE(f.tokens == tokens.size());
    std::vector<std::int64_t> read(tokens.size());
    split.read(0, 0, tokens.size(), read.data());
    CHECK(std::equal(read.begin(), read.end(), tokens.begin(), tokens.end()));
    for (std::uint64_t t = 0; t < tokens.size(); ++t) {
      const auto next = starts.upper_bound(t);
      CHECK(f.document_starts->next_start_after(t) == (next == starts.end() ? UINT64_MAX : *next));
    }
    Config c = megatron_config(dir.path(), 2, 6, SamplingMode::random);
    c.document_aware = true;
    Loader loader(c);
    for (int k = 0; k < 10; ++k) {
      Batch b = loader.get_batch();
      for (std::size_t i = 0; i < b.x().size(); ++i) CHECK(b.x()[i] > 0);
    }
  }
}

TEST_CASE("megatron: a pair's windows equal the raw token arrays, in both sampling modes") {
  TempDir dir;
  const std::vector<MegatronWriter> files = {MegatronWriter(random_documents(60, 1)),
                                             MegatronWriter(random_documents(45, 2))};
  files[0].write(dir / "train/corpus_a_text_document");
  files[1].write(dir / "train/corpus_b_text_document");
  const std::size_t T = 7;
  Config c = megatron_config(dir.path(), 1, T, SamplingMode::epoch);
  c.epoch_shuffle = false;
  Loader epoch(c);
  CHECK(epoch.split_info("train").tokens == files[0].tokens.size() + files[1].tokens.size());
  CHECK(epoch.config().token_dtype == TokenDtype::uint16);  // from the .idx: the config gave none
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (std::size_t start = 0; start + T + 1 <= files[f].tokens.size(); start += T + 1) {
      Batch b = epoch.get_batch();
      CAPTURE(f);
      CAPTURE(start);
      for (std::size_t i = 0; i < T; ++i) {
        CHECK(b.x()[i] == files[f].tokens[start + i]);
        CHECK(b.y()[i] == files[f].tokens[start + i + 1]);
      }
    }
  }
  CHECK(epoch.get_batch().epoch() == 1);
  Loader random(megatron_config(dir.path(), 8, T, SamplingMode::random));
  for (int k = 0; k < 20; ++k) {
    Batch b = random.get_batch();
    for (std::size_t r = 0; r < 8; ++r) {
      const auto [f, offset] = locate(files, b.window_ids()[r]);
      REQUIRE(offset + T + 1 <= files[f].tokens.size());
      for (std::size_t i = 0; i < T; ++i) {
        CHECK(b.x()[r * T + i] == files[f].tokens[offset + i]);
        CHECK(b.y()[r * T + i] == files[f].tokens[offset + i + 1]);
      }
    }
  }
}

TEST_CASE("megatron: document_aware rows take their boundaries from the .idx documents") {
  TempDir dir;
  std::vector<Document> docs = random_documents(200, 3);
  docs[5].clear();  // an empty document: invisible in the stream
  docs[6].clear();
  for (Document& doc : docs) {
    for (Sequence& seq : doc) {
      if (seq.size() > 2) seq[1] = 7;  // the eos id inside documents: it must not cut them
    }
  }
  const MegatronWriter file(docs);
  file.write(dir / "train/data");
  const std::size_t T = 16;
  Config c = megatron_config(dir.path(), 8, T, SamplingMode::random);
  c.document_aware = true;
  // No eos_token_id: the .idx decides the documents (an eos id, when set, is not used:
  // 7 inside documents would cut them).
  for (const bool with_eos : {false, true}) {
    if (with_eos) c.eos_token_id = 7;
    CAPTURE(with_eos);
    Loader loader(c);
    std::size_t boundaries = 0;
    for (int k = 0; k < 30; ++k)
      boundaries += check_document_rows(loader.get_batch(), 8, T, file.tokens, file.document_starts);
    CHECK(boundaries > 100);  // the rows did cross documents
  }
}

TEST_CASE("megatron: document_aware without an eos id refuses a split whose files do not all have an .idx") {
  TempDir dir;
  const MegatronWriter file(random_documents(40, 9));
  file.write(dir / "train/a_pair");
  {
    NpyWriter w(dir / "train/b_plain.npy", "<u2", {file.tokens.size()});
    w.append(std::span<const std::uint16_t>(file.tokens));
    w.finish();
  }
  Config c = megatron_config(dir.path(), 2, 8, SamplingMode::random);
  c.document_aware = true;
  const std::string error = error_of([&] { Loader{c}; }, ErrorKind::config);
  CHECK(error.find("document_aware=true needs an end-of-text id for '" + (dir / "train/b_plain.npy").string() +
                   "', which has no index of its documents (other files of the split have one") != std::string::npos);
  CHECK(error.find("set eos_token_id") != std::string::npos);
  c.eos_token_id = 1;  // the plain file's documents from the eos id, the pair's from its .idx
  CHECK_NOTHROW(Loader{c}.get_batch());
  // Context parallelism pads documents: with neither a pad id nor an eos id it is refused.
  fs::remove(dir / "train/b_plain.npy");
  c.eos_token_id.reset();
  c.context_parallel_size = 2;
  c.world_size = 2;
  const std::string cp = error_of([&] { Loader{c}; }, ErrorKind::config);
  CHECK(cp.find("no pad id is known: set pad_token_id") != std::string::npos);
  c.pad_token_id = 0;
  CHECK_NOTHROW(Loader{c}.get_batch());
}

TEST_CASE("megatron: with an end-of-text token ending each document, the .idx and the eos id give the same rows") {
  // Megatron's preprocess_data.py --append-eod: the same rows as the same tokens in a
  // plain .npy whose documents are found at the end-of-text id.
  TempDir megatron, npy;
  std::vector<Document> docs = random_documents(120, 4);
  for (Document& doc : docs) {
    for (Sequence& seq : doc) std::replace(seq.begin(), seq.end(), std::uint16_t{1}, std::uint16_t{2});
    doc.push_back({1});  // the end-of-text token, as its own last sequence
  }
  const MegatronWriter file(docs);
  file.write(megatron / "train/data");
  {
    fs::create_directories(npy / "train");
    NpyWriter w(npy / "train/data.npy", "<u2", {file.tokens.size()});
    w.append(std::span<const std::uint16_t>(file.tokens));
    w.finish();
  }
  Config a = megatron_config(megatron.path(), 4, 12, SamplingMode::random);
  a.document_aware = true;
  a.eos_token_id = 1;
  Config b = a;
  b.dataset_dir = npy.path();
  Loader from_index(a), from_eos(b);
  for (int k = 0; k < 20; ++k) {
    Batch x = from_index.get_batch(), y = from_eos.get_batch();
    const auto same = [](auto p, auto q) { return std::equal(p.begin(), p.end(), q.begin(), q.end()); };
    CHECK(same(x.window_ids(), y.window_ids()));
    CHECK(same(x.x(), y.x()));
    CHECK(same(x.y(), y.y()));
    CHECK(same(x.doc_ids(), y.doc_ids()));
    CHECK(same(x.position_ids(), y.position_ids()));
  }
}

TEST_CASE("megatron: document starts on hand-made rows, empty documents and a start at the last label") {
  struct Starts final : DocumentStarts {
    std::vector<std::uint64_t> at;
    std::uint64_t next_start_after(std::uint64_t token) const noexcept override {
      const auto it = std::upper_bound(at.begin(), at.end(), token);
      return it == at.end() ? UINT64_MAX : *it;
    }
    std::uint64_t document_start(std::uint64_t d) const noexcept override { return at[d]; }
    void check_intact() const override {}
  };
  Starts starts;
  starts.at = {0, 12, 14, 14, 18};  // 14 twice: an empty document
  std::vector<std::int64_t> y = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::int32_t> doc(8), pos(8);
  apply_document_starts(starts, 10, y.data(), doc.data(), pos.data(), 8, -100);  // tokens 10..17, labels 11..18
  CHECK(y == std::vector<std::int64_t>{1, -100, 3, -100, 5, 6, 7, -100});
  CHECK(doc == std::vector<std::int32_t>{0, 0, 1, 1, 2, 2, 2, 2});
  CHECK(pos == std::vector<std::int32_t>{0, 1, 0, 1, 0, 1, 2, 3});
}

TEST_CASE("megatron: flat train.bin with train.idx, and inspect reports the pair") {
  TempDir dir;
  const MegatronWriter file(random_documents(80, 5));
  file.write(dir / "train");
  const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", std::nullopt);
  REQUIRE(split.files().size() == 1);
  CHECK(split.flat());
  CHECK(split.files()[0].format == StreamFileFormat::megatron);
  CHECK(split.files()[0].tokens == file.tokens.size());
  CHECK(split.files()[0].documents == 80);
  InspectRequest request;
  request.dataset_dir = dir.path().string();
  request.block_size = 8;
  const DatasetReport report = inspect_dataset(request);
  REQUIRE(report.splits.size() == 1);
  const SplitReport& train = report.splits[0];
  CHECK(train.verdict == "ok");
  REQUIRE(train.stream);
  REQUIRE(train.stream->files.size() == 1);
  CHECK(train.stream->files[0].dtype_source == DtypeSource::megatron_index);
  CHECK(train.stream->files[0].documents == 80);
  CHECK(train.stream->files[0].docs_file == "train.idx");
  CHECK(train.stream->tokens == file.tokens.size());
}

TEST_CASE("megatron: pairs placed directly in dataset_dir form train in name order, val_prefix's pairs val") {
  TempDir dir;
  const MegatronWriter a(random_documents(30, 11)), c(random_documents(25, 12)), held(random_documents(20, 13));
  c.write(dir / "c_web_text_document");  // written first: the order is the names'
  a.write(dir / "a_books_text_document");
  held.write(dir / "heldout_web_text_document");
  const std::size_t T = 5;
  Config config = megatron_config(dir.path(), 1, T, SamplingMode::epoch);
  config.epoch_shuffle = false;
  {
    Loader all(config);  // no val_prefix: every pair is train, and there is no val
    CHECK(all.split_info("train").tokens == a.tokens.size() + c.tokens.size() + held.tokens.size());
    CHECK_THROWS_AS(all.get_batch("val"), Error);
  }
  config.val_prefix = "heldout_";
  Loader loader(config);
  CHECK(loader.split_info("train").tokens == a.tokens.size() + c.tokens.size());
  CHECK(loader.split_info("val").tokens == held.tokens.size());
  std::vector<std::uint16_t> train_tokens;  // a's windows, then c's
  for (const MegatronWriter* w : {&a, &c}) {
    for (std::size_t start = 0; start + T + 1 <= w->tokens.size(); start += T + 1) {
      train_tokens.insert(train_tokens.end(), w->tokens.begin() + static_cast<std::ptrdiff_t>(start),
                          w->tokens.begin() + static_cast<std::ptrdiff_t>(start + T));
    }
  }
  for (std::size_t k = 0; k < train_tokens.size() / T; ++k) {
    Batch b = loader.get_batch();
    for (std::size_t i = 0; i < T; ++i) CHECK(b.x()[i] == train_tokens[k * T + i]);
  }
  Batch v = loader.get_batch("val");
  for (std::size_t i = 0; i < T; ++i) CHECK(v.x()[i] == held.tokens[i]);
  // A .bin without its .idx among the pairs is refused, naming it.
  const std::string bin = held.bin_bytes();
  write_raw(dir / "stray.bin", bin.data(), bin.size());
  CHECK(open_error(dir.path()).find("stray.bin' has no NAME.idx beside it") != std::string::npos);
}

TEST_CASE("megatron: an index without its .bin, or beside a .docs.npy, is refused naming it") {
  TempDir dir;
  const MegatronWriter file(random_documents(10, 6));
  file.write(dir / "train/a");
  const std::string idx = file.index_bytes();
  write_raw(dir / "train/orphan.idx", idx.data(), idx.size());
  CHECK(open_error(dir.path()).find("orphan.idx' is an index without its data file 'orphan.bin'") != std::string::npos);
  fs::remove(dir / "train/orphan.idx");
  CHECK(TokenStreamSplit::open(dir.path(), "train", std::nullopt).files().size() == 1);
  {
    NpyWriter w(dir / "train/a.docs.npy", "<u8", {1});
    w.append(std::span<const std::uint64_t>(std::vector<std::uint64_t>{0}));
    w.finish();
  }
  CHECK(open_error(dir.path()).find("whose index gives them already") != std::string::npos);
}

TEST_CASE("megatron: int32 tokens (dtype code 4) are read, and a negative id is refused naming the file and token") {
  TempDir dir;
  MegatronWriter file(random_documents(50, 8));
  file.dtype_code = 4;
  file.write(dir / "train/wide");
  const TokenStreamSplit split = TokenStreamSplit::open(dir.path(), "train", std::nullopt);
  REQUIRE(split.files().size() == 1);
  CHECK(split.files()[0].dtype == TokenDtype::int32);
  CHECK(split.files()[0].tokens == file.tokens.size());
  const std::size_t T = 6;
  Config c = megatron_config(dir.path(), 1, T, SamplingMode::epoch);
  c.epoch_shuffle = false;
  {
    Loader loader(c);
    CHECK(loader.config().token_dtype == TokenDtype::int32);
    for (std::size_t start = 0; start + T + 1 <= file.tokens.size(); start += T + 1) {
      Batch b = loader.get_batch();
      CAPTURE(start);
      for (std::size_t i = 0; i < T; ++i) {
        CHECK(b.x()[i] == file.tokens[start + i]);
        CHECK(b.y()[i] == file.tokens[start + i + 1]);
      }
    }
  }
  // Token 9 negative: the second window (tokens 7..13) holds it; token 6, the first
  // window's last label, negative: the first window is refused too.
  for (const std::size_t bad : {std::size_t{9}, std::size_t{6}}) {
    CAPTURE(bad);
    std::string bin = file.bin_bytes();
    const std::int32_t negative = -5;
    std::memcpy(bin.data() + 4 * bad, &negative, 4);
    write_raw(dir / "train/wide.bin", bin.data(), bin.size());
    Loader loader(c);
    if (bad == 9) CHECK_NOTHROW(loader.get_batch());
    const std::string error = error_of([&] { loader.get_batch(); }, ErrorKind::format);
    CHECK(error.find("wide.bin': token " + std::to_string(bad) + " is -5, a negative id in an int32 file") !=
          std::string::npos);
  }
}

TEST_CASE("megatron: dtypes other than uint16 and int32 are refused naming the file and the code") {
  TempDir dir;
  MegatronWriter file(random_documents(10, 7));
  const std::vector<std::string> names = {"", "uint8", "int8", "int16", "int32", "int64", "float64", "float32"};
  for (std::uint8_t code = 1; code <= 7; ++code) {
    if (code == 4) continue;
    file.dtype_code = code;
    file.write(dir / "train/a");
    CAPTURE(names[code]);
    const std::string error = open_error(dir.path());
    CHECK(error.find("a.idx': dtype code " + std::to_string(code) + " (" + names[code] + ") is not a token dtype") !=
          std::string::npos);
  }
  for (const std::uint8_t code : {0, 9, 255}) {
    file.dtype_code = code;
    file.write(dir / "train/a");
    CHECK(open_error(dir.path()).find("a.idx': unknown dtype code " + std::to_string(code)) != std::string::npos);
  }
}

TEST_CASE("megatron: each kind of damage is refused naming the file and the first bad entry") {
  TempDir dir;
  // 12 documents of 2 sequences, of 5 and 4 tokens: 24 sequences, 108 tokens, 216 bytes.
  const MegatronWriter file(std::vector<Document>(12, Document{Sequence(5, 3), Sequence(4, 3)}));
  const std::uint64_t S = file.lengths.size(), D = file.document_indices.size();  // 24 and 13
  const auto lengths_at = [](std::uint64_t s) { return 34 + 4 * s; };
  const auto pointers_at = [S](std::uint64_t s) { return 34 + 4 * S + 8 * s; };
  const auto documents_at = [S](std::uint64_t d) { return 34 + 12 * S + 8 * d; };
  const auto patch = [](std::string& bytes, std::size_t at, auto value) {
    std::memcpy(bytes.data() + at, &value, sizeof(value));
  };
  struct Damage {
    const char* what;
    std::function<void(std::string& idx, std::string& bin)> make;
    std::string expected;  // in the message, with the file's name
  };
  const std::vector<Damage> damages = {
      {"bad magic", [&](std::string& i, std::string&) { i[3] = 'X'; }, "a.idx': not a Megatron index (bad magic"},
      {"short header", [&](std::string& i, std::string&) { i.resize(20); }, "a.idx': not a Megatron index: 20 bytes"},
      {"version", [&](std::string& i, std::string&) { patch(i, 9, std::uint64_t{2}); },
       "a.idx': Megatron index version 2"},
      {"truncated index", [&](std::string& i, std::string&) { i.pop_back(); }, "a.idx': size"},
      {"multimodal modes", [&](std::string& i, std::string&) { i.append(S, '\0'); }, "a multimodal index"},
      {"huge sequence count", [&](std::string& i, std::string&) { patch(i, 18, UINT64_MAX / 4); }, "a.idx': size"},
      {"huge document count", [&](std::string& i, std::string&) { patch(i, 26, UINT64_MAX / 2); }, "a.idx': size"},
      {"odd .bin", [&](std::string&, std::string& b) { b.push_back('\0'); },
       "a.bin': size 217 bytes is not a multiple of 2"},
      {"trailing tokens", [&](std::string&, std::string& b) { b.append(2, '\0'); },
       "a.idx': its 24 sequences end at byte 216, but 'a.bin' holds 218"},
      {"negative length", [&](std::string& i, std::string&) { patch(i, lengths_at(3), std::int32_t{-1}); },
       "a.idx': sequence 3 has a negative length -1"},
      {"length past .bin", [&](std::string& i, std::string&) { patch(i, lengths_at(23), std::int32_t{1 << 30}); },
       "a.idx': sequence 23 (1073741824 tokens at byte 208) runs past the end of 'a.bin'"},
      {"pointer off", [&](std::string& i, std::string&) { patch(i, pointers_at(5), std::int64_t{0}); },
       "a.idx': sequence 5 points at byte 0 of 'a.bin', but the sequences before it end at byte 46"},
      {"negative pointer", [&](std::string& i, std::string&) { patch(i, pointers_at(0), std::int64_t{-8}); },
       "a.idx': sequence 0 points at byte -8"},
      {"first document", [&](std::string& i, std::string&) { patch(i, documents_at(0), std::int64_t{1}); },
       "a.idx': document index 0 is 1, not 0"},
      {"decreasing documents", [&](std::string& i, std::string&) { patch(i, documents_at(4), std::int64_t{5}); },
       "a.idx': document index 4 is 5, below the previous one (6)"},
      {"document past the sequences",
       [&](std::string& i, std::string&) { patch(i, documents_at(D - 1), std::int64_t{25}); },
       "a.idx': document index 12 is 25, past the sequence count 24"},
      {"last document short", [&](std::string& i, std::string&) { patch(i, documents_at(D - 1), std::int64_t{23}); },
       "a.idx': the last document index (12) is 23, not the sequence count 24"},
      {"no document index",
       [&](std::string& i, std::string&) {
         patch(i, 26, std::uint64_t{0});
         i.resize(i.size() - 8 * D);
       },
       "a.idx': no document index"},
  };
  for (const Damage& damage : damages) {
    CAPTURE(damage.what);
    std::string idx = file.index_bytes(), bin = file.bin_bytes();
    damage.make(idx, bin);
    write_raw(dir / "train/a.idx", idx.data(), idx.size());
    write_raw(dir / "train/a.bin", bin.data(), bin.size());
    const std::string error = open_error(dir.path());
    CHECK(error.find(damage.expected) != std::string::npos);
    CHECK(error.find((dir / "train/a.").string()) != std::string::npos);  // the full path
  }
  file.write(dir / "train/a");  // undamaged, it opens
  CHECK(TokenStreamSplit::open(dir.path(), "train", std::nullopt).total_tokens() == 12 * 9);
}

namespace {

// Each document of `documents` as its tokens (its sequences one after another).
std::vector<std::vector<std::uint32_t>> document_tokens(const std::vector<Document>& documents) {
  std::vector<std::vector<std::uint32_t>> out;
  for (const Document& doc : documents) {
    out.emplace_back();
    for (const Sequence& seq : doc) out.back().insert(out.back().end(), seq.begin(), seq.end());
  }
  return out;
}

// `documents` written as an episode-indexed split of `dir`: one episode a document (empty
// ones too, so that the ids match), no mask.
void write_as_episodes(const fs::path& dir, const std::string& split,
                       const std::vector<std::vector<std::uint32_t>>& documents, TokenDtype dtype) {
  std::vector<TestEpisode> episodes;
  for (const auto& doc : documents) episodes.push_back({doc, {}});
  write_split(dir, split, episodes, dtype, false, 2);
}

// The batches of `c` (documents as episodes) against those of the same config over the
// prepared `reference` (without val_fraction: its splits are written), in both SFT modes,
// truncation right and split, past the first epoch of train and in val.
void check_as_prepared(Config c, const fs::path& reference) {
  for (const DatasetMode mode : {DatasetMode::sft_packed, DatasetMode::sft_episode}) {
    for (const Truncation truncation : {Truncation::right, Truncation::split}) {
      CAPTURE(to_string(mode));
      CAPTURE(to_string(truncation));
      c.dataset_mode = mode;
      c.truncation = truncation;
      Config r = c;
      r.dataset_dir = reference;
      r.val_fraction = 0.0;
      r.val_seed = 0;
      Loader foreign(c), prepared(r);
      CHECK(foreign.split_info("val").episodes == prepared.split_info("val").episodes);
      CHECK(foreign.split_info("val").tokens == prepared.split_info("val").tokens);
      check_same_batches(foreign, prepared, 40);
      check_same_batches(foreign, prepared, 5, "val");
    }
  }
}

}  // namespace

TEST_CASE("megatron: sft_packed and sft_episode read each document of the pairs as an episode, every token trained") {
  TempDir dir, reference;
  const std::vector<Document> a = random_documents(150, 11), b = random_documents(90, 12), v = random_documents(60, 13);
  MegatronWriter(a).write(dir / "train/a_text_document");
  MegatronWriter(b).write(dir / "train/b_text_document");
  MegatronWriter(v).write(dir / "val");
  std::vector<Document> train_docs = a;
  train_docs.insert(train_docs.end(), b.begin(), b.end());
  const auto train = document_tokens(train_docs);
  write_as_episodes(reference.path(), "train", train, TokenDtype::uint16);
  write_as_episodes(reference.path(), "val", document_tokens(v), TokenDtype::uint16);
  const std::size_t T = 16;
  Config c = make_config(dir.path(), 3, T);
  c.dataset_mode = DatasetMode::sft_packed;
  c.truncation = Truncation::right;
  {
    // The rows against the documents the test wrote: each document's first T + 1 tokens.
    Loader loader(c);
    CHECK(loader.split_info("train").episodes == train.size());
    CHECK(loader.split_info("val").episodes == v.size());
    std::size_t segments = 0;
    for (int k = 0; k < 12; ++k) segments += check_document_segments(loader.get_batch(), T, train);
    CHECK(segments > 36);
  }
  check_as_prepared(c, reference.path());
}

TEST_CASE("megatron: sft_packed over int32 documents, a negative id refused naming the file, a plain shard refused") {
  TempDir dir;
  MegatronWriter file(random_documents(40, 21));
  file.dtype_code = 4;
  file.write(dir / "train/wide");
  Config c = make_config(dir.path(), 2, 8);
  c.dataset_mode = DatasetMode::sft_episode;
  c.epoch_drop_last = false;
  {
    Loader loader(c);
    CHECK(loader.config().token_dtype == TokenDtype::int32);
    CHECK_NOTHROW(loader.get_batch());
  }
  std::string bin = file.bin_bytes();
  const std::int32_t negative = -7;
  const std::size_t bad = *std::next(file.document_starts.begin(), 3) + 1;  // document 3's second token, in its row
  std::memcpy(bin.data() + 4 * bad, &negative, 4);
  write_raw(dir / "train/wide.bin", bin.data(), bin.size());
  const std::string error = error_of(
      [&] {
        Loader loader(c);
        for (int k = 0; k < 40; ++k) loader.get_batch();
      },
      ErrorKind::format);
  CHECK(error.find("wide.bin': token " + std::to_string(bad) + " (episode ") != std::string::npos);
  CHECK(error.find("is -7, a negative id in an int32 file") != std::string::npos);
  // A plain .bin beside the pair has no document index: refused naming it.
  const std::vector<std::uint16_t> plain(64, 3);
  write_raw(dir / "train/zz_plain.bin", plain.data(), plain.size() * 2);
  c.token_dtype = TokenDtype::uint16;
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("zz_plain.bin' does not index its documents") !=
        std::string::npos);
}

namespace {

// The val rule of docs/formats.md ("Val by document hash"), written out here from SHA-256:
// u from the domain, the seed and the tokens as 4 bytes little-endian each.
double token_split_point(const std::vector<std::uint32_t>& tokens, std::uint64_t seed) {
  Sha256 sha;
  sha.update(std::string_view("tokenfeed-token-split-v1\0", 25));
  for (int i = 0; i < 8; ++i) {
    const auto b = static_cast<std::uint8_t>(seed >> (8 * i));
    sha.update(&b, 1);
  }
  for (const std::uint32_t t : tokens) {
    const std::uint8_t bytes[4] = {static_cast<std::uint8_t>(t), static_cast<std::uint8_t>(t >> 8),
                                   static_cast<std::uint8_t>(t >> 16), static_cast<std::uint8_t>(t >> 24)};
    sha.update(bytes, 4);
  }
  const Sha256::Digest d = sha.finish();
  std::uint64_t top = 0;
  for (int i = 0; i < 8; ++i) top = (top << 8) | d[static_cast<std::size_t>(i)];
  return static_cast<double>(top >> 11) * 0x1.0p-53;
}

// One split's tokens by the rule, and where its documents start.
struct ChosenStream {
  std::vector<std::uint32_t> tokens;
  std::set<std::uint64_t> starts;
  std::size_t documents = 0;
};

ChosenStream chosen_stream(const std::vector<std::vector<std::uint32_t>>& documents, double fraction,
                           std::uint64_t seed, bool val) {
  ChosenStream s;
  for (const auto& doc : documents) {
    if (doc.empty() || (token_split_point(doc, seed) < fraction) != val) continue;
    s.starts.insert(s.tokens.size());
    s.tokens.insert(s.tokens.end(), doc.begin(), doc.end());
    ++s.documents;
  }
  return s;
}

}  // namespace

TEST_CASE("megatron: val_fraction makes val the documents chosen by hash, train the others, windows over each") {
  TempDir dir;
  const std::vector<Document> a = random_documents(300, 31), b = random_documents(200, 32);
  MegatronWriter(a).write(dir / "train/a_text_document");
  MegatronWriter wide(b);
  wide.dtype_code = 4;  // int32: hashed as the same 4 bytes a token as uint16 files
  wide.write(dir / "train/b_text_document");
  std::vector<Document> all = a;
  all.insert(all.end(), b.begin(), b.end());
  const auto documents = document_tokens(all);
  const double fraction = 0.2;
  const std::uint64_t seed = 7;
  const std::size_t T = 9;
  for (const bool val : {false, true}) {
    CAPTURE(val);
    const ChosenStream expected = chosen_stream(documents, fraction, seed, val);
    REQUIRE(expected.documents > 20);  // both splits hold many documents, and several runs
    const char* split = val ? "val" : "train";
    // Epoch order without shuffling: window i is tokens [i (T+1), (i+1)(T+1)) of the
    // concatenation of the split's documents, across runs and files.
    Config c = megatron_config(dir.path(), 1, T, SamplingMode::epoch);
    c.epoch_shuffle = false;
    c.val_fraction = fraction;
    c.val_seed = static_cast<std::int64_t>(seed);
    {
      Loader loader(c);
      CHECK(loader.split_info(split).tokens == expected.tokens.size());
      for (std::size_t w = 0; w < expected.tokens.size() / (T + 1); ++w) {
        const Batch batch = loader.get_batch(split);
        CAPTURE(w);
        for (std::size_t i = 0; i < T; ++i) {
          CHECK(batch.x()[i] == expected.tokens[w * (T + 1) + i]);
          CHECK(batch.y()[i] == expected.tokens[w * (T + 1) + i + 1]);
        }
      }
    }
    // Random windows, document-aware: the documents start where the split's do.
    c = megatron_config(dir.path(), 4, T, SamplingMode::random);
    c.document_aware = true;
    c.val_fraction = fraction;
    c.val_seed = static_cast<std::int64_t>(seed);
    Loader loader(c);
    std::size_t boundaries = 0;
    for (int k = 0; k < 30; ++k) {
      boundaries += check_document_rows(loader.get_batch(split), 4, T, expected.tokens, expected.starts);
    }
    CHECK(boundaries > 10);
  }
  // Another seed chooses other documents; the fingerprint follows.
  Config c = megatron_config(dir.path(), 1, T, SamplingMode::epoch);
  c.val_fraction = fraction;
  const std::string fingerprint = Loader(c).fingerprint();
  c.val_seed = 8;
  CHECK(Loader(c).fingerprint() != fingerprint);
}

TEST_CASE("megatron: val_fraction refuses a value outside 0 to 1, val_prefix beside it, an empty train, plain files") {
  TempDir dir;
  MegatronWriter(random_documents(30, 41)).write(dir / "train/a");
  Config c = megatron_config(dir.path(), 1, 4, SamplingMode::random);
  for (const double bad : {1.0, -0.1, 2.0}) {
    c.val_fraction = bad;
    CHECK(error_of([&] { validate_config(c); }).find("config key 'val_fraction' must be in [0, 1)") !=
          std::string::npos);
  }
  c.val_fraction = 0.1;
  c.val_prefix = "heldout_";
  CHECK(error_of([&] { validate_config(c); }).find("'val_prefix' and 'val_fraction' are both set") !=
        std::string::npos);
  c.val_prefix.clear();
  c.val_seed = -1;
  CHECK(error_of([&] { validate_config(c); }).find("config key 'val_seed' must be >= 0") != std::string::npos);
  c.val_seed = 0;
  c.val_fraction = 0.999999999;  // every document goes to val
  CHECK(error_of([&] { Loader loader(c); }).find("config key 'val_fraction' (") != std::string::npos);
  c.val_fraction = 0.1;
  fs::create_directories(dir / "val");
  MegatronWriter(random_documents(5, 42)).write(dir / "val/v");
  CHECK(error_of([&] { Loader loader(c); }).find("has a val split of its own") != std::string::npos);
  fs::remove_all(dir / "val");
  const std::vector<std::uint16_t> plain(64, 3);
  write_raw(dir / "train/zz_plain.bin", plain.data(), plain.size() * 2);
  c.token_dtype = TokenDtype::uint16;
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("zz_plain.bin' does not index its documents") !=
        std::string::npos);
  // The SFT modes read val_fraction too (the tests below), and refuse a plain file alike.
  c.dataset_mode = DatasetMode::sft_packed;
  c.pad_token_id = 0;
  c.batch_sampling_mode = SamplingMode::epoch;
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("zz_plain.bin' does not index its documents") !=
        std::string::npos);
}

namespace {

// A document of a split by document hash: its file and its index there.
using DocumentAt = std::pair<std::size_t, std::uint64_t>;

// The documents of split `val` by the rule of docs/formats.md ("Val by document hash"),
// as episodes: each file's chosen documents in order, and an empty document where it
// follows one of the split's in its file (it joins that run), else in neither split.
std::vector<DocumentAt> chosen_episodes(const std::vector<std::vector<std::vector<std::uint32_t>>>& files,
                                        double fraction, std::uint64_t seed, bool val) {
  std::vector<DocumentAt> out;
  for (std::size_t f = 0; f < files.size(); ++f) {
    bool open_run = false;
    for (std::uint64_t d = 0; d < files[f].size(); ++d) {
      if (files[f][d].empty()) {
        if (open_run) out.emplace_back(f, d);
        continue;
      }
      open_run = (token_split_point(files[f][d], seed) < fraction) == val;
      if (open_run) out.emplace_back(f, d);
    }
  }
  return out;
}

// Split `split`'s episodes as (file, document): the shard and the document its runs map the
// episode to, its tokens checked against the document's.
std::vector<DocumentAt> episodes_of(const EpisodeSplit& split,
                                    const std::vector<std::vector<std::vector<std::uint32_t>>>& files) {
  std::vector<DocumentAt> out;
  for (std::uint64_t e = 0; e < split.num_episodes(); ++e) {
    const std::size_t s = split.shard_of(e);
    const EpisodeShard& shard = split.shards()[s];
    out.emplace_back(s, shard.document_of(e - shard.first_episode));
    const std::vector<std::uint32_t>& doc = files[s][out.back().second];
    std::vector<std::int64_t> tokens(split.spans()[e].length);
    split.read_tokens(e, 0, tokens.size(), tokens.data());
    CHECK(std::vector<std::uint32_t>(tokens.begin(), tokens.end()) == doc);
  }
  return out;
}

// The token stream's split under `by_hash` as (file, document): its runs' documents.
std::vector<DocumentAt> stream_documents(const fs::path& dir, const std::string& split, DocumentHashSplit by_hash) {
  std::vector<DocumentAt> out;
  const TokenStreamSplit stream = TokenStreamSplit::open(dir, split, std::nullopt, {}, by_hash);
  for (const DocumentRange& r : stream.ranges()) {
    for (std::uint64_t d = 0; d < r.documents; ++d) out.emplace_back(r.file, r.first_document + d);
  }
  return out;
}

// Two uint16 pairs of `count_a` and `count_b` random documents (from `seed` and seed + 1)
// in DIR/train, a_text_document and b_text_document: each file's documents' tokens.
std::vector<std::vector<std::vector<std::uint32_t>>> write_pairs(const fs::path& dir, std::size_t count_a,
                                                                 std::size_t count_b, std::uint32_t seed) {
  const std::vector<Document> a = random_documents(count_a, seed), b = random_documents(count_b, seed + 1);
  MegatronWriter(a).write(dir / "train/a_text_document");
  MegatronWriter(b).write(dir / "train/b_text_document");
  return {document_tokens(a), document_tokens(b)};
}

}  // namespace

TEST_CASE("megatron: val_fraction in the SFT modes holds the token stream's val documents, train the rest") {
  TempDir dir;
  const std::vector<std::vector<std::vector<std::uint32_t>>> files = write_pairs(dir.path(), 300, 200, 51);
  const DocumentHashSplit by_hash{0.25, 9};
  std::set<DocumentAt> seen;
  std::uint64_t tokens = 0;
  for (const bool val : {false, true}) {
    CAPTURE(val);
    const std::string name = val ? "val" : "train";
    const EpisodeSplit split = EpisodeSplit::open_documents(dir.path(), name, {}, {}, by_hash);
    const std::vector<DocumentAt> episodes = episodes_of(split, files);
    // The same documents as the token stream's split, and as the rule written out here.
    CHECK(episodes == stream_documents(dir.path(), name, by_hash));
    CHECK(episodes == chosen_episodes(files, by_hash.fraction, by_hash.seed, val));
    CHECK(std::is_sorted(episodes.begin(), episodes.end()));  // in file and index order
    REQUIRE(episodes.size() > 40);
    for (const DocumentAt& at : episodes) CHECK(seen.insert(at).second);  // disjoint
    tokens += split.total_tokens();
  }
  // Together every document with tokens (an empty one may be in neither: it is invisible).
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (std::uint64_t d = 0; d < files[f].size(); ++d) {
      if (!files[f][d].empty()) CHECK(seen.count({f, d}) == 1);
    }
  }
  CHECK(tokens == TokenStreamSplit::open(dir.path(), "train", std::nullopt).total_tokens());
}

TEST_CASE("megatron: val_fraction in sft_packed and sft_episode gives the batches of the chosen documents prepared") {
  TempDir dir, reference;
  const std::vector<std::vector<std::vector<std::uint32_t>>> files = write_pairs(dir.path(), 200, 150, 61);
  const double fraction = 0.3;
  const std::uint64_t seed = 4;
  for (const bool val : {false, true}) {
    std::vector<std::vector<std::uint32_t>> documents;
    for (const auto& [f, d] : chosen_episodes(files, fraction, seed, val)) documents.push_back(files[f][d]);
    write_as_episodes(reference.path(), val ? "val" : "train", documents, TokenDtype::uint16);
  }
  Config c = make_config(dir.path(), 3, 16);
  c.val_fraction = fraction;
  c.val_seed = static_cast<std::int64_t>(seed);
  check_as_prepared(c, reference.path());
  // Resume: a state saved mid-epoch continues with the same batches; one of another seed
  // or fraction (other documents) is refused.
  c.dataset_mode = DatasetMode::sft_packed;
  c.truncation = Truncation::right;
  Loader first(c);
  for (int k = 0; k < 7; ++k) first.get_batch();
  const std::string state = first.save_state();
  Loader resumed(c);
  resumed.load_state(state);
  check_same_batches(first, resumed, 10);
  Config other = c;
  other.val_seed = 5;
  CHECK(Loader(other).fingerprint() != first.fingerprint());
  CHECK(error_of([&] { Loader(other).load_state(state); }, ErrorKind::state).find("fingerprint") != std::string::npos);
  other = c;
  other.val_fraction = 0.31;
  CHECK(Loader(other).fingerprint() != first.fingerprint());
}

TEST_CASE("megatron: val_fraction in the SFT modes refuses episode datasets, a val split, an empty train or val") {
  TempDir dir, episodes;
  MegatronWriter(random_documents(30, 71)).write(dir / "train/a");
  Config c = make_config(dir.path(), 1, 8);
  c.dataset_mode = DatasetMode::sft_packed;
  c.val_fraction = 0.999999999;  // every document goes to val
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::config).find("config key 'val_fraction' (") !=
        std::string::npos);
  c.val_fraction = 1e-12;  // none does
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::config).find("config key 'val_fraction' (") !=
        std::string::npos);
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::config).find("leaves val no document") != std::string::npos);
  c.val_fraction = 0.3;
  MegatronWriter(random_documents(5, 72)).write(dir / "val/v");
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::config).find("has a val split of its own") != std::string::npos);
  fs::remove_all(dir / "val");
  CHECK_NOTHROW(Loader{c});
  // tokenfeed's own episode dataset: its val is its val split.
  write_split(episodes.path(), "train", numbered_episodes(20, {5, 9}), TokenDtype::uint16, false, 1);
  c.dataset_dir = episodes.path();
  for (const DatasetMode mode : {DatasetMode::sft_packed, DatasetMode::sft_episode}) {
    c.dataset_mode = mode;
    const std::string error = error_of([&] { Loader loader(c); }, ErrorKind::config);
    CHECK(error.find("config key 'val_fraction'") != std::string::npos);
    CHECK(error.find("is an episode-indexed dataset") != std::string::npos);
  }
}

TEST_CASE("megatron: inspect reports val_fraction's split, and --packed packs the documents as a prepared split") {
  TempDir dir, reference;
  const std::vector<std::vector<std::vector<std::uint32_t>>> files = write_pairs(dir.path(), 200, 120, 81);
  InspectRequest request;
  request.dataset_dir = dir.path().string();
  request.block_size = 8;
  request.val_fraction = 0.3;
  request.val_seed = 2;
  std::uint64_t documents[2] = {0, 0};
  for (const bool val : {false, true}) {
    std::vector<std::vector<std::uint32_t>> chosen;
    for (const auto& [f, d] : chosen_episodes(files, 0.3, 2, val)) chosen.push_back(files[f][d]);
    write_as_episodes(reference.path(), val ? "val" : "train", chosen, TokenDtype::uint16);
    for (const auto& doc : chosen) documents[val] += doc.empty() ? 0 : 1;
  }
  {
    const DatasetReport report = inspect_dataset(request);
    REQUIRE(report.splits.size() == 2);
    std::uint64_t tokens = 0;
    for (const SplitReport& split : report.splits) {
      CAPTURE(split.name);
      CHECK(split.verdict == "ok");
      REQUIRE(split.stream);
      REQUIRE(split.stream->by_hash);
      const StreamFigures::ByHash& by_hash = *split.stream->by_hash;
      CHECK(by_hash.seed == 2);
      CHECK(by_hash.runs > 10);
      // Its documents with tokens (a run's empty ones are counted with it).
      std::uint64_t nonempty = 0;
      for (const auto& [f, d] : stream_documents(dir.path(), split.name, {0.3, 2})) nonempty += !files[f][d].empty();
      CHECK(nonempty == documents[split.name == "val"]);
      tokens += split.stream->tokens;
    }
    CHECK(tokens == TokenStreamSplit::open(dir.path(), "train", std::nullopt).total_tokens());
    // The snippet carries the keys.
    const auto has = [&report](const std::string& key, const std::string& value) {
      return std::any_of(report.suggested_config.begin(), report.suggested_config.end(),
                         [&](const SuggestedKey& k) { return k.key == key && k.value == value; });
    };
    CHECK(has("val_fraction", "0.3"));
    CHECK(has("val_seed", "2"));
  }
  // --packed: the documents as episodes, packed as the same documents prepared would be.
  request.packed = true;
  request.truncation = Truncation::split;
  InspectRequest prepared = request;
  prepared.dataset_dir = reference.path().string();
  prepared.val_fraction = 0.0;
  prepared.val_seed = 0;
  const DatasetReport foreign = inspect_dataset(request), expected = inspect_dataset(prepared);
  CHECK(foreign.layout == DatasetLayout::episodes);
  REQUIRE(foreign.splits.size() == 2);
  REQUIRE(expected.splits.size() == 2);
  for (std::size_t s = 0; s < 2; ++s) {
    CAPTURE(foreign.splits[s].name);
    CHECK(foreign.splits[s].verdict == "ok");
    REQUIRE(foreign.splits[s].episodes);
    const EpisodeFigures& f = *foreign.splits[s].episodes;
    const EpisodeFigures& e = *expected.splits[s].episodes;
    CHECK(f.documents);
    CHECK(f.dtype_source == DtypeSource::megatron_index);
    CHECK(f.episodes == e.episodes);
    CHECK(f.kept == e.kept);
    CHECK(f.tokens == e.tokens);
    REQUIRE(f.block);
    REQUIRE(f.block->packing);
    REQUIRE(e.block->packing);
    const PackingFigures& p = *f.block->packing;
    const PackingFigures& q = *e.block->packing;
    CHECK(p.packed_rows == q.packed_rows);
    CHECK(p.packed_positions == q.packed_positions);
    CHECK(p.episode_positions == q.episode_positions);
    REQUIRE(p.split);
    CHECK(p.split->cut == q.split->cut);
    CHECK(p.split->pieces == q.split->pieces);
  }
  // Over tokenfeed's own episodes, val_fraction is refused as the loader refuses it.
  prepared.val_fraction = 0.3;
  const DatasetReport refused = inspect_dataset(prepared);
  REQUIRE(refused.failure);
  CHECK(refused.failure->message.find("config key 'val_fraction'") != std::string::npos);
}

TEST_CASE(
    "megatron: a sequence-length curriculum over epoch windows cuts the units in order, documents from the .idx") {
  // The file's documents (its .idx starts), or train's documents chosen by hash as one
  // stream (val_fraction): its units (windows of the longest stage, 24 + 1 tokens) are cut
  // at 8 + 1 (9, 9, 7: a partial row) for 3 steps, then whole.
  for (const double fraction : {0.0, 0.2}) {
    CAPTURE(fraction);
    TempDir dir;
    MegatronWriter(random_documents(300, 41)).write(dir / "train/a_text_document");
    const ChosenStream expected = chosen_stream(document_tokens(random_documents(300, 41)), fraction, 7, false);
    constexpr std::size_t kUnit = 25;
    Config c = megatron_config(dir.path(), 2, 16, SamplingMode::epoch);
    c.epoch_shuffle = false;  // unit w is tokens [w * 25, (w + 1) * 25) of the stream
    c.val_fraction = fraction;
    c.val_seed = 7;
    c.document_aware = true;
    c.shape_schedule = {ShapeStage{3, std::nullopt, std::nullopt, 8},
                        ShapeStage{std::nullopt, std::nullopt, std::nullopt, 24}};
    Loader loader(c);
    const std::uint64_t units = expected.tokens.size() / kUnit;
    REQUIRE(units > 20);
    std::vector<std::uint32_t> delivered;
    std::size_t partial = 0, boundaries = 0;
    for (std::uint64_t step = 0; step < 3 + (units - 2) / 2; ++step) {
      const Batch b = loader.get_batch();
      REQUIRE(b.epoch() == 0);
      const std::size_t T = b.cols();
      REQUIRE(T == (step < 3 ? 8u : 24u));
      for (std::size_t r = 0; r < b.rows(); ++r) {
        CAPTURE(step);
        CAPTURE(r);
        const auto offset = static_cast<std::uint64_t>(b.window_ids()[r]);  // unit x 25 + offset: the stream's
        const std::size_t real = std::min<std::size_t>(T + 1, kUnit - offset % kUnit) - 1;
        partial += real < T ? 1 : 0;
        std::int32_t doc = 0, position = 0;
        for (std::size_t i = 0; i < real; ++i) {
          const std::size_t k = r * T + i;
          if (i > 0 && expected.starts.count(offset + i) == 1) {
            ++doc;
            position = 0;
            ++boundaries;
          }
          CHECK(b.tokens()[k] == expected.tokens[offset + i]);
          CHECK(b.doc_ids()[k] == doc);
          CHECK(b.position_ids()[k] == position++);
          const bool crosses = expected.starts.count(offset + i + 1) == 1;
          CHECK(b.labels()[k] == (crosses ? -100 : static_cast<std::int64_t>(expected.tokens[offset + i + 1])));
          delivered.push_back(static_cast<std::uint32_t>(b.tokens()[k]));
        }
        for (std::size_t i = real; i < T; ++i) {
          CHECK(b.labels()[r * T + i] == -100);
          CHECK(b.token_weights()[r * T + i] == 0.0f);
        }
        // The piece's last token: the last target, or a partial row's first padding input.
        delivered.push_back(
            static_cast<std::uint32_t>(real < T ? b.tokens()[r * T + real] : expected.tokens[offset + T]));
      }
    }
    CHECK(partial == 2);
    CHECK(boundaries > 10);
    const std::size_t taken = (2 + (units - 2) / 2 * 2) * kUnit;
    CHECK(delivered == std::vector<std::uint32_t>(expected.tokens.begin(),
                                                  expected.tokens.begin() + static_cast<std::ptrdiff_t>(taken)));
  }
}
