// `tokenfeed prepare-text` (prepare_text_corpus) and its parts: the input formats (JSONL,
// plain text by file, line or blank line, gzip and zstd), the token shards and their document
// offsets read back and compared with the tokenizer's own ids, the episode format, output
// identical for any worker count and for any input format of the same documents, bad input,
// the split rule and the verify sample, staging all or nothing, and resuming an interrupted run onto the same bytes.
#include <doctest/doctest.h>
#include <zlib.h>
#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "prepare/prepare_text.hpp"
#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "util/sha256.hpp"

namespace {

using namespace tokenfeed;
namespace fs = std::filesystem;
using Ids = std::vector<std::uint32_t>;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

// Documents of every kind a corpus holds: ASCII, multi-byte UTF-8, long, one-character ones.
std::vector<std::string> sample_documents(std::size_t n) {
  std::vector<std::string> docs;
  const std::vector<std::string> words = {"the", "loader", "naïve", "café", "東京", "données", "🙂", "x", "data"};
  std::uint64_t state = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::size_t count = 1 + (state >> 33) % (i % 50 == 0 ? 400 : 30);
    std::string doc;
    for (std::size_t w = 0; w < count; ++w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      if (w > 0) doc += ' ';
      doc += words[(state >> 33) % words.size()];
    }
    docs.push_back(doc);
  }
  return docs;
}

std::string jsonl_of(const std::vector<std::string>& docs) {
  std::string out;
  for (const std::string& d : docs) out += nlohmann::json{{"id", 1}, {"text", d}}.dump() + "\n";
  return out;
}

std::string gzip_of(const std::string& bytes) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string zstd_of(const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3);
  REQUIRE(ZSTD_isError(n) == 0);
  out.resize(n);
  return out;
}

// A 1-D .npy file's values, widened.
std::vector<std::uint64_t> read_npy(const fs::path& p) {
  const std::string bytes = read_bytes(p);
  const NpyHeader h = parse_npy_header(std::as_bytes(std::span(bytes.data(), bytes.size())), p.string());
  REQUIRE(h.shape.size() == 1);
  const std::size_t item = h.descr == "<u2" ? 2 : h.descr == "<u4" ? 4 : 8;
  REQUIRE(bytes.size() == h.data_offset + h.shape[0] * item);
  std::vector<std::uint64_t> values(h.shape[0]);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data() + h.data_offset + i * item, item);
    values[i] = v;
  }
  return values;
}

// The documents of a tokens-format split, from its shards and document offsets.
std::vector<Ids> read_token_split(const fs::path& split_dir, std::uint64_t shard_tokens) {
  std::vector<Ids> docs;
  for (std::uint64_t shard = 0;; ++shard) {
    char name[32];
    std::snprintf(name, sizeof name, "shard_%05llu", static_cast<unsigned long long>(shard));
    const fs::path tokens = split_dir / (std::string(name) + ".npy");
    if (!fs::exists(tokens)) break;
    const std::vector<std::uint64_t> t = read_npy(tokens);
    const std::vector<std::uint64_t> starts = read_npy(split_dir / (std::string(name) + ".docs.npy"));
    REQUIRE(!starts.empty());
    CHECK(starts[0] == 0);
    if (starts.size() > 1) CHECK(t.size() <= shard_tokens);  // only a lone document may pass the limit
    for (std::size_t d = 0; d < starts.size(); ++d) {
      const std::uint64_t end = d + 1 < starts.size() ? starts[d + 1] : t.size();
      REQUIRE(starts[d] < end);
      docs.emplace_back(t.begin() + static_cast<std::ptrdiff_t>(starts[d]),
                        t.begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
  return docs;
}

PrepareTextOptions base_options(const fs::path& input, const fs::path& out) {
  PrepareTextOptions o;
  o.inputs = {input.string()};
  o.output_dir = out;
  o.val_split = 0.0;
  o.shard_tokens = 4096;
  o.workers = 2;
  o.batch_bytes = 2048;  // many chunks, so that the pipeline reorders
  return o;
}

// Every file of a prepared dataset, by relative path, with its bytes' SHA-256 (the metadata's
// run-dependent fields aside: the inputs' paths and times).
std::map<std::string, std::string> dataset_files(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().filename() == "dataset_metadata.json") continue;
    files[e.path().lexically_relative(root).generic_string()] = sha256_file_hex(e.path());
  }
  return files;
}

Ids expected_ids(const Tokenizer& t, const std::string& text) {
  Ids ids = t.encode(text);
  ids.push_back(t.special_ids().eot);
  return ids;
}

}  // namespace

TEST_CASE("prepare-text: token shards hold each document's own ids and eos, cut only at document ends") {
  test::TempDir dir;
  const std::vector<std::string> docs = sample_documents(600);
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  const PrepareTextSummary s = prepare_text_corpus(base_options(dir / "c.jsonl", dir / "out"));
  const auto tokenizer = make_bytes_tokenizer();
  const std::vector<Ids> got = read_token_split(dir / "out" / "train", 4096);
  REQUIRE(got.size() == docs.size());
  std::uint64_t tokens = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    CHECK(got[i] == expected_ids(*tokenizer, docs[i]));
    tokens += got[i].size();
  }
  CHECK(s.train.documents == docs.size());
  CHECK(s.train.tokens == tokens);
  CHECK(s.train.shards > 1);
  CHECK(!fs::exists(dir / "out" / "val"));  // no val document: not written
  const nlohmann::json meta = nlohmann::json::parse(read_bytes(dir / "out" / "dataset_metadata.json"));
  CHECK(meta["token_dtype"] == "uint16");
  CHECK(meta["eos_token_id"] == 260);
  CHECK(meta["vocab_size"] == 261);
  CHECK(meta["splits"]["train"]["documents"] == docs.size());
  CHECK(meta["content_sha256"]["train"]["shard_00000.npy"] ==
        sha256_file_hex(dir / "out" / "train" / "shard_00000.npy"));
}

