// A PCRE2 pattern compiled for UTF-8 with Unicode classes (PCRE2_UTF | PCRE2_UCP) and JIT,
// matched as Oniguruma (the engine of Hugging Face `tokenizers`) matches its pre-tokenizer
// patterns: leftmost, Perl's backtracking priority, lookahead seen only inside the subject.
//
// Thread-safety: immutable after construction; for_each_match may be called concurrently
// (each thread matches with its own match data and JIT stack).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenfeed {

class Pcre2Regex {
 public:
  // `literal`: the pattern is a plain string (a `Split` pattern given as "String").
  // Throws Error(config) naming `what` and PCRE2's message when the pattern does not compile.
  Pcre2Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // The non-empty matches of the pattern in `subject` (valid UTF-8, not checked again), left
  // to right and non-overlapping, as [begin, end) byte offsets appended to `out`. An empty
  // match moves the search on by one code point. Throws Error(format) when PCRE2 fails (its
  // backtracking or JIT stack limits).
  void find_all(std::string_view subject, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace tokenfeed
