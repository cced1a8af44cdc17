# boost-system: Debian's Boost headers (libboost-dev) standing in for ConanCenter's boost
# with header_only=True.
from conan import ConanFile


class BoostSystemConan(ConanFile):
    name = "boost-system"
    description = "The system's Boost headers, with ConanCenter's boost CMake names"
    package_type = "header-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libboost-dev"
    header = "boost/version.hpp"

    def system_version(self):
        number = int(self.system_define("BOOST_VERSION"))  # 107400 for 1.74.0
        return f"{number // 100000}.{number // 100 % 1000}.{number % 100}"

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "Boost")
        self.cpp_info.set_property("cmake_target_name", "Boost::headers")
        self.cpp_info.set_property("cmake_target_aliases", ["Boost::boost"])
