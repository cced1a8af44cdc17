# zstd-system: Debian's libzstd-dev standing in for ConanCenter's zstd.
from conan import ConanFile


class ZstdSystemConan(ConanFile):
    name = "zstd-system"
    description = "The system's zstd, with ConanCenter's zstd CMake names"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libzstd-dev"
    header = "zstd.h"
    libraries = ("zstd",)

    def system_version(self):
        return self.system_pkg_config_version("libzstd")

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "zstd")
        self.cpp_info.set_property("cmake_target_name", "zstd::libzstd_shared")
        self.cpp_info.set_property("pkg_config_name", "libzstd")
