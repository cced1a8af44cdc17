// The output directory of a preparation (prepare, prepare-text): how it is named and checked,
// and how input files are named in what it records.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

// The output path without a trailing separator, made absolute.
std::filesystem::path normalized_output(const std::filesystem::path& p);

// Throws Error(config) unless `out` is absent or an empty directory.
void check_output_dir(const std::filesystem::path& out);

// An existing file's canonical path (absolute, links resolved) for the records, so that they
// name the file whatever the working directory was; the absolute path if that fails.
std::string recorded_path(const std::filesystem::path& p);

// The token dtype of a prepared dataset: `asked` when given, else uint16 when every id of the
// vocabulary fits, else uint32. Throws Error(config) when uint16 is asked for a vocabulary
// larger than 65536.
TokenDtype choose_token_dtype(std::optional<TokenDtype> asked, std::uint64_t vocab_size);

}  // namespace tokenfeed
