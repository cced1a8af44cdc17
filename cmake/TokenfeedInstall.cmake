# Install rules and the CMake package: what `cmake --install` puts under the prefix, and
# the build tree exported so that a consumer can use it without installing.
#
# Installed layout (GNUInstallDirs):
#   lib/libtokenfeed.{a,so.*}                the library (static or shared, BUILD_SHARED_LIBS)
#   include/tokenfeed/*.hpp                  the public headers and the generated export.hpp
#   bin/tokenfeed                            the command, when TOKENFEED_BUILD_TOOLS is on
#   lib/cmake/tokenfeed/                     tokenfeedConfig.cmake, its version file, the
#                                            exported targets (tokenfeed::tokenfeed) and
#                                            FindSentencePiece.cmake, FindPCRE2.cmake and
#                                            Findutf8proc.cmake for find_dependency
#   lib/pkgconfig/tokenfeed.pc               pkg-config
#
# Included at the end of the top-level CMakeLists.txt, after every target exists.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TOKENFEED_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tokenfeed"
  CACHE STRING "Where tokenfeedConfig.cmake is installed, relative to the prefix")
mark_as_advanced(TOKENFEED_INSTALL_CMAKEDIR)

get_target_property(_tokenfeed_type tokenfeed TYPE)
if(_tokenfeed_type STREQUAL "STATIC_LIBRARY")
  set(TOKENFEED_PACKAGE_STATIC ON)
  set(TOKENFEED_LIBRARY_KIND static)
else()
  set(TOKENFEED_PACKAGE_STATIC OFF)
  set(TOKENFEED_LIBRARY_KIND shared)
endif()

# The packages behind the imported targets in tokenfeed's exported link interface
# (Threads::Threads -> Threads, TBB::tbb -> TBB, ...), read from the target itself so that
# the config finds exactly what the exported targets name:
#  - static: everything tokenfeed links, since the consumer's link needs it all;
#  - shared: the public dependencies, plus the private ones that are shared libraries
#    (CMake records those in IMPORTED_LINK_DEPENDENT_LIBRARIES for the linker's checks).
# Header-only private dependencies (Boost, nlohmann_json) are compiled in and never reach a
# consumer.
get_target_property(_tokenfeed_links tokenfeed LINK_LIBRARIES)
get_target_property(_tokenfeed_public_links tokenfeed INTERFACE_LINK_LIBRARIES)
set(TOKENFEED_DEPENDENCY_PACKAGES "")
foreach(_link IN LISTS _tokenfeed_links)
  if(NOT _link MATCHES "^([A-Za-z0-9_]+)::[A-Za-z0-9_]+$")
    continue()  # generator expressions: build-tree-only helpers such as the sanitizer flags
  endif()
  set(_package ${CMAKE_MATCH_1})
  set(_needed ${TOKENFEED_PACKAGE_STATIC})
  if(_link IN_LIST _tokenfeed_public_links)
    set(_needed ON)
  elseif(TARGET ${_link})
    get_target_property(_link_type ${_link} TYPE)
    if(_link_type STREQUAL "SHARED_LIBRARY")
      set(_needed ON)
    endif()
  endif()
  if(_needed)
    list(APPEND TOKENFEED_DEPENDENCY_PACKAGES ${_package})
  endif()
endforeach()
list(REMOVE_DUPLICATES TOKENFEED_DEPENDENCY_PACKAGES)
set(TOKENFEED_FIND_DEPENDENCIES "")
foreach(_package IN LISTS TOKENFEED_DEPENDENCY_PACKAGES)
  if(_package STREQUAL "OpenSSL")
    # Only libcrypto (OpenSSL::Crypto) is linked: do not require libssl of the consumer.
    string(APPEND TOKENFEED_FIND_DEPENDENCIES "find_dependency(OpenSSL COMPONENTS Crypto)\n")
  else()
    string(APPEND TOKENFEED_FIND_DEPENDENCIES "find_dependency(${_package})\n")
  endif()
endforeach()

# The library and its headers (the include directory is in the target's
# INSTALL_INTERFACE, src/CMakeLists.txt).
install(TARGETS tokenfeed
  EXPORT tokenfeedTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tokenfeed_development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tokenfeed_runtime
          NAMELINK_COMPONENT tokenfeed_development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tokenfeed_runtime)

# Only the public headers: tokenfeed/*.hpp of include/, and the generated export header.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tokenfeed
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT tokenfeed_development
  FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/tokenfeed/export.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tokenfeed
  COMPONENT tokenfeed_development)

if(TARGET tokenfeed_cli)
  install(TARGETS tokenfeed_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tokenfeed_runtime)
endif()

# The package: exported targets, config and version files.
install(EXPORT tokenfeedTargets
  NAMESPACE tokenfeed::
  FILE tokenfeedTargets.cmake
  DESTINATION ${TOKENFEED_INSTALL_CMAKEDIR}
  COMPONENT tokenfeed_development)

