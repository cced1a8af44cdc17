# nlohmann_json-system: Debian's nlohmann-json3-dev standing in for ConanCenter's
# nlohmann_json.
from conan import ConanFile


class NlohmannJsonSystemConan(ConanFile):
    name = "nlohmann_json-system"
    description = "The system's nlohmann/json, with ConanCenter's nlohmann_json CMake names"
    package_type = "header-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "nlohmann-json3-dev"
    header = "nlohmann/json.hpp"

    def system_version(self):
        macros = "nlohmann/detail/abi_macros.hpp"  # 3.11+; older versions define them in json.hpp
        try:
            return ".".join(self.system_define(f"NLOHMANN_JSON_VERSION_{part}", macros)
                            for part in ("MAJOR", "MINOR", "PATCH"))
        except OSError:
            return ".".join(self.system_define(f"NLOHMANN_JSON_VERSION_{part}")
                            for part in ("MAJOR", "MINOR", "PATCH"))

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "nlohmann_json")
        self.cpp_info.set_property("cmake_target_name", "nlohmann_json::nlohmann_json")
        self.cpp_info.set_property("pkg_config_name", "nlohmann_json")
