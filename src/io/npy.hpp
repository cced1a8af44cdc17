// NPY (numpy's array file format, version 1.0): writing C-order little-endian arrays, and
// reading an array's header (dtype, shape, order, where the data starts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tokenfeed/npy_writer.hpp"

namespace tokenfeed {

// The header of a C-order little-endian array (magic, version 1.0, the dictionary padded as
// numpy pads it). A 1-D array's header is 128 bytes whatever its length, so a file can be
// written with a placeholder length and its header rewritten in place at the end.
std::string npy_header(const std::string& descr, const std::vector<std::uint64_t>& shape);

// NpyWriter, which streams an array to a .npy file, is public (tokenfeed/npy_writer.hpp).

struct NpyHeader {
  std::string descr;                // e.g. "<u2"
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
  std::size_t data_offset = 0;      // bytes from the start of the file
};

// True when `bytes` start with the .npy magic ("\x93NUMPY"): a file without it is not a
// .npy file (perhaps a headerless memmap named .npy).
bool has_npy_magic(std::span<const std::byte> bytes) noexcept;

// Parses the header at the start of `bytes` (a mapped .npy file). Throws Error(format)
// naming `file` when the magic, version or header dictionary is invalid.
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& file);

}  // namespace tokenfeed
