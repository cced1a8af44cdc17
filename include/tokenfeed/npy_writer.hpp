// NpyWriter: writes an array to a numpy .npy file (format version 1.0, C order,
// little-endian), streamed in chunks, with the header the loader's own .npy reader accepts.
// `tokenfeed dump` writes its batches with it.
//
// Thread-safety: one writer is used by one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

// Streams an array of known shape to a .npy file, in chunks. Throws Error(io) when the file
// cannot be written, and from finish() when fewer or more bytes came than the shape holds.
class TOKENFEED_API NpyWriter {
 public:
  // `descr` is numpy's dtype string: "<i8", "<f4", "<i4", ...
  NpyWriter(const std::filesystem::path& path, std::string descr, std::vector<std::uint64_t> shape);
  ~NpyWriter();
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  void append(std::span<const std::byte> bytes);
  template <typename T>
  void append(std::span<const T> values) {
    append(std::as_bytes(values));
  }
  // Checks that exactly the announced number of bytes was written, and closes.
  void finish();

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::uint64_t expected_bytes_ = 0;
  std::uint64_t written_bytes_ = 0;
};

}  // namespace tokenfeed
