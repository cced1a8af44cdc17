// The val split of a token stream whose files index their documents (Megatron pairs,
// datatrove files) as a fraction of its documents chosen by hash (Config::val_fraction),
// the way prepare-text assigns documents (docs/pretraining.md, "Val split"), but over the
// tokens, the only thing such a dataset holds of a document:
//
//   u = the first 8 bytes of SHA-256("tokenfeed-token-split-v1\0", seed as 8 bytes
//       little-endian, the document's tokens each as 4 bytes little-endian), big-endian,
//       shifted right by 11 and scaled by 2^-53
//
// and the document is val when u < fraction. Each token is hashed as 4 bytes whatever the
// file's width, so a document stored as uint16 or as int32 lands in the same split. Both
// splits read the same files: train is the documents not chosen, val those chosen, each in
// file and index order, as runs of consecutive documents of one file (DocumentRange).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataset/token_stream.hpp"

namespace tokenfeed {

// u for a document of `count` tokens of `dtype` at `tokens` (see above).
double token_document_split_point(const std::byte* tokens, std::uint64_t count, TokenDtype dtype, std::uint64_t seed);

// The runs of documents of `files` that split `val` (true: the chosen documents; false:
// the others) holds, in order, adjacent documents of one file merged into one run and
// empty runs left out. REQUIRES: every file has document_starts.
std::vector<DocumentRange> choose_documents(std::span<const StreamFile> files, double fraction, std::uint64_t seed,
                                            bool val);

}  // namespace tokenfeed
