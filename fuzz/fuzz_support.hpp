// Shared by the fuzz targets: a per-process scratch directory (files that the parsers under
// test read by path are written there), and a split of the fuzzer's bytes into parts.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/log.hpp"

namespace tokenfeed::fuzz {

// Silences the library's log lines for the whole run (refusals are the fuzzer's daily
// bread): call at the top of LLVMFuzzerTestOneInput; only the first call does anything.
inline void quiet_logs() {
  static const bool quiet = [] {
    set_log_handler([](LogLevel, std::string_view) {});
    return true;
  }();
  (void)quiet;
}

// A directory of this process under the temp dir, emptied on first use.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("tokenfeed_fuzz_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The input cut at each occurrence of `separator` (at most `max_parts` parts; the last holds
// the rest), so that one fuzz input can describe several files.
inline std::vector<std::string_view> split_parts(const std::uint8_t* data, std::size_t size, std::string_view separator,
                                                 std::size_t max_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const auto at = rest.find(separator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + separator.size());
  }
  parts.push_back(rest);
  while (parts.size() < max_parts) parts.emplace_back();
  return parts;
}

}  // namespace tokenfeed::fuzz
