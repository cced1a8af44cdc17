# FindPCRE2: PCRE2's 8-bit library (Debian: libpcre2-dev), which ships a pkg-config file
# but no CMake package.
#
# Defines the imported target PCRE2::PCRE2 (the library, with its include directory) and
# PCRE2_FOUND, PCRE2_VERSION.
include(${CMAKE_CURRENT_LIST_DIR}/TokenfeedFindLibrary.cmake)
tokenfeed_find_library(PCRE2 libpcre2-8 pcre2.h pcre2-8 PCRE2::PCRE2)
