# pcre2-system: Debian's libpcre2-dev standing in for a Conan "pcre2" package (its 8-bit
# library only, the one tokenfeed links); tokenfeed's recipe maps it onto the PCRE2::PCRE2
# its CMake expects.
from conan import ConanFile


class Pcre2SystemConan(ConanFile):
    name = "pcre2-system"
    description = "The system's PCRE2 8-bit library"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libpcre2-dev"
    header = "pcre2.h"
    libraries = ("pcre2-8",)

    def system_version(self):
        return self.system_pkg_config_version("libpcre2-8")

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "pcre2")
        self.cpp_info.set_property("cmake_target_name", "pcre2::pcre2")
        self.cpp_info.set_property("pkg_config_name", "libpcre2-8")
