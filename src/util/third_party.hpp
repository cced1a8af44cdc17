// The boundary with third-party libraries that report failures by throwing their own
// exceptions (SentencePiece's darts trie builder throws on a zero-length piece, for one):
// whatever they throw leaves tokenfeed as tokenfeed::Error, so that callers catching
// tokenfeed::Error, the CLI's exit codes and the Python exceptions hold for every input.
//
// Thread-safety: stateless.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

// Returns f(). A tokenfeed::Error and std::bad_alloc pass unchanged; any other exception
// becomes Error(kind, context + ": " + its message).
template <typename F>
decltype(auto) call_third_party(ErrorKind kind, const std::string& context, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(kind, context + ": " + e.what());
  } catch (...) {
    throw Error(kind, context + ": an unknown exception from a library");
  }
}

}  // namespace tokenfeed
