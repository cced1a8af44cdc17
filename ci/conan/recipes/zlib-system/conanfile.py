# zlib-system: Debian's zlib1g-dev standing in for ConanCenter's zlib.
from conan import ConanFile


class ZlibSystemConan(ConanFile):
    name = "zlib-system"
    description = "The system's zlib, with ConanCenter's zlib CMake names"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "zlib1g-dev"
    header = "zlib.h"
    libraries = ("z",)

    def system_version(self):
        return self.system_define("ZLIB_VERSION")

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "ZLIB")
        self.cpp_info.set_property("cmake_target_name", "ZLIB::ZLIB")
        self.cpp_info.set_property("pkg_config_name", "zlib")