TEST_CASE("prepare-text: with SentencePiece, each document is SentencePiece's own encode and the model's eos") {
  const fs::path spm_train = test::find_spm_train();
  REQUIRE_MESSAGE(!spm_train.empty(), "spm_train (Debian's sentencepiece package) is needed");
  test::TempDir dir;
  const fs::path model = test::train_sentencepiece(spm_train, dir.path(), "");
  const std::vector<std::string> docs = sample_documents(400);
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
  o.tokenizer = "sentencepiece:" + model.string();
  o.prepend_bos = true;
  const PrepareTextSummary s = prepare_text_corpus(o);
  const auto t = make_tokenizer(o.tokenizer);
  REQUIRE(t->model_eos_id());
  REQUIRE(t->model_bos_id());
  CHECK(s.eos_id == t->model_eos_id());
  CHECK(s.vocab_size == t->describe().base_vocab_size);
  const std::vector<Ids> got = read_token_split(dir / "out" / "train", 4096);
  REQUIRE(got.size() == docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    Ids want = {*t->model_bos_id()};
    for (const std::uint32_t id : t->encode(docs[i])) want.push_back(id);
    want.push_back(*t->model_eos_id());
    CHECK(got[i] == want);
  }
}

TEST_CASE("prepare-text: a document longer than a shard makes a shard of its own") {
  test::TempDir dir;
  write_bytes(dir / "c.txt", "short one\n" + std::string(5000, 'a') + "\nshort two\n");
  PrepareTextOptions o = base_options(dir / "c.txt", dir / "out");
  o.read.doc_per = DocPer::line;
  const PrepareTextSummary s = prepare_text_corpus(o);
  CHECK(s.train.shards == 3);
  CHECK(read_npy(dir / "out" / "train" / "shard_00001.npy").size() == 5001);
  CHECK(read_npy(dir / "out" / "train" / "shard_00001.docs.npy") == std::vector<std::uint64_t>{0});
}

TEST_CASE("prepare-text: the output is the same for 1, 2 and 4 workers") {
  test::TempDir dir;
  write_bytes(dir / "c.jsonl", jsonl_of(sample_documents(800)));
  std::map<std::string, std::string> first;
  for (const int workers : {1, 2, 4}) {
    PrepareTextOptions o = base_options(dir / "c.jsonl", dir / ("out" + std::to_string(workers)));
    o.workers = workers;
    o.val_split = 0.1;
    prepare_text_corpus(o);
    const auto files = dataset_files(o.output_dir);
    if (first.empty()) {
      first = files;
      CHECK(files.size() > 4);
    } else {
      CHECK(files == first);
    }
  }
}

TEST_CASE("prepare-text: JSONL, gzip, zstd and plain text of the same documents give the same bytes") {
  test::TempDir dir;
  const std::vector<std::string> docs = sample_documents(300);
  const std::string jsonl = jsonl_of(docs);
  std::string lines, paragraphs;
  for (const std::string& d : docs) {
    lines += d + "\n";
    paragraphs += d + "\n\n\n";
  }
  write_bytes(dir / "a.jsonl", jsonl);
  write_bytes(dir / "b.jsonl.gz", gzip_of(jsonl));
  write_bytes(dir / "c.jsonl.zst", zstd_of(jsonl));
  write_bytes(dir / "d.txt", lines);
  write_bytes(dir / "e.txt.zst", zstd_of(paragraphs));
  std::map<std::string, std::string> reference;
  for (const auto& [input, doc_per] : std::vector<std::pair<std::string, DocPer>>{{"a.jsonl", DocPer::file},
                                                                                  {"b.jsonl.gz", DocPer::file},
                                                                                  {"c.jsonl.zst", DocPer::file},
                                                                                  {"d.txt", DocPer::line},
                                                                                  {"e.txt.zst", DocPer::blank_line}}) {
    CAPTURE(input);
    PrepareTextOptions o = base_options(dir / input, dir / ("out_" + input));
    o.read.doc_per = doc_per;
    o.val_split = 0.2;
    prepare_text_corpus(o);
    const auto files = dataset_files(o.output_dir);
    if (reference.empty()) {
      reference = files;
    } else {
      CHECK(files == reference);
    }
  }
}

