# Findutf8proc: utf8proc (Debian: libutf8proc-dev), which ships a pkg-config file but no
# CMake package.
#
# Defines the imported target utf8proc::utf8proc (the library, with its include directory) and
# utf8proc_FOUND, utf8proc_VERSION.
include(${CMAKE_CURRENT_LIST_DIR}/TokenfeedFindLibrary.cmake)
tokenfeed_find_library(utf8proc libutf8proc utf8proc.h utf8proc utf8proc::utf8proc)
