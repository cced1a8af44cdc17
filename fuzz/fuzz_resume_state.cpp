// The resume state text: parse_resume_state, and for every state it accepts, serializing
// and parsing again gives the same state.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "splits/resume_state.hpp"
#include "tokenfeed/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  ResumeState state;
  try {
    state = parse_resume_state(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
    return 0;
  }
  const ResumeState again = parse_resume_state(serialize_resume_state(state));
  if (again.fingerprint != state.fingerprint || again.splits.size() != state.splits.size()) std::abort();
  for (const auto& [name, pos] : state.splits) {
    const SplitPosition& p = again.splits.at(name);
    if (p.step != pos.step || p.epoch != pos.epoch || p.batch_in_epoch != pos.batch_in_epoch) std::abort();
  }
  return 0;
}