TEST_CASE("prepare-text: plain text per file keeps the text whole, and blank-line joins a block of lines") {
  test::TempDir dir;
  fs::create_directories(dir / "docs");
  write_bytes(dir / "docs" / "b.txt", "\xEF\xBB\xBFsecond\r\nfile\n");
  write_bytes(dir / "docs" / "a.txt", "first file\n\nwith a gap");
  write_bytes(dir / "docs" / "c.txt", "");
  PrepareTextOptions o = base_options(dir / "docs" / "*.txt", dir / "out");
  const PrepareTextSummary s = prepare_text_corpus(o);
  const auto t = make_bytes_tokenizer();
  const std::vector<Ids> got = read_token_split(dir / "out" / "train", 4096);
  REQUIRE(got.size() == 2);  // sorted: a.txt, b.txt; c.txt is empty
  CHECK(got[0] == expected_ids(*t, "first file\n\nwith a gap"));
  CHECK(got[1] == expected_ids(*t, "second\r\nfile\n"));  // the BOM goes, nothing else
  CHECK(s.train.empty_documents == 1);

  write_bytes(dir / "p.txt", "\n\nline one\nline two  \n\n\n   \nthird\n");
  PrepareTextOptions p = base_options(dir / "p.txt", dir / "out_p");
  p.read.doc_per = DocPer::blank_line;
  prepare_text_corpus(p);
  const std::vector<Ids> blocks = read_token_split(dir / "out_p" / "train", 4096);
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0] == expected_ids(*t, "line one\nline two  "));
  CHECK(blocks[1] == expected_ids(*t, "   \nthird"));  // a whitespace-only line is content
}

TEST_CASE("prepare-text: eos, --eos-token, --no-eos and --bos") {
  test::TempDir dir;
  write_bytes(dir / "c.jsonl", "{\"text\": \"ab\"}\n");
  const auto t = make_bytes_tokenizer();
  SUBCASE("no eos") {
    PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
    o.append_eos = false;
    prepare_text_corpus(o);
    CHECK(read_token_split(dir / "out" / "train", 4096) == std::vector<Ids>{{'a', 'b'}});
  }
  SUBCASE("a named token") {
    PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
    o.eos_token = t->special_strings().user;
    prepare_text_corpus(o);
    CHECK(read_token_split(dir / "out" / "train", 4096) == std::vector<Ids>{{'a', 'b', t->special_ids().user}});
  }
  SUBCASE("a token the tokenizer does not have") {
    PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
    o.eos_token = "</s>";
    CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("--eos-token '</s>'"), Error);
    CHECK(!fs::exists(dir / "out"));
  }
  SUBCASE("bytes has no bos") {
    PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
    o.prepend_bos = true;
    CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("BOS"), Error);
  }
}

TEST_CASE("prepare-text: bad lines fail naming file and line, or are skipped and counted") {
  test::TempDir dir;
  const std::string lines =
      "{\"text\": \"ok\"}\n"
      "not json\n"
      "{\"text\": null}\n"
      "{\"text\": 7}\n"
      "{\"body\": \"x\"}\n"
      "[1, 2]\n"
      "{\"text\": \"\"}\n"
      "   \n"
      "{\"text\": \"\\ud800\"}\n"
      "{\"text\": \"fine\"}\n";
  write_bytes(dir / "c.jsonl", lines);
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
  CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("c.jsonl:2: invalid_json"), Error);
  CHECK(!fs::exists(dir / "out"));
  CHECK(fs::directory_iterator(dir.path()) != fs::directory_iterator());
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename().string()[0] != '.');

  o.on_error = OnBadLine::skip;
  const PrepareTextSummary s = prepare_text_corpus(o);
  CHECK(s.train.documents == 2);
  CHECK(s.train.empty_documents == 1);
  CHECK(s.blank_lines == 1);
  CHECK(s.skipped.at("invalid_json").count == 2);  // "not json" and the lone surrogate
  CHECK(s.skipped.at("not_a_string").count == 2);
  CHECK(s.skipped.at("missing_field").count == 1);
  CHECK(s.skipped.at("not_an_object").count == 1);
  CHECK(s.train.skipped_lines == 6);

  write_bytes(dir / "bad.txt", "fine\n\xff\xfe bad\n");
  PrepareTextOptions t = base_options(dir / "bad.txt", dir / "out_t");
  t.read.doc_per = DocPer::line;
  CHECK_THROWS_WITH_AS(prepare_text_corpus(t), doctest::Contains("bad.txt:2: invalid_utf8"), Error);

  // A JSON string that is not UTF-8: the parser's detail quotes the line, and the message
  // stays UTF-8 (Python's exceptions hold str), the byte written as \xc3.
  write_bytes(dir / "u.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xc3 au lait\"}\n");
  PrepareTextOptions u = base_options(dir / "u.jsonl", dir / "out_u");
  std::string message;
  try {
    prepare_text_corpus(u);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("u.jsonl:2: invalid_json") != std::string::npos);
  CHECK(message.find("\\xc3") != std::string::npos);
  CHECK(message.find('\xc3') == std::string::npos);

  write_bytes(dir / "long.jsonl", "{\"text\": \"" + std::string(200, 'x') + "\"}\n{\"text\": \"y\"}\n");
  PrepareTextOptions l = base_options(dir / "long.jsonl", dir / "out_l");
  l.read.max_document_bytes = 100;
  CHECK_THROWS_WITH_AS(prepare_text_corpus(l), doctest::Contains("long.jsonl:1: document_too_long"), Error);
}

