// gen_dataset: writes a synthetic pre-tokenized dataset of any size for the benchmarks.
//
//   gen_dataset --out DIR [--episodes N] [--dtype uint16|uint32] [--shards K]
//               [--median 400] [--sigma 1.0] [--max-len 32768] [--val-episodes M] [--seed S]
//   gen_dataset --out DIR --stream-tokens N [--dtype uint16|uint32] [--seed S]
//
// Episodes (sft_episode): conversation lengths are log-normal with the given median and
// sigma (median 400 and sigma 1.0 put 0.13% of conversations past 8192 tokens), clipped to
// [2, max-len]; each conversation alternates user turns (mask 0) and assistant turns
// (mask 1) of log-normal lengths; tokens are uniform over the vocabulary. Written with the
// library's EpisodeDatasetWriter into train/ (K shards) and val/, with dataset_metadata.json.
//
// Token streams (token_stream): train.bin and val.bin (nanoGPT layout), documents of
// log-normal length separated by the end-of-text id.
//
// Stdout: one readable line, then `json: {...}`, the same statistics of what was written
// (episodes, tokens, mean, median, over 8192 and its percentage, longest, assistant-token
// share of the mask; for streams the tokens and documents) with the parameters that made
// them. perf/run.sh keeps it as $TOKENFEED_PERF_DATA/NAME.txt, and perf/report.py takes the
// dataset figures in perf/RESULTS.md from there.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tokenfeed/dataset_writer.hpp"

namespace fs = std::filesystem;
using namespace tokenfeed;

namespace {

struct Options {
  std::string out;
  std::uint64_t episodes = 50000;
  std::uint64_t val_episodes = 1000;
  std::string dtype = "uint16";
  std::uint64_t shards = 4;
  double median = 400;
  double sigma = 1.0;
  std::uint64_t max_len = 32768;
  std::uint64_t stream_tokens = 0;
  std::uint64_t seed = 1;
};

struct Vocab {
  std::uint32_t size;
  std::uint32_t eot;
};

Vocab vocab_for(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? Vocab{50257, 50256} : Vocab{151646, 151643}; }

void write_metadata(const fs::path& dir, TokenDtype dtype, bool mask) {
  const Vocab v = vocab_for(dtype);
  std::ofstream out(dir / "dataset_metadata.json");
  out << "{\"token_dtype\": \"" << to_string(dtype) << "\", " << (mask ? "\"mask_dtype\": \"uint8\", " : "")
      << "\"eot_token_id\": " << v.eot << ", \"vocab_size\": " << v.size << ", \"generator\": \"perf/gen_dataset\"}\n";
}

struct Stats {
  std::uint64_t episodes = 0, tokens = 0, over_8k = 0, max_len = 0, masked = 0;
  std::vector<std::uint32_t> lengths;  // for the median

  double median() {
    if (lengths.empty()) return 0;
    const auto mid = lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2);
    std::nth_element(lengths.begin(), mid, lengths.end());
    const double upper = *mid;
    if (lengths.size() % 2 == 1) return upper;
    return (upper + *std::max_element(lengths.begin(), mid)) / 2;
  }
};

Stats write_episodes(const fs::path& split_dir, std::uint64_t count, std::uint64_t shards, TokenDtype dtype,
                     const Options& o, std::mt19937_64& rng) {
  std::lognormal_distribution<double> length(std::log(o.median), o.sigma);
  std::lognormal_distribution<double> turn(std::log(60.0), 0.8);
  const Vocab v = vocab_for(dtype);
  // Shard boundaries by tokens: the expected total over `shards`.
  const double mean_len = o.median * std::exp(o.sigma * o.sigma / 2);
  const auto shard_tokens =
      shards <= 1 ? 0 : static_cast<std::uint64_t>(mean_len * static_cast<double>(count) / static_cast<double>(shards)) + 1;
  EpisodeDatasetWriter writer(split_dir, {dtype, true, shard_tokens});
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> mask;
  Stats s;
  for (std::uint64_t e = 0; e < count; ++e) {
    const auto n = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(length(rng)), 2, o.max_len);
    tokens.resize(n);
    mask.resize(n);
    std::uint64_t word = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i % 2 == 0) word = rng();
      tokens[i] = static_cast<std::uint32_t>((word >> (32 * (i % 2))) & 0xffffffffu) % (v.size - 1);
    }
    std::uint8_t m = 0;  // the first turn is the user's
    for (std::uint64_t i = 0; i < n;) {
      const auto len = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(turn(rng)));
      const std::uint64_t end = std::min(n, i + len);
      std::fill(mask.begin() + static_cast<std::ptrdiff_t>(i), mask.begin() + static_cast<std::ptrdiff_t>(end), m);
      m ^= 1;
      i = end;
    }
    tokens[n - 1] = v.eot;  // conversations end with the end-of-text id
    writer.add(tokens, mask);
    ++s.episodes;
    s.tokens += n;
    s.lengths.push_back(static_cast<std::uint32_t>(n));
    s.masked += static_cast<std::uint64_t>(std::count(mask.begin(), mask.end(), std::uint8_t{1}));
    s.over_8k += n > 8192 ? 1 : 0;
    s.max_len = std::max(s.max_len, n);
  }
  writer.finish();
  return s;
}

