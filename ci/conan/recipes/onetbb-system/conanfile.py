# onetbb-system: Debian's oneTBB (libtbb-dev) standing in for ConanCenter's onetbb.
from conan import ConanFile


class OnetbbSystemConan(ConanFile):
    name = "onetbb-system"
    description = "The system's oneTBB, with ConanCenter's onetbb CMake names"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libtbb-dev"
    header = "oneapi/tbb/version.h"
    libraries = ("tbb",)

    def system_version(self):
        return ".".join(self.system_define(f"TBB_VERSION_{part}") for part in ("MAJOR", "MINOR", "PATCH"))

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "TBB")
        self.cpp_info.set_property("cmake_target_name", "TBB::tbb")
        self.cpp_info.set_property("pkg_config_name", "tbb")
        self.cpp_info.system_libs = ["dl", "rt", "pthread"]