TEST_CASE("prepare-text: --max-document-bytes bounds the text as decoded, and a JSONL line at 6 x + 1 MiB") {
  test::TempDir dir;
  const auto tokenizer = make_tokenizer("bytes");
  std::string escaped;  // 100 bytes of text in 600 bytes of JSON
  for (int i = 0; i < 100; ++i) escaped += "\\u0041";
  const std::string big_field((std::size_t{1} << 20) + 1000, 'm');
  const std::vector<std::string> lines = {
      "{\"text\": \"" + std::string(100, 'x') + "\", \"id\": 1}",            // 1: exactly the limit
      "{\"text\": \"" + std::string(101, 'x') + "\"}",                       // 2: one byte over
      "{\"text\": \"" + escaped + "\"}",                                     // 3: decoded to 100 bytes
      "{\"meta\": \"" + big_field.substr(0, 1000) + "\", \"text\": \"y\"}",  // 4: other fields count little
      "{\"meta\": \"" + big_field + "\", \"text\": \"z\"}",                  // 5: over 6 x 100 + 1 MiB
  };
  std::string jsonl;
  for (const std::string& line : lines) jsonl += line + "\n";
  write_bytes(dir / "c.jsonl", jsonl);
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
  o.read.max_document_bytes = 100;
  o.on_error = OnBadLine::skip;
  const PrepareTextSummary s = prepare_text_corpus(o);
  CHECK(s.train.documents == 3);
  REQUIRE(s.skipped.count("document_too_long") == 1);
  CHECK(s.skipped.at("document_too_long").count == 2);
  CHECK(s.skipped.at("document_too_long").first_line == 2);
  CHECK(s.skipped.at("document_too_long").first_detail.find("the text is 101 bytes, longer than 100") !=
        std::string::npos);
  CHECK(read_token_split(dir / "out" / "train", o.shard_tokens) ==
        std::vector<Ids>{expected_ids(*tokenizer, std::string(100, 'x')),
                         expected_ids(*tokenizer, std::string(100, 'A')), expected_ids(*tokenizer, "y")});

  // Under --on-error fail the raw line's limit is named with its file and line.
  write_bytes(dir / "d.jsonl", lines[0] + "\n" + lines[4] + "\n");
  PrepareTextOptions f = base_options(dir / "d.jsonl", dir / "out_f");
  f.read.max_document_bytes = 100;
  CHECK_THROWS_WITH_AS(prepare_text_corpus(f),
                       doctest::Contains("d.jsonl:2: document_too_long: the line is longer than 1049176 bytes"), Error);
  // Plain text keeps measuring the line itself.
  write_bytes(dir / "p.txt", std::string(100, 'p') + "\n" + std::string(101, 'q') + "\n");
  PrepareTextOptions t = base_options(dir / "p.txt", dir / "out_t");
  t.read.doc_per = DocPer::line;
  t.read.max_document_bytes = 100;
  CHECK_THROWS_WITH_AS(prepare_text_corpus(t), doctest::Contains("p.txt:2: document_too_long"), Error);
}

TEST_CASE("prepare-text: runs of empty lines are counted line by line, across buffers and with CRLF") {
  test::TempDir dir;
  // "xy\n" first puts a "\r\n" across the reader's 1 MiB buffers; 70,000 passes a record's run.
  std::string text = "xy\n";
  for (int i = 0; i < 600000; ++i) text += "\r\n";
  text += "z\n" + std::string(70000, '\n') + "w";
  write_bytes(dir / "c.txt", text);
  write_bytes(dir / "c.txt.zst", zstd_of(text));
  for (const std::string name : {"c.txt", "c.txt.zst"}) {
    CAPTURE(name);
    PrepareTextOptions o = base_options(dir / name, dir / ("line_" + name));
    o.read.doc_per = DocPer::line;
    const PrepareTextSummary s = prepare_text_corpus(o);
    CHECK(s.train.documents == 3);
    CHECK(s.train.empty_documents == 670000);
    const auto tokenizer = make_tokenizer("bytes");
    const Tokenizer& t = *tokenizer;
    CHECK(read_token_split(dir / ("line_" + name) / "train", o.shard_tokens) ==
          std::vector<Ids>{expected_ids(t, "xy"), expected_ids(t, "z"), expected_ids(t, "w")});
  }
  // JSONL: empty lines are blank lines, counted; the line numbers after them still right.
  write_bytes(dir / "b.jsonl", "{\"text\": \"a\"}\n" + std::string(70000, '\n') + "\r\n{\"text\": 5}\n");
  PrepareTextOptions o = base_options(dir / "b.jsonl", dir / "jsonl");
  o.on_error = OnBadLine::skip;
  const PrepareTextSummary s = prepare_text_corpus(o);
  CHECK(s.blank_lines == 70001);
  CHECK(s.train.documents == 1);
  REQUIRE(s.skipped.count("not_a_string") == 1);
  CHECK(s.skipped.at("not_a_string").first_line == 70003);
}

