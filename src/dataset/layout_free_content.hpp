// The layout-free content identity of a split: what its documents (episodes) hold, in order,
// whatever files they are stored in. Two splits of the same documents in the same order,
// in any number of shards cut anywhere between documents (a one-process `prepare-text` run
// and the `--merge` of N tasks), get the same values; any other token, document boundary,
// or (episodes) mask value gives another.
//
// The canonical document stream of a split, which both values are computed over:
//   - its tokens, in document order, each as a little-endian uint32 (the file dtype does
//     not matter: uint16 and uint32 files of the same ids are the same content), without
//     any file header (a .npy's header holds its shape, which the layout decides);
//   - its documents: for an episode split, every episode's length in id order; for a token
//     stream, the offset in the stream of every document start its files index (.docs.npy,
//     a Megatron .idx, a datatrove .ds.index; a file that indexes none adds none); with
//     val_fraction, those of the documents the split holds;
//   - its counts (tokens, documents), and for an episode split with mask.bin the mask's
//     dtype and every mask value as stored (raw bytes, one per token, in document order),
//     whether or not the run maps the masks.
//
// layout_free_fingerprint(): 64 bits, cheap at open whatever the size: the counts and the
// documents hashed in full (one pass over the index, which opening reads anyway), the
// tokens (and masks) in full when the split holds at most kLayoutFreeFullTokens tokens,
// else kLayoutFreeBlocks blocks of kLayoutFreeBlockTokens tokens at evenly spaced offsets of
// the stream, the first and the last included (at most 4 MiB of tokens read). A token
// changed outside the sampled blocks of a larger split is not seen by it.
//
// layout_free_digest(): SHA-256 (hex) over every byte of the canonical stream, for
// `tokenfeed inspect --deep`: the SHA-256 of "tokenfeed-layout-free-sha256-v1", the counts,
// then the SHA-256 of the documents, of the tokens and of the masks.
//
// Thread-safety: pure functions of an opened split (whose files must not change meanwhile).
#pragma once

#include <cstdint>
#include <string>

#include "dataset/episode_dataset.hpp"
#include "dataset/token_stream.hpp"

namespace tokenfeed {

inline constexpr std::uint64_t kLayoutFreeFullTokens = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kLayoutFreeBlocks = 64;
inline constexpr std::uint64_t kLayoutFreeBlockTokens = std::uint64_t{1} << 14;

struct LayoutFreeFingerprint {
  std::uint64_t documents = 0;  // the counts, the documents and the mask dtype only
  std::uint64_t content = 0;    // all of it: documents, and tokens (and masks) in full or sampled
};

// Throws Error(io) when a mask.bin the split has but does not map cannot be mapped.
LayoutFreeFingerprint layout_free_fingerprint(const EpisodeSplit& split);
// Throws Error(io) or Error(format) when a shard's .docs.npy cannot be read.
LayoutFreeFingerprint layout_free_fingerprint(const TokenStreamSplit& split);

// The SHA-256 over every byte of the canonical stream, as 64 hex digits. Throws as above.
std::string layout_free_digest(const EpisodeSplit& split);
std::string layout_free_digest(const TokenStreamSplit& split);

}  // namespace tokenfeed
