// std::filesystem's throwing calls (status, exists, directory_iterator, file_size, ...)
// report a failure as std::filesystem::filesystem_error, whose text is the standard
// library's ("filesystem error: status: Too many levels of symbolic links [PATH]") and
// which callers catching tokenfeed::Error, the CLI's exit codes and Python's exceptions do
// not know. Each public entry point of the library (the Loader, inspect_dataset, the
// preparations, the dataset writer) runs its work through `filesystem_errors_as_io`, so
// that such a failure anywhere under it (a symbolic link loop in a dataset, a directory
// that cannot be listed) leaves as io_error_of(e) (tokenfeed/error.hpp): Error(io,
// "cannot access 'PATH': REASON").
//
// Thread-safety: stateless.
#pragma once

#include <filesystem>
#include <utility>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

// Returns f(); a std::filesystem::filesystem_error from it becomes io_error_of(e).
template <typename F>
decltype(auto) filesystem_errors_as_io(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::filesystem::filesystem_error& e) {
    throw io_error_of(e);
  }
}

}  // namespace tokenfeed