TEST_CASE("prepare-text: progress counts the input of the records written, compressed input too") {
  // The bytes a decoder took are far ahead of the records read from what it gave: progress
  // must follow the records, and reach 100% only with the last of them.
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 300000; ++i) text += "abc\n";  // 1.2 MB: more than one decoded buffer
  write_bytes(dir / "c.txt", text);
  write_bytes(dir / "c.txt.gz", gzip_of(text));
  write_bytes(dir / "c.txt.zst", zstd_of(text));
  for (const std::string name : {"c.txt", "c.txt.gz", "c.txt.zst"}) {
    CAPTURE(name);
    PrepareTextOptions o = base_options(dir / name, dir / ("out_" + name));
    o.read.doc_per = DocPer::line;
    o.batch_bytes = 16384;
    o.progress_interval_seconds = 0;
    std::vector<PrepareTextProgress> reports;
    o.on_progress = [&](const PrepareTextProgress& p) { reports.push_back(p); };
    prepare_text_corpus(o);
    REQUIRE(reports.size() > 20);
    for (const PrepareTextProgress& p : reports) {
      if (p.done) continue;
      const double read = static_cast<double>(p.input_bytes_read) / static_cast<double>(p.input_bytes_total);
      const double written = static_cast<double>(p.documents) / 300000.0;
      CAPTURE(read);
      CAPTURE(written);
      CHECK(std::abs(read - written) < 0.2);
      if (p.input_bytes_read == p.input_bytes_total) CHECK(p.documents == 300000);
    }
  }
}

TEST_CASE("prepare-text: inputs that are not there, not files, or corrupt are clear errors") {
  test::TempDir dir;
  PrepareTextOptions o = base_options(dir / "none*.jsonl", dir / "out");
  // A missing input is ErrorKind::io (exit status 3), whether its directory exists or not.
  for (const fs::path& missing :
       {dir / "none*.jsonl", dir / "none.jsonl", dir / "no_dir" / "*.jsonl", dir / "no_dir" / "c.jsonl"}) {
    CAPTURE(missing);
    o.inputs = {missing.string()};
    CHECK(test::error_of([&] { prepare_text_corpus(o); }, ErrorKind::io).find("matches no file") != std::string::npos);
  }
  fs::create_directories(dir / "d.jsonl");
  o.inputs = {(dir / "d.jsonl").string()};
  CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("not a regular file"), Error);
  write_bytes(dir / "t.jsonl.zst", zstd_of(jsonl_of(sample_documents(50))).substr(0, 40));
  o.inputs = {(dir / "t.jsonl.zst").string()};
  CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("zstd"), Error);
  write_bytes(dir / "p.parquet", "PAR1");
  o.inputs = {(dir / "p.parquet").string()};
  CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("Python package"), Error);
  write_bytes(dir / "e.jsonl", "{\"text\": \"\"}\n");
  o.inputs = {(dir / "e.jsonl").string()};
  CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("no document landed in train"), Error);
  CHECK(!fs::exists(dir / "out"));
}

TEST_CASE("prepare-text: the split rule is a pure function of the document and the seed") {
  // Pinned: a change moves documents between splits of datasets already prepared.
  const double u = text_split_point("hello world", 0);
  CHECK(u >= 0.0);
  CHECK(u < 1.0);
  CHECK(text_split_point("hello world", 0) == u);
  CHECK(text_split_point("hello world", 1) != u);
  // hashlib.sha256(b"tokenfeed-text-split-v1\0" + (0).to_bytes(8, "little") + b"hello world")
  Sha256 sha;
  const std::string prefix("tokenfeed-text-split-v1\0\0\0\0\0\0\0\0\0", 32);
  sha.update(prefix);
  sha.update("hello world");
  const Sha256::Digest d = sha.finish();
  std::uint64_t top = 0;
  for (int i = 0; i < 8; ++i) top = (top << 8) | d[static_cast<std::size_t>(i)];
  CHECK(u == static_cast<double>(top >> 11) * 0x1.0p-53);
}

// The verify sample's encoder in the tests: the bytes tokenizer's ids, with one id changed in
// every document that contains `plant` (a tokenizer that reads that text differently).
class BytesVerifier final : public DocumentEncoder {
 public:
  explicit BytesVerifier(std::string plant = {}) : plant_(std::move(plant)) {}
  void encode(std::span<const std::string_view> texts, std::vector<std::vector<std::uint32_t>>& ids) override {
    for (std::size_t i = 0; i < texts.size(); ++i) {
      tokenizer_->encode(texts[i], ids[i]);
      if (!plant_.empty() && texts[i].find(plant_) != std::string_view::npos) ids[i][1] ^= 1;
      ++texts_;
    }
  }
  std::uint64_t texts() const { return texts_; }

 private:
  std::unique_ptr<Tokenizer> tokenizer_ = make_bytes_tokenizer();
  std::string plant_;
  std::uint64_t texts_ = 0;
};

