// Golden values: the hash, the counter generator, the resume fingerprint, a saved state and
// the content of the first batches of each mode, pinned as literals.
//
// Resume states carry the fingerprint, and random-mode data is drawn by the counter
// generator keyed by the hash: a change to any of them silently invalidates every saved
// state or changes the data a run trains on. These tests make such a change deliberate: if
// one fails, the change must be intended, stated in the commit message and docs/, and
// the literal updated here.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>

#include "sampling/numpy_random.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "util/hash.hpp"

using namespace tokenfeed;

namespace {

std::string hex(std::uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

// The shipped sample dataset (data/sample/sft), whose bytes are committed.
Config sample_config(DatasetMode mode, SamplingMode sampling) {
  Config c = load_config_file(std::filesystem::path(TOKENFEED_SOURCE_DIR) / "data/sample/sample.xml");
  c.dataset_mode = mode;
  c.batch_sampling_mode = sampling;
  c.batch_size = 4;
  c.block_size = 256;
  c.decode_threads = 1;
  c.audit_log_dir.clear();
  return c;
}

template <typename T>
void hash_span(Hasher& h, std::span<const T> values) {
  h.add(values.size());
  for (const T v : values) {
    std::uint64_t word = 0;
    std::memcpy(&word, &v, sizeof v);
    h.add(word);
  }
}

// A digest of every field of the first `batches` train batches.
std::string content_digest(Loader& loader, int batches) {
  Hasher h;
  for (int i = 0; i < batches; ++i) {
    const Batch b = loader.get_batch("train");
    h.add(b.step());
    h.add(b.epoch());
    h.add(b.batch_in_epoch());
    hash_span(h, b.x());
    hash_span(h, b.y());
    hash_span(h, b.mask());
    hash_span(h, b.episode_ids());
    hash_span(h, b.tokens());
    hash_span(h, b.labels());
    hash_span(h, b.token_weights());
    hash_span(h, b.position_ids());
    hash_span(h, b.cu_seqlens());
  }
  return hex(h.digest());
}

}  // namespace

TEST_CASE("golden: Hasher digests") {
  Hasher empty;
  CHECK(hex(empty.digest()) == "0xe9e0033e3badaf36");
  Hasher words;
  words.add(std::uint64_t{0});
  words.add(std::uint64_t{1});
  words.add(~std::uint64_t{0});
  CHECK(hex(words.digest()) == "0xf21718ec08698e06");
  Hasher text;
  text.add(std::string_view("tokenfeed-order-v1"));
  text.add(std::string_view(""));
  text.add(std::string_view("train"));
  CHECK(hex(text.digest()) == "0x82c90d5d5b4faac9");
  CHECK(hex(Hasher::mix(12345)) == "0xf36cf1164265dd51");
}

TEST_CASE("golden: CounterRng draws") {
  const CounterRng rng(0x0123456789abcdefULL);
  std::string draws;
  for (std::uint64_t counter = 0; counter < 6; ++counter) draws += std::to_string(rng.uniform(counter, 1000)) + " ";
  CHECK(draws == "722 886 256 343 418 315 ");
  // A bound above 2^32 takes the 64-bit path.
  CHECK(rng.uniform(7, (std::uint64_t{1} << 40) + 3) == 827083567958ULL);
  CHECK(CounterRng(42).uniform(0, 1) == 0);
}

TEST_CASE("golden: resume fingerprints of the sample dataset") {
  const Loader episode(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  CHECK(episode.fingerprint() == "53c66441628f6976");
  const Loader random(sample_config(DatasetMode::sft_episode, SamplingMode::random));
  CHECK(random.fingerprint() == "7fb6f6d4056fdaa9");
  const Loader packed(sample_config(DatasetMode::sft_packed, SamplingMode::epoch));
  CHECK(packed.fingerprint() == "65d706ca9b2659da");
}

TEST_CASE("golden: a state saved by this version resumes onto the same batches" * doctest::timeout(60)) {
  Loader loader(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  for (int i = 0; i < 3; ++i) (void)loader.get_batch("train");
  const char* const kSavedState =
      R"({"fingerprint":"53c66441628f6976","format":"tokenfeed-state","order":{"batch_sampling_mode":"epoch",)"
      R"("content.train":"cd37de84340bf9e7","content.val":"dc373433452cf580",)"
      R"("data.train":"7f075999d6a25c01","data.val":"5f259eb7ccf8851f","dataset_mode":"sft_episode",)"
      R"("episode_min_tokens":"2","epoch_drop_last":"true","epoch_seed":"1337","epoch_shuffle":"true",)"
      R"("global_batch_size":"4"},"splits":{"train":{"batch_in_epoch":3,"epoch":0,"step":3},)"
      R"("val":{"batch_in_epoch":0,"epoch":0,"step":0}},"version":1})";
  CHECK(loader.save_state() == kSavedState);

  // The literal state, loaded into a new loader, continues where the first one is.
  Loader resumed(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  resumed.load_state(kSavedState);
  CHECK(content_digest(resumed, 2) == content_digest(loader, 2));
}

TEST_CASE("golden: a state saved before layout-free episode content resumes onto the same batches" *
          doctest::timeout(60)) {
  Loader loader(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  for (int i = 0; i < 3; ++i) (void)loader.get_batch("train");
  // What the version before it saved at this point: its fingerprint hashed the shards' layout.
  const char* const kEarlierState =
      R"({"fingerprint":"7ffa449865077b53","format":"tokenfeed-state","order":{"batch_sampling_mode":"epoch",)"
      R"("content.train":"372426ed3e921ff7","content.val":"f4c80f2c070d8c6f",)"
      R"("data.train":"1c684b7ec31a553c","data.val":"2b5fc2437a5b7573","dataset_mode":"sft_episode",)"
      R"("episode_min_tokens":"2","epoch_drop_last":"true","epoch_seed":"1337","epoch_shuffle":"true",)"
      R"("global_batch_size":"4"},"splits":{"train":{"batch_in_epoch":3,"epoch":0,"step":3},)"
      R"("val":{"batch_in_epoch":0,"epoch":0,"step":0}},"version":1})";
  Loader resumed(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  resumed.load_state(kEarlierState);
  CHECK(content_digest(resumed, 2) == content_digest(loader, 2));
  // A state of another earlier fingerprint is still refused.
  std::string other = kEarlierState;
  other.replace(other.find("7ffa449865077b53"), 16, "7ffa449865077b54");
  Loader refusing(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  CHECK_THROWS_WITH_AS(refusing.load_state(other), doctest::Contains("content of the dataset's 'train' split differs"),
                       Error);
}

TEST_CASE("golden: the first batches of each mode" * doctest::timeout(60)) {
  Loader episode(sample_config(DatasetMode::sft_episode, SamplingMode::epoch));
  CHECK(content_digest(episode, 3) == "0xfef042e02e8cfad9");
  Loader random(sample_config(DatasetMode::sft_episode, SamplingMode::random));
  CHECK(content_digest(random, 3) == "0x842e1a63d95d7d49");
  Loader packed(sample_config(DatasetMode::sft_packed, SamplingMode::epoch));
  CHECK(content_digest(packed, 3) == "0x41437825cd1f8550");
}
