#include "tokenizer/unicode_text.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

bool valid_utf8(std::string_view text, std::size_t& bad_offset) noexcept {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    char32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      bad_offset = i;
      return false;
    }
    if (i + len > n) {
      bad_offset = i;
      return false;
    }
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) noexcept {
  const auto c = static_cast<unsigned char>(text[pos]);
  if (c < 0x80) {
    ++pos;
    return c;
  }
  const std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += len;
  return cp;
}

std::size_t previous_code_point_start(std::string_view text, std::size_t end) noexcept {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

std::string nfc(std::string_view text) {
  bool may_change = false;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0xCC) {  // 0xCC 0x80 is U+0300, the first non-stable code point
      may_change = true;
      break;
    }
  }
  if (!may_change) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    throw Error(ErrorKind::format, std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

namespace {

// An anchored one-code-point class pattern, compiled once.
class CodePointClass {
 public:
  explicit CodePointClass(const char* pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
    if (code_ == nullptr) throw Error(ErrorKind::pipeline, std::string("cannot compile ") + pattern);
  }
  ~CodePointClass() { pcre2_code_free(code_); }
  CodePointClass(const CodePointClass&) = delete;
  CodePointClass& operator=(const CodePointClass&) = delete;

  bool contains(char32_t c) const {
    char buf[4];
    const utf8proc_ssize_t n =
        utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), reinterpret_cast<utf8proc_uint8_t*>(buf));
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(buf), static_cast<PCRE2_SIZE>(n), 0,
                               PCRE2_NO_UTF_CHECK, md, nullptr);
    pcre2_match_data_free(md);
    return rc >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace

bool is_word_code_point(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  static const CodePointClass word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  return word.contains(c);
}

bool is_white_space(char32_t c) {
  // Unicode's White_Space property (PropList.txt), which Rust's \s matches.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace tokenfeed
