// bench_spm_encode: SentencePiece's own encode, the baseline of prepare-text's
// --tokenizer sentencepiece: (perf/prepare_text_bench.py). The same library tokenfeed links
// (Debian's libsentencepiece), the same compiler flags; the texts are read into memory before
// the clock starts, then THREADS threads each encode every THREADS-th text with
// SentencePieceProcessor::Encode into a reused id vector. Prints {"seconds", "tokens"}.
//
//   bench_spm_encode CORPUS.jsonl MODEL [THREADS]
#include <sentencepiece_processor.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_spm_encode CORPUS.jsonl MODEL [THREADS]\n");
    return 2;
  }
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.Load(argv[2]).ok()) {
    std::fprintf(stderr, "cannot load %s\n", argv[2]);
    return 1;
  }
  std::vector<std::string> texts;
  std::ifstream in(argv[1]);
  for (std::string line; std::getline(in, line);) texts.push_back(nlohmann::json::parse(line).at("text"));
  std::vector<std::uint64_t> tokens(static_cast<std::size_t>(threads), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int> ids;
      for (std::size_t i = static_cast<std::size_t>(t); i < texts.size(); i += static_cast<std::size_t>(threads)) {
        ids.clear();
        if (!sp.Encode(texts[i], &ids).ok()) std::abort();
        tokens[static_cast<std::size_t>(t)] += ids.size();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::uint64_t total = 0;
  for (const std::uint64_t n : tokens) total += n;
  std::printf("{\"seconds\": %.6f, \"tokens\": %llu}\n", seconds, static_cast<unsigned long long>(total));
  return 0;
}