# 0.x versions promise nothing across minor versions; from 1.0 on, the major version is
# the compatibility line (as SOVERSION in src/CMakeLists.txt).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_tokenfeed_compat SameMinorVersion)
else()
  set(_tokenfeed_compat SameMajorVersion)
endif()
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/tokenfeedConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_tokenfeed_compat})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/tokenfeedConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tokenfeedConfig.cmake
  INSTALL_DESTINATION ${TOKENFEED_INSTALL_CMAKEDIR})

set(_tokenfeed_package_files
  ${PROJECT_BINARY_DIR}/tokenfeedConfig.cmake
  ${PROJECT_BINARY_DIR}/tokenfeedConfigVersion.cmake)
# SentencePiece, PCRE2 and utf8proc have no CMake package of their own (Debian ships only
# pkg-config): the config finds each with the module the build used, installed beside it.
# Their shared body, TokenfeedFindLibrary.cmake, goes with them.
foreach(_package IN ITEMS SentencePiece PCRE2 utf8proc)
  if(_package IN_LIST TOKENFEED_DEPENDENCY_PACKAGES)
    foreach(_module IN ITEMS Find${_package} TokenfeedFindLibrary)
      list(APPEND _tokenfeed_package_files ${PROJECT_SOURCE_DIR}/cmake/${_module}.cmake)
      configure_file(${PROJECT_SOURCE_DIR}/cmake/${_module}.cmake ${PROJECT_BINARY_DIR}/${_module}.cmake COPYONLY)
    endforeach()
  endif()
endforeach()
list(REMOVE_DUPLICATES _tokenfeed_package_files)
install(FILES ${_tokenfeed_package_files}
  DESTINATION ${TOKENFEED_INSTALL_CMAKEDIR}
  COMPONENT tokenfeed_development)

# The build tree as a package too: -Dtokenfeed_DIR=<this build directory>. The sanitizer
# interface target is exported beside the library because a static tokenfeed built with
# TOKENFEED_SANITIZE links it in the build tree.
export(TARGETS tokenfeed tokenfeed_sanitizers
  NAMESPACE tokenfeed::
  FILE ${PROJECT_BINARY_DIR}/tokenfeedTargets.cmake)

# pkg-config. Paths are relative to the .pc file's own location when the install
# directories are relative, so that the installed tree can be moved.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TOKENFEED_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TOKENFEED_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(TOKENFEED_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _tokenfeed_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _tokenfeed_pc_up "${_tokenfeed_pc_up}")
  set(TOKENFEED_PC_PREFIX "\${pcfiledir}/${_tokenfeed_pc_up}")
  set(TOKENFEED_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(TOKENFEED_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What a static tokenfeed needs at link time (pkg-config --static); a shared one resolves
# these itself. The pkg-config names of the CMake packages found above.
set(_tokenfeed_pc_names TBB=tbb pugixml=pugixml SentencePiece=sentencepiece ZLIB=zlib zstd=libzstd OpenSSL=libcrypto
  PCRE2=libpcre2-8 utf8proc=libutf8proc)
set(TOKENFEED_PC_REQUIRES_PRIVATE "")
set(TOKENFEED_PC_LIBS_PRIVATE "")
foreach(_package IN LISTS TOKENFEED_DEPENDENCY_PACKAGES)
  if(_package STREQUAL "Threads")
    string(APPEND TOKENFEED_PC_LIBS_PRIVATE " ${CMAKE_THREAD_LIBS_INIT}")
    continue()
  endif()
  set(_pc_name "")
  foreach(_pair IN LISTS _tokenfeed_pc_names)
    if(_pair MATCHES "^${_package}=(.*)$")
      set(_pc_name ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(_pc_name STREQUAL "")
    message(FATAL_ERROR "TokenfeedInstall: no pkg-config name known for the dependency ${_package}")
  endif()
  string(APPEND TOKENFEED_PC_REQUIRES_PRIVATE " ${_pc_name}")
endforeach()
string(STRIP "${TOKENFEED_PC_REQUIRES_PRIVATE}" TOKENFEED_PC_REQUIRES_PRIVATE)
string(STRIP "${TOKENFEED_PC_LIBS_PRIVATE}" TOKENFEED_PC_LIBS_PRIVATE)
if(TOKENFEED_PACKAGE_STATIC)
  set(TOKENFEED_PC_CFLAGS_EXTRA " -DTOKENFEED_STATIC_DEFINE")
else()
  set(TOKENFEED_PC_CFLAGS_EXTRA "")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tokenfeed.pc.in ${PROJECT_BINARY_DIR}/tokenfeed.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tokenfeed.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT tokenfeed_development)

unset(_tokenfeed_type)
unset(_tokenfeed_links)
unset(_tokenfeed_public_links)
unset(_link_type)
unset(_needed)
unset(_tokenfeed_pc_names)
unset(_pc_name)
unset(_tokenfeed_compat)
unset(_tokenfeed_package_files)
unset(_tokenfeed_pc_up)
