// dataset_metadata.json's one writer (write_metadata_document, and the public
// write_dataset_metadata over it): field order, kept checksums, the loader's checks before
// anything is written, and the file read back as the loader reads it.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "dataset/content_checksum.hpp"
#include "dataset/dataset_metadata.hpp"
#include "test_support.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {
namespace {

using nlohmann::ordered_json;
using test::error_of;
using test::TempDir;

std::string file_text(const std::filesystem::path& path) {
  const std::vector<char> bytes = test::read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

TEST_CASE("dataset metadata: the loader's fields in the writers' order, read back as written") {
  TempDir dir;
  DatasetMetadata fields;
  fields.token_dtype = TokenDtype::uint16;
  fields.mask_dtype = MaskDtype::uint8;
  fields.vocab_size = 261;
  fields.eot_token_id = 260;
  fields.pad_token_id = 260;
  const SpecialTokenIds ids{256, 257, 258, 260, std::nullopt};
  ordered_json doc = dataset_metadata_fields(fields, special_tokens_json(ids));
  doc["created_by"] = "test";
  write_metadata_document(dir.path(), doc);
  CHECK(file_text(dir / "dataset_metadata.json") ==
        "{\n  \"format_version\": 1,\n  \"token_dtype\": \"uint16\",\n  \"mask_dtype\": \"uint8\",\n"
        "  \"vocab_size\": 261,\n  \"eot_token_id\": 260,\n  \"pad_token_id\": 260,\n  \"special_tokens\": {\n"
        "    \"system\": 256,\n    \"user\": 257,\n    \"assistant\": 258,\n    \"tool\": null,\n    \"eot\": 260\n"
        "  },\n  \"created_by\": \"test\"\n}\n");
  const DatasetMetadata back = read_dataset_metadata(dir.path());
  CHECK(back.token_dtype == TokenDtype::uint16);
  CHECK(back.pad_token_id == 260);
  CHECK(back.special_tokens->assistant == 258);
  CHECK(!back.special_tokens->tool);
  CHECK(read_dataset_vocabulary(dir.path()).vocab_size == 261);
}

TEST_CASE("dataset metadata: a document the loader would refuse is never written") {
  TempDir dir;
  ordered_json doc = {{"token_dtype", "uint16"}};
  write_metadata_document(dir.path(), doc);
  const std::string before = file_text(dir / "dataset_metadata.json");
  ordered_json bad = {{"token_dtype", "int8"}};
  CHECK(error_of([&] { write_metadata_document(dir.path(), bad); }, ErrorKind::format).find("token_dtype") !=
        std::string::npos);
  ordered_json no_eot = {{"special_tokens", {{"system", 1}, {"user", 2}, {"assistant", 3}}}};
  CHECK(error_of([&] { write_metadata_document(dir.path(), no_eot); }, ErrorKind::format).find("lacks 'eot'") !=
        std::string::npos);
  CHECK(file_text(dir / "dataset_metadata.json") == before);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);  // no temporary left
}

TEST_CASE("dataset metadata: the public writer keeps recorded checksums, takes extra fields in order, escapes") {
  TempDir dir;
  record_content_checksums(dir.path(), "train", {{"train", {{"tokens.bin", std::string(64, 'a')}}}});
  DatasetMetadataFields fields;
  fields.token_dtype = TokenDtype::uint32;
  fields.eos_token_id = 2;
  fields.special_tokens_json = R"({"system": 1, "user": 3, "assistant": 4, "eot": 2})";
  fields.extra_json = R"({"note": "d\u00e9j\u00e0", "token_dtype": "uint32", "ratio": 0.1})";
  fields.ascii = true;
  const auto path = write_dataset_metadata(dir.path(), fields);
  CHECK(path == dir / "dataset_metadata.json");
  CHECK(file_text(path) ==
        "{\n  \"format_version\": 1,\n  \"token_dtype\": \"uint32\",\n  \"eos_token_id\": 2,\n"
        "  \"special_tokens\": {\n    \"system\": 1,\n    \"user\": 3,\n    \"assistant\": 4,\n    \"eot\": 2\n  },\n"
        "  \"content_sha256\": {\n    \"train\": {\n      \"tokens.bin\": \"" +
            std::string(64, 'a') + "\"\n    }\n  },\n  \"note\": \"d\\u00e9j\\u00e0\",\n  \"ratio\": 0.1\n}\n");
  fields.ascii = false;
  fields.keep_recorded_checksums = false;
  write_dataset_metadata(dir.path(), fields);
  const std::string utf8 = file_text(path);
  CHECK(utf8.find("d\xc3\xa9j\xc3\xa0") != std::string::npos);
  CHECK(utf8.find("content_sha256") == std::string::npos);

  fields.extra_json = "{";
  CHECK(error_of([&] { write_dataset_metadata(dir.path(), fields); }, ErrorKind::format).find("extra") !=
        std::string::npos);
}

}  // namespace
}  // namespace tokenfeed