TEST_CASE("prepare-text: the verify sample is chosen by content hash, and a difference names the document") {
  test::TempDir dir;
  std::vector<std::string> docs = sample_documents(400);
  docs[6] = "a planted document";  // line 7
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "plain");
  const PrepareTextSummary plain = prepare_text_corpus(o);
  CHECK(plain.verified_documents == 0);

  SUBCASE("every document, the same ids: verified and written as without the verifier") {
    auto verifier = std::make_shared<BytesVerifier>();
    o.output_dir = dir / "verified";
    o.verify_encoder = verifier;
    o.verify_fraction = 1.0;
    const PrepareTextSummary s = prepare_text_corpus(o);
    CHECK(s.verified_documents == docs.size());
    CHECK(verifier->texts() == docs.size());
    CHECK(read_bytes(dir / "verified" / "train" / "shard_00000.npy") ==
          read_bytes(dir / "plain" / "train" / "shard_00000.npy"));
  }
  SUBCASE("a fraction: the documents whose hash draw is below it, the same ones every run") {
    std::uint64_t expected = 0;
    for (const std::string& d : docs) expected += text_draws(d, o.seed).verify < 0.25 ? 1 : 0;
    CHECK(expected > 50);
    CHECK(expected < 150);
    o.verify_encoder = std::make_shared<BytesVerifier>();
    o.verify_fraction = 0.25;
    for (const char* out : {"a", "b"}) {
      o.output_dir = dir / out;
      CHECK(prepare_text_corpus(o).verified_documents == expected);
    }
  }
  SUBCASE("a difference in a sampled document stops the run naming its file and line; nothing is written") {
    o.output_dir = dir / "planted";
    o.verify_encoder = std::make_shared<BytesVerifier>("planted");
    o.verify_fraction = 1.0;
    CHECK_THROWS_WITH_AS(prepare_text_corpus(o),
                         doctest::Contains("c.jsonl:7: tokenizer 'bytes' and the verifier disagree at token 1 (id "),
                         Error);
    CHECK(!fs::exists(dir / "planted"));
    // Outside the sample, the same difference goes unseen (which is why the sample is a sample).
    o.verify_fraction = text_draws(docs[6], o.seed).verify;  // strictly below: not drawn
    CHECK(prepare_text_corpus(o).verified_documents > 0);
  }
  SUBCASE("bad values") {
    o.output_dir = dir / "bad";
    o.verify_fraction = 1.5;
    CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("--verify-sample must be in [0, 1]"), Error);
    o.verify_fraction = 0.5;
    o.verify_encoder = std::make_shared<BytesVerifier>();
    o.encoder = std::make_shared<BytesVerifier>();
    CHECK_THROWS_WITH_AS(prepare_text_corpus(o), doctest::Contains("not the caller's encoder"), Error);
  }
}

TEST_CASE("prepare-text: documents as episodes load in sft_packed, every position trained") {
  test::TempDir dir;
  const std::vector<std::string> docs = sample_documents(200);
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
  o.format = CorpusFormat::episodes;
  const PrepareTextSummary s = prepare_text_corpus(o);
  CHECK(s.train.documents == docs.size());
  CHECK(fs::exists(dir / "out" / "train" / "shard_00000" / "tokens.bin"));
  CHECK(!fs::exists(dir / "out" / "train" / "shard_00000" / "mask.bin"));
  const nlohmann::json meta = nlohmann::json::parse(read_bytes(dir / "out" / "dataset_metadata.json"));
  CHECK(meta["pad_token_id"] == 260);
  CHECK(meta["content_sha256"]["train/shard_00000"].contains("episodes.idx"));

  Config c;
  c.dataset_dir = dir / "out";
  c.dataset_mode = DatasetMode::sft_packed;
  c.batch_size = 2;
  c.block_size = 64;
  c.audit_log_dir.clear();
  Loader loader(c);
  const Batch b = loader.get_batch("train");
  std::size_t trained = 0;
  for (const std::int64_t label : b.labels()) trained += label != c.ignore_index ? 1 : 0;
  CHECK(trained > 0);
}

namespace {

// A corpus of 3,000 documents in `dir`, and the options that prepare it into `dir/out_name`
// with a val split and shards of `shard_tokens`.
PrepareTextOptions corpus_with_val(const fs::path& dir, const std::string& out_name, std::uint64_t shard_tokens) {
  write_bytes(dir / "c.jsonl", jsonl_of(sample_documents(3000)));
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / out_name);
  o.val_split = 0.05;
  o.shard_tokens = shard_tokens;
  return o;
}

// Runs `o` into `out` and stops it at its `reports`-th progress report, as Ctrl-C would: the
// staging directory is kept for --resume.
void interrupt_after(PrepareTextOptions o, const fs::path& out, int reports) {
  std::atomic<bool> stop{false};
  int seen = 0;
  o.output_dir = out;
  o.stop_requested = &stop;
  o.progress_interval_seconds = 0;
  o.on_progress = [&](const PrepareTextProgress&) {
    if (++seen == reports) stop = true;
  };
  CHECK_THROWS_AS(prepare_text_corpus(o), PrepareInterrupted);
}

}  // namespace

TEST_CASE("prepare-text: an interrupted run resumed keeps its finished shards and gives the same bytes" *
          doctest::timeout(120)) {
  test::TempDir dir;
  PrepareTextOptions o = corpus_with_val(dir.path(), "full", 2000);
  prepare_text_corpus(o);
  const auto reference = dataset_files(dir / "full");

  for (const int stop_after : {3, 20}) {
    CAPTURE(stop_after);
    const fs::path out = dir / ("resumed" + std::to_string(stop_after));
    interrupt_after(o, out, stop_after);
    CHECK(!fs::exists(out));

    PrepareTextOptions again = o;
    again.output_dir = out;
    again.resume = true;
    const PrepareTextSummary s = prepare_text_corpus(again);
    CHECK(s.resumed);
    CHECK(s.shards_reused > 0);
    CHECK(dataset_files(out) == reference);
    const nlohmann::json a = nlohmann::json::parse(read_bytes(out / "dataset_metadata.json"));
    const nlohmann::json b = nlohmann::json::parse(read_bytes(dir / "full" / "dataset_metadata.json"));
    CHECK(a["splits"] == b["splits"]);
    CHECK(a["content_sha256"] == b["content_sha256"]);
  }

  SUBCASE("other options start over; without --resume the leftover is removed") {
    interrupt_after(o, dir / "other", 1);
    PrepareTextOptions changed = o;
    changed.output_dir = dir / "other";
    changed.seed = 7;
    changed.resume = true;
    const PrepareTextSummary s = prepare_text_corpus(changed);
    CHECK(!s.resumed);
    CHECK(s.removed_stale_dirs.size() == 1);
  }
}

