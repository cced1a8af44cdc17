// The library's version, as set once in the CMake project (MAJOR.MINOR.PATCH).
#pragma once

namespace tokenfeed {

const char* version() noexcept;

}  // namespace tokenfeed
