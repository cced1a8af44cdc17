# utf8proc-system: Debian's libutf8proc-dev standing in for a Conan "utf8proc" package;
# tokenfeed's recipe maps it onto the utf8proc::utf8proc its CMake expects.
from conan import ConanFile


class Utf8procSystemConan(ConanFile):
    name = "utf8proc-system"
    description = "The system's utf8proc library"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libutf8proc-dev"
    header = "utf8proc.h"
    libraries = ("utf8proc",)

    def system_version(self):
        return self.system_pkg_config_version("libutf8proc")

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "utf8proc")
        self.cpp_info.set_property("cmake_target_name", "utf8proc::utf8proc")
        self.cpp_info.set_property("pkg_config_name", "libutf8proc")
