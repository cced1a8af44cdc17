# Chat formatting, tokenizers and `tokenfeed prepare` (issue 5), included at the end of
# src/CMakeLists.txt.
find_package(SentencePiece REQUIRED)  # cmake/FindSentencePiece.cmake (pkg-config; Debian ships no CMake config)
find_package(ZLIB REQUIRED)
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)  # SHA-256 (libcrypto's EVP interface) only

target_sources(tokenfeed_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chat_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/conversation_jsonl.cpp
  ${CMAKE_CURRENT_LIST_DIR}/line_reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prepare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sentencepiece_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sha256.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bytes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_common.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_sentencepiece.cpp)
target_link_libraries(tokenfeed_objects PRIVATE SentencePiece::SentencePiece ZLIB::ZLIB OpenSSL::Crypto)

# The libraries built from those objects link their dependencies themselves.
if(TARGET tokenfeed_internal)
  target_link_libraries(tokenfeed_internal PUBLIC SentencePiece::SentencePiece ZLIB::ZLIB OpenSSL::Crypto)
endif()
if(TARGET tokenfeed)
  target_link_libraries(tokenfeed PRIVATE SentencePiece::SentencePiece ZLIB::ZLIB OpenSSL::Crypto)
endif()
