# doctest-system: Debian's doctest-dev standing in for ConanCenter's doctest, including
# the doctest.cmake module (doctest_discover_tests) that ConanCenter's package provides.
import os

from conan import ConanFile


class DoctestSystemConan(ConanFile):
    name = "doctest-system"
    description = "The system's doctest, with ConanCenter's doctest CMake names"
    package_type = "header-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "doctest-dev"
    header = "doctest/doctest.h"

    def system_version(self):
        return ".".join(self.system_define(f"DOCTEST_VERSION_{part}") for part in ("MAJOR", "MINOR", "PATCH"))

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "doctest")
        self.cpp_info.set_property("cmake_target_name", "doctest::doctest")
        # include(doctest) finds doctest.cmake through the build directories.
        for prefix in ("/usr/lib/cmake/doctest", "/usr/local/lib/cmake/doctest"):
            if os.path.isfile(os.path.join(prefix, "doctest.cmake")):
                self.cpp_info.builddirs = [prefix]
                break
