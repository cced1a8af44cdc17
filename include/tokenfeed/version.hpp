// The library's version, as set once in the CMake project (MAJOR.MINOR.PATCH).
#pragma once

#include "tokenfeed/export.hpp"

namespace tokenfeed {

TOKENFEED_API const char* version() noexcept;

}  // namespace tokenfeed
