# FindSentencePiece: the SentencePiece C++ library (Debian: libsentencepiece-dev), which
# ships a pkg-config file but no CMake package.
#
# Defines the imported target SentencePiece::SentencePiece (the library, with its include directory) and
# SentencePiece_FOUND, SentencePiece_VERSION.
include(${CMAKE_CURRENT_LIST_DIR}/TokenfeedFindLibrary.cmake)
tokenfeed_find_library(SentencePiece sentencepiece sentencepiece_processor.h sentencepiece SentencePiece::SentencePiece)