TEST_CASE("prepare-text: resume_check content tells an input rewritten in place, stat takes it by size and time" *
          doctest::timeout(120)) {
  test::TempDir dir;
  PrepareTextOptions o = corpus_with_val(dir.path(), "full", 2000);
  const fs::path input = dir / "c.jsonl";
  // The same bytes but one: a JSONL input rewritten in place, its size and time put back.
  const auto rewrite_in_place = [&] {
    const auto mtime = fs::last_write_time(input);
    std::string bytes = read_bytes(input);
    const std::size_t at = bytes.find("the");  // ASCII: the line stays valid UTF-8
    REQUIRE(at != std::string::npos);
    bytes[at + 2] = 'y';
    write_bytes(input, bytes);
    fs::last_write_time(input, mtime);
  };

  for (const ResumeCheck check : {ResumeCheck::stat, ResumeCheck::content}) {
    CAPTURE(to_string(check));
    write_bytes(input, jsonl_of(sample_documents(3000)));
    o.resume_check = check;
    const fs::path out = dir / (std::string("resumed_") + to_string(check));
    interrupt_after(o, out, 3);
    rewrite_in_place();
    PrepareTextOptions again = o;
    again.output_dir = out;
    again.resume = true;
    const PrepareTextSummary s = prepare_text_corpus(again);
    // stat cannot tell: it takes the run over; content starts from the beginning.
    CHECK(s.resumed == (check == ResumeCheck::stat));
  }

  SUBCASE("content resumes an unchanged input, and the option is part of the run's key") {
    o.resume_check = ResumeCheck::content;
    interrupt_after(o, dir / "same", 3);
    PrepareTextOptions again = o;
    again.output_dir = dir / "same";
    again.resume = true;
    PrepareTextOptions other = again;
    other.output_dir = dir / "other";
    interrupt_after(o, dir / "other", 3);
    other.resume_check = ResumeCheck::stat;
    CHECK_FALSE(prepare_text_corpus(other).resumed);
    const PrepareTextSummary s = prepare_text_corpus(again);
    CHECK(s.resumed);
    CHECK(s.shards_reused > 0);
  }
}

namespace {

// The staging directory a run of `out` left behind.
fs::path staging_dir_of(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(out.parent_path())) {
    if (e.path().filename().string().starts_with("." + out.filename().string() + ".tmp-")) return e.path();
  }
  FAIL("no staging directory of " << out);
  return {};
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p, std::ios::binary);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("prepare-text: a finished shard appends one bounded journal line, and the manifest is written once" *
          doctest::timeout(120)) {
  // Rewriting every finished shard into the manifest made a run's time grow with the square
  // of its shards: here the manifest must stay the same file, and each journal line as long
  // as the first, however many shards came before.
  test::TempDir dir;
  PrepareTextOptions o = corpus_with_val(dir.path(), "out", 500);
  o.progress_interval_seconds = 0;
  std::atomic<bool> stop{false};
  o.stop_requested = &stop;
  struct stat first {};
  bool seen = false, manifest_same = true;
  std::size_t journal_lines = 0;
  o.on_progress = [&](const PrepareTextProgress&) {
    const fs::path staging = staging_dir_of(dir / "out");
    struct stat now {};
    REQUIRE(::stat((staging / "prepare_text_manifest.json").c_str(), &now) == 0);
    if (!seen) first = now;
    seen = true;
    manifest_same = manifest_same && now.st_ino == first.st_ino && now.st_size == first.st_size &&
                    now.st_mtim.tv_sec == first.st_mtim.tv_sec && now.st_mtim.tv_nsec == first.st_mtim.tv_nsec;
    journal_lines = lines_of(staging / "prepare_text_shards.jsonl").size();
    if (journal_lines >= 300) stop = true;
  };
  CHECK_THROWS_AS(prepare_text_corpus(o), PrepareInterrupted);
  CHECK(manifest_same);
  REQUIRE(journal_lines >= 300);
  const std::vector<std::string> lines = lines_of(staging_dir_of(dir / "out") / "prepare_text_shards.jsonl");
  std::size_t train = 0, val = 0;
  for (const std::string& line : lines) {
    CHECK(line.size() <= lines.front().size() + 64);  // its figures' digits may grow, nothing else
    const nlohmann::json j = nlohmann::json::parse(line);
    std::size_t& count = j.at("split") == "val" ? val : train;
    CHECK(j.at("index") == count);
    ++count;
  }
  CHECK(val > 0);
  CHECK(train + val == lines.size());
}

