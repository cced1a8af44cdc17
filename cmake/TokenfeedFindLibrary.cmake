# tokenfeed_find_library(NAME PC_NAME HEADER LIBRARY TARGET): the body of a Find module for a
# library Debian ships with a pkg-config file but no CMake package (FindSentencePiece,
# FindPCRE2, Findutf8proc). Looks the header and library up (pkg-config's directories as
# hints), then defines NAME_FOUND, NAME_VERSION and the imported target TARGET. Installed
# beside the Find modules, which include it from their own directory.
macro(tokenfeed_find_library _name _pc_name _header _library _target)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(PC_${_name} QUIET ${_pc_name})
  endif()
  find_path(${_name}_INCLUDE_DIR ${_header}
    HINTS ${PC_${_name}_INCLUDEDIR} ${PC_${_name}_INCLUDE_DIRS})
  find_library(${_name}_LIBRARY ${_library}
    HINTS ${PC_${_name}_LIBDIR} ${PC_${_name}_LIBRARY_DIRS})
  set(${_name}_VERSION ${PC_${_name}_VERSION})
  include(FindPackageHandleStandardArgs)
  find_package_handle_standard_args(${_name}
    REQUIRED_VARS ${_name}_LIBRARY ${_name}_INCLUDE_DIR
    VERSION_VAR ${_name}_VERSION)
  if(${_name}_FOUND AND NOT TARGET ${_target})
    add_library(${_target} UNKNOWN IMPORTED)
    set_target_properties(${_target} PROPERTIES
      IMPORTED_LOCATION "${${_name}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${_name}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${_name}_INCLUDE_DIR ${_name}_LIBRARY)
endmacro()
