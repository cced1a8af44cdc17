// The content part of a resume fingerprint: a 64-bit hash of a split's data bytes, so that
// a state is refused by a copy of the dataset whose tokens differ though every length is
// the same (the index records, which the split's own fingerprint hashes, do not change).
//
// Cheap at open, whatever the dataset's size: the data files of the split (*.bin, *.idx,
// *.npy, in sorted path order) are read as one byte stream of S bytes; when S is at most
// kContentFullBytes (4 MiB) every byte is hashed, else kContentBlocks (64) blocks of
// kContentBlockBytes (64 KiB) at evenly spaced offsets, the first and the last included
// (4 MiB read in 64 reads). A change outside the sampled blocks of a larger dataset is not
// seen; `tokenfeed inspect --deep` checks every byte against the recorded SHA-256s.
//
// Thread-safety: a pure function of the files (which must not change while it reads).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace tokenfeed {

inline constexpr std::uint64_t kContentFullBytes = std::uint64_t{4} << 20;
inline constexpr std::uint64_t kContentBlocks = 64;
inline constexpr std::uint64_t kContentBlockBytes = std::uint64_t{64} << 10;

// The starts of `count` blocks of `length` evenly spaced over [0, total), the first at 0
// and the last ending at total: what a sampled hash reads of a stream too large to read
// whole (here, and the layout-free fingerprint's tokens). REQUIRES: total > length, count >= 2.
std::vector<std::uint64_t> evenly_spaced_blocks(std::uint64_t total, std::uint64_t length, std::uint64_t count);

// The hash of the split at `split_path`: a directory (its data files, recursively) or one
// data file (a token stream's NAME.bin). Throws Error(io) naming a file that cannot be read.
std::uint64_t content_fingerprint(const std::filesystem::path& split_path);
// The same over the files `paths` (a split of Megatron pairs placed directly in the dataset
// directory: its .bin and .idx files), each named by its path relative to `base`.
std::uint64_t content_fingerprint(const std::vector<std::filesystem::path>& paths, const std::filesystem::path& base);

}  // namespace tokenfeed