TEST_CASE("prepare-text: a journal whose last line was torn by a kill resumes onto the same bytes" *
          doctest::timeout(120)) {
  test::TempDir dir;
  PrepareTextOptions o = corpus_with_val(dir.path(), "full", 2000);
  prepare_text_corpus(o);
  const auto reference = dataset_files(dir / "full");

  for (const bool torn : {true, false}) {
    CAPTURE(torn);
    const fs::path out = dir / (torn ? "torn" : "whole");
    interrupt_after(o, out, 20);
    const fs::path journal = staging_dir_of(out) / "prepare_text_shards.jsonl";
    const std::vector<std::string> lines = lines_of(journal);
    REQUIRE(lines.size() >= 3);
    std::size_t kept = lines.size();
    if (torn) {
      // Killed while appending the last line: only its first half reached the file.
      std::string bytes = read_bytes(journal);
      bytes.resize(bytes.size() - 1 - lines.back().size() / 2);
      write_bytes(journal, bytes);
      kept = lines.size() - 1;
    }
    PrepareTextOptions again = o;
    again.output_dir = out;
    again.resume = true;
    const PrepareTextSummary s = prepare_text_corpus(again);
    CHECK(s.resumed);
    CHECK(s.shards_reused == kept);
    CHECK(dataset_files(out) == reference);
    CHECK(nlohmann::json::parse(read_bytes(out / "dataset_metadata.json"))["content_sha256"] ==
          nlohmann::json::parse(read_bytes(dir / "full" / "dataset_metadata.json"))["content_sha256"]);
  }

  SUBCASE("a staging directory of the older manifest (version 1) is not taken over") {
    interrupt_after(o, dir / "old", 20);
    const fs::path manifest = staging_dir_of(dir / "old") / "prepare_text_manifest.json";
    nlohmann::json m = nlohmann::json::parse(read_bytes(manifest));
    m["manifest_version"] = 1;
    write_bytes(manifest, m.dump());
    PrepareTextOptions again = o;
    again.output_dir = dir / "old";
    again.resume = true;
    const PrepareTextSummary s = prepare_text_corpus(again);
    CHECK(!s.resumed);
    CHECK(s.removed_stale_dirs.size() == 1);
    CHECK(dataset_files(dir / "old") == reference);
  }
}

TEST_CASE("prepare-text: a prepared corpus trains end to end as document-aware windows" * doctest::timeout(120)) {
  test::TempDir dir;
  const std::vector<std::string> docs = sample_documents(300);
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  prepare_text_corpus(base_options(dir / "c.jsonl", dir / "out"));
  Config c;
  c.dataset_dir = dir / "out";
  c.dataset_mode = DatasetMode::token_stream;
  c.batch_sampling_mode = SamplingMode::epoch;
  c.document_aware = true;
  c.batch_size = 4;
  c.block_size = 32;
  c.audit_log_dir.clear();
  Loader loader(c);  // the .docs.npy files beside the shards are no shards
  const Batch b = loader.get_batch("train");
  std::size_t boundaries = 0;
  for (std::size_t i = 0; i < b.x().size(); ++i) {
    if (b.x()[i] == 260) {  // the end-of-text id: the label after it is another document's
      CHECK(b.y()[i] == c.ignore_index);
      ++boundaries;
    }
  }
  CHECK(boundaries > 0);
}

TEST_CASE("prepare-text: packed with truncation=split, every label position of every document is trained once" *
          doctest::timeout(120)) {
  test::TempDir dir;
  const std::vector<std::string> docs = sample_documents(150);
  write_bytes(dir / "c.jsonl", jsonl_of(docs));
  PrepareTextOptions o = base_options(dir / "c.jsonl", dir / "out");
  o.format = CorpusFormat::episodes;
  prepare_text_corpus(o);
  const auto t = make_bytes_tokenizer();
  std::vector<Ids> want;
  std::size_t long_docs = 0;
  for (const std::string& d : docs) {
    want.push_back(expected_ids(*t, d));
    long_docs += want.back().size() > 65 ? 1 : 0;
  }
  REQUIRE(long_docs > 0);
  Config c;
  c.dataset_dir = dir / "out";
  c.dataset_mode = DatasetMode::sft_packed;
  c.truncation = Truncation::split;
  c.epoch_drop_last = false;
  c.batch_size = 4;
  c.block_size = 64;
  c.audit_log_dir.clear();
  Loader loader(c);
  std::map<std::int64_t, Ids> labels;  // per document, the labels trained, in the order trained
  for (;;) {
    const Batch b = loader.get_batch("train");
    if (b.epoch() != 0) break;
    const std::size_t T = b.cols();
    for (const PackedSegment& s : b.segments()) {
      const std::size_t at = s.row * T + s.column;
      const Ids& doc = want.at(static_cast<std::size_t>(s.episode));
      Ids& got = labels[s.episode];
      // A piece starts at the previous piece's last token: its inputs continue the document.
      for (std::size_t i = 0; i < s.positions; ++i) {
        CHECK(b.tokens()[at + i] == doc.at(got.size() + i));
        CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i));
      }
      for (std::size_t i = 0; i < s.positions; ++i) got.push_back(static_cast<std::uint32_t>(b.labels()[at + i]));
    }
  }
  REQUIRE(labels.size() == want.size());
  for (const auto& [episode, got] : labels) {
    const Ids& doc = want[static_cast<std::size_t>(episode)];
    CHECK(got == Ids(doc.begin() + 1, doc.end()));  // tokens 1..n-1, each once, in order
  }
}
