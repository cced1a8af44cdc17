#include "tokenizer/pcre2_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

struct Pcre2Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int error) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(error, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// One match data and JIT stack per thread, shared by every pattern: a match needs only the
// whole match's offsets, and a JIT stack serves any compiled pattern.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (data == nullptr || stack == nullptr || context == nullptr) {
      throw Error(ErrorKind::pipeline, "PCRE2 cannot allocate its match state");
    }
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Pcre2Regex::Pcre2Regex(std::string_view pattern, bool literal, const std::string& what)
    : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL refuses PCRE2_UCP (a compile error): a literal has no classes to widen.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code_->code == nullptr) {
    throw Error(ErrorKind::config, what + ": the pattern does not compile (PCRE2: " + pcre2_message(error) +
                                       " at offset " + std::to_string(offset) + ")");
  }
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pcre2Regex::~Pcre2Regex() = default;

void Pcre2Regex::find_all(std::string_view subject, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  ThreadMatchState& state = thread_match_state();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const std::size_t n = subject.size();
  std::size_t pos = 0;
  while (pos < n) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code, s, n, pos, PCRE2_NO_UTF_CHECK, state.data, state.context)
                              : pcre2_match(code_->code, s, n, pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw Error(ErrorKind::format, "pre-tokenizer pattern failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const std::size_t begin = ov[0];
    const std::size_t end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      pos = end;
    } else {
      pos = begin + 1;
      while (pos < n && (s[pos] & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace tokenfeed