// Returns the number of documents started (end-of-text ids written).
std::uint64_t write_stream(const fs::path& file, std::uint64_t count, TokenDtype dtype, const Options& o,
                           std::mt19937_64& rng) {
  std::uint64_t documents = 0;
  std::lognormal_distribution<double> doc(std::log(o.median), o.sigma);
  const Vocab v = vocab_for(dtype);
  std::ofstream out(file, std::ios::binary);
  std::vector<std::uint16_t> b16;
  std::vector<std::uint32_t> b32;
  std::uint64_t left_in_doc = 0;
  for (std::uint64_t written = 0; written < count;) {
    const std::uint64_t chunk = std::min<std::uint64_t>(1 << 20, count - written);
    b16.resize(dtype == TokenDtype::uint16 ? chunk : 0);
    b32.resize(dtype == TokenDtype::uint32 ? chunk : 0);
    for (std::uint64_t i = 0; i < chunk; ++i) {
      std::uint32_t t;
      if (left_in_doc == 0) {
        t = v.eot;
        ++documents;
        left_in_doc = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(doc(rng)));
      } else {
        t = static_cast<std::uint32_t>(rng() % (v.size - 1));
        --left_in_doc;
      }
      if (dtype == TokenDtype::uint16) b16[i] = static_cast<std::uint16_t>(t); else b32[i] = t;
    }
    if (dtype == TokenDtype::uint16) {
      out.write(reinterpret_cast<const char*>(b16.data()), static_cast<std::streamsize>(chunk * 2));
    } else {
      out.write(reinterpret_cast<const char*>(b32.data()), static_cast<std::streamsize>(chunk * 4));
    }
    written += chunk;
  }
  return documents;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Write a synthetic tokenfeed dataset (episodes or token streams) for the benchmarks"};
  app.add_option("--out", o.out, "Output directory (created; must not hold another dataset)")->required();
  app.add_option("--episodes", o.episodes, "Train episodes")->capture_default_str();
  app.add_option("--val-episodes", o.val_episodes, "Val episodes")->capture_default_str();
  app.add_option("--dtype", o.dtype, "Token dtype")->check(CLI::IsMember({"uint16", "uint32"}))->capture_default_str();
  app.add_option("--shards", o.shards, "Train shards")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--median", o.median, "Median episode (or document) length in tokens")->capture_default_str();
  app.add_option("--sigma", o.sigma, "Log-normal sigma of the lengths")->capture_default_str();
  app.add_option("--max-len", o.max_len, "Longest episode")->capture_default_str();
  app.add_option("--stream-tokens", o.stream_tokens, "Write token streams of this many train tokens instead");
  app.add_option("--seed", o.seed, "Random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const TokenDtype dtype = o.dtype == "uint16" ? TokenDtype::uint16 : TokenDtype::uint32;
  const fs::path out(o.out);
  fs::create_directories(out);
  std::mt19937_64 rng(o.seed);
  nlohmann::json params = {{"median_param", o.median}, {"sigma", o.sigma}, {"max_len", o.max_len},
                           {"seed", o.seed},          {"dtype", o.dtype}, {"shards", o.shards}};
  if (o.stream_tokens > 0) {
    const std::uint64_t documents = write_stream(out / "train.bin", o.stream_tokens, dtype, o, rng);
    write_stream(out / "val.bin", std::max<std::uint64_t>(o.stream_tokens / 100, 1 << 16), dtype, o, rng);
    write_metadata(out, dtype, false);
    std::printf("token streams: %llu train tokens (%s, %llu documents) in %s\n",
                static_cast<unsigned long long>(o.stream_tokens), o.dtype.c_str(),
                static_cast<unsigned long long>(documents), o.out.c_str());
    nlohmann::json j = {{"kind", "token_stream"}, {"tokens", o.stream_tokens}, {"documents", documents},
                        {"median_param", o.median},   {"sigma", o.sigma},          {"seed", o.seed},
                        {"dtype", o.dtype}};
    std::printf("json: %s\n", j.dump().c_str());
    return 0;
  }
  Stats train = write_episodes(out / "train", o.episodes, o.shards, dtype, o, rng);
  if (o.val_episodes > 0) write_episodes(out / "val", o.val_episodes, 1, dtype, o, rng);
  write_metadata(out, dtype, true);
  const double episodes = static_cast<double>(std::max<std::uint64_t>(train.episodes, 1));
  const double mean = static_cast<double>(train.tokens) / episodes;
  const double median = train.median();
  const double over_pct = 100.0 * static_cast<double>(train.over_8k) / episodes;
  const double masked_pct = 100.0 * static_cast<double>(train.masked) / static_cast<double>(std::max<std::uint64_t>(train.tokens, 1));
  std::printf("episodes: %llu train (%llu tokens, mean %.0f, median %.0f, %llu over 8192 (%.2f%%), longest %llu, "
              "%.1f%% of tokens in assistant turns), %llu val, %s, %llu shards, in %s\n",
              static_cast<unsigned long long>(train.episodes), static_cast<unsigned long long>(train.tokens), mean, median,
              static_cast<unsigned long long>(train.over_8k), over_pct, static_cast<unsigned long long>(train.max_len),
              masked_pct, static_cast<unsigned long long>(o.val_episodes), o.dtype.c_str(),
              static_cast<unsigned long long>(o.shards), o.out.c_str());
  nlohmann::json j = {{"kind", "episodes"},       {"episodes", train.episodes},   {"tokens", train.tokens},
                      {"mean", mean},             {"median", median},             {"over_8192", train.over_8k},
                      {"over_8192_pct", over_pct}, {"longest", train.max_len},     {"masked_pct", masked_pct},
                      {"val_episodes", o.val_episodes}};
  j.update(params);
  std::printf("json: %s\n", j.dump().c_str());
  return 0;
}
