// bench_hf_bpe_encode: tokenfeed's native byte-level BPE (make_hf_bpe_tokenizer) over texts
// in memory, the equivalent of the `tokenizers` package's encode_batch
// (perf/hf_bpe_bench.py). The texts are read before the clock starts, then THREADS threads
// each encode every THREADS-th text into a reused id vector. Prints {"seconds", "tokens",
// "bytes"}. With IDS_OUT, also writes each text's ids as a JSON array per line (in corpus
// order), for comparing with another encoder.
//
//   bench_hf_bpe_encode CORPUS.jsonl TOKENIZER_JSON [THREADS [IDS_OUT]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_hf_bpe_encode CORPUS.jsonl TOKENIZER_JSON [THREADS [IDS_OUT]]\n");
    return 2;
  }
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  try {
    const auto tok = tokenfeed::make_hf_bpe_tokenizer(argv[2]);
    std::vector<std::string> texts;
    std::ifstream in(argv[1]);
    std::uint64_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      texts.push_back(nlohmann::json::parse(line).at("text"));
      bytes += texts.back().size();
    }
    std::vector<std::vector<std::uint32_t>> kept(argc > 4 ? texts.size() : 0);
    std::vector<std::uint64_t> tokens(static_cast<std::size_t>(threads), 0);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::vector<std::uint32_t> ids;
        for (std::size_t i = static_cast<std::size_t>(t); i < texts.size(); i += static_cast<std::size_t>(threads)) {
          ids.clear();
          tok->encode(texts[i], ids);
          tokens[static_cast<std::size_t>(t)] += ids.size();
          if (!kept.empty()) kept[i] = ids;
        }
      });
    }
    for (std::thread& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::uint64_t total = 0;
    for (const std::uint64_t n : tokens) total += n;
    if (argc > 4) {
      std::ofstream out(argv[4]);
      for (const auto& ids : kept) out << nlohmann::json(ids).dump() << '\n';
    }
    std::printf("{\"seconds\": %.6f, \"tokens\": %llu, \"bytes\": %llu}\n", seconds,
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(bytes));
  } catch (const tokenfeed::Error& e) {
    std::fprintf(stderr, "bench_hf_bpe_encode: %s\n", e.what());
    return 1;
  }
  return 0;
}
