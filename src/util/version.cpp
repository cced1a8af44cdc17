#include "tokenfeed/version.hpp"

namespace tokenfeed {

const char* version() noexcept { return TOKENFEED_VERSION_STRING; }

}  // namespace tokenfeed
