// UTF-8 text helpers for the native byte-level BPE tokenizer: validation, code point
// decoding, NFC (utf8proc) and the Unicode classes `tokenizers` uses around added tokens
// (Rust regex's \w and \s, through PCRE2 so that one Unicode table answers both).
//
// Thread-safety: free functions without shared state (the PCRE2 class patterns are compiled
// once, then only read).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tokenfeed {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or values above
// U+10FFFF); `bad_offset` is then untouched, else the offset of the first bad byte.
bool valid_utf8(std::string_view text, std::size_t& bad_offset) noexcept;

// The code point starting at `text[pos]` of valid UTF-8; `pos` moves past it.
char32_t next_code_point(std::string_view text, std::size_t& pos) noexcept;
// The start of the code point that ends at `end` (> 0) of valid UTF-8.
std::size_t previous_code_point_start(std::string_view text, std::size_t end) noexcept;

// `text` (valid UTF-8) in Normalization Form C; returns `text` itself when it holds no code
// point at or above U+0300 (every one below is NFC-stable).
std::string nfc(std::string_view text);

// Rust regex's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control) and \s (White_Space), the
// classes of `tokenizers`' single_word, lstrip and rstrip rules.
bool is_word_code_point(char32_t c);
bool is_white_space(char32_t c);

}  // namespace tokenfeed
