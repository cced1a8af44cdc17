// Helpers shared by the tests: temporary directories, tiny datasets, config builders.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tokenfeed/config.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::test {

// The spm_train executable on PATH (Debian's `sentencepiece` package), or empty.
std::filesystem::path find_spm_train();

// Trains a small BPE model (400 pieces) on tests/data/spm_corpus.txt with byte fallback and
// identity normalization (so that decoding gives back the exact text) into `dir`, and returns
// the .model file. `user_symbols` is passed as --user_defined_symbols and `control_symbols`
// as --control_symbols.
std::filesystem::path train_sentencepiece(const std::filesystem::path& spm_train, const std::filesystem::path& dir,
                                          const std::string& user_symbols, const std::string& control_symbols = "");

// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(const std::string& child) const { return path_ / child; }

 private:
  std::filesystem::path path_;
};

struct TestEpisode {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> mask;  // empty: all ones when the split has masks
};

// Writes `episodes` as a split under dataset_dir/split, in `shards` shard directories
// (episodes spread evenly, in order), or in the flat layout (the files directly in the
// split directory) when `shards` is 1, with mask.bin when `with_mask`.
void write_split(const std::filesystem::path& dataset_dir, const std::string& split,
                 const std::vector<TestEpisode>& episodes, TokenDtype dtype = TokenDtype::uint16,
                 bool with_mask = true, std::size_t shards = 1);

// Episodes whose tokens encode (episode id, position): token = 1000 * id + position + 1,
// so a row can be traced back; lengths cycle through `lengths`; mask = position parity.
std::vector<TestEpisode> numbered_episodes(std::size_t count, const std::vector<std::size_t>& lengths);

// Episodes with random lengths in [2, max_len] (from `seed`); tokens encode (id, position)
// as in numbered_episodes; masks are random (a third of the positions 0), so that weights
// and ignored labels are exercised.
std::vector<TestEpisode> random_episodes(std::size_t count, std::size_t max_len, std::uint32_t seed);

// Writes a dataset_metadata.json with the given JSON body.
void write_text(const std::filesystem::path& path, const std::string& text);
// Writes `bytes` bytes at `data` to `path` (its directories created), replacing it.
void write_raw(const std::filesystem::path& path, const void* data, std::size_t bytes);

// A config for dataset_dir with the audit log off and a fixed pad id.
Config make_config(const std::filesystem::path& dataset_dir, std::int64_t batch_size, std::int64_t block_size);

// Reads a whole file as bytes.
std::vector<char> read_bytes(const std::filesystem::path& path);

// Environment variables for its lifetime: every name of `cleared` unset, then `set` set;
// the destructor restores what was there. Not thread-safe (the environment is not).
class ScopedEnv {
 public:
  ScopedEnv(std::vector<std::string> cleared, const std::vector<std::pair<std::string, std::string>>& set);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

// How many of the whole pages inside [data, data + bytes) are resident (mincore): whether
// memory given back to the kernel (madvise) stayed away.
std::size_t resident_pages(const void* data, std::size_t bytes);

// The message of the tokenfeed::Error that `f` throws, after checking its kind (config
// unless given); fails the test when `f` throws nothing.
template <typename F>
std::string error_of(F&& f, ErrorKind expected_kind = ErrorKind::config) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == expected_kind);
    return e.what();
  }
  FAIL("expected an Error");
  return {};
}

}  // namespace tokenfeed::test
