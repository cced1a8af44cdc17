# pugixml-system: Debian's pugixml (libpugixml-dev) standing in for ConanCenter's pugixml.
from conan import ConanFile


class PugixmlSystemConan(ConanFile):
    name = "pugixml-system"
    description = "The system's pugixml, with ConanCenter's pugixml CMake names"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libpugixml-dev"
    header = "pugixml.hpp"
    libraries = ("pugixml",)

    def system_version(self):
        number = int(self.system_define("PUGIXML_VERSION"))  # 1130 for 1.13
        return f"{number // 1000}.{number % 1000 // 10}"

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "pugixml")
        self.cpp_info.set_property("cmake_target_name", "pugixml::pugixml")
        self.cpp_info.set_property("pkg_config_name", "pugixml")
