# Warning and sanitizer flags live in INTERFACE targets that our own targets link,
# never in global flags, so a project embedding tokenfeed keeps its own settings.

add_library(tokenfeed_warnings INTERFACE)
target_compile_options(tokenfeed_warnings INTERFACE
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
  $<$<AND:$<CXX_COMPILER_ID:GNU,Clang>,$<BOOL:${TOKENFEED_WARNINGS_AS_ERRORS}>>:-Werror>)

add_library(tokenfeed_sanitizers INTERFACE)
if(TOKENFEED_SANITIZE STREQUAL "thread")
  target_compile_options(tokenfeed_sanitizers INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(tokenfeed_sanitizers INTERFACE -fsanitize=thread)
elseif(TOKENFEED_SANITIZE STREQUAL "address")
  target_compile_options(tokenfeed_sanitizers INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(tokenfeed_sanitizers INTERFACE -fsanitize=address,undefined)
elseif(NOT TOKENFEED_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TOKENFEED_SANITIZE must be empty, 'thread' or 'address', not '${TOKENFEED_SANITIZE}'")
endif()
