# openssl-system: Debian's libssl-dev standing in for ConanCenter's openssl, with its
# CMake names (find_package(OpenSSL), OpenSSL::Crypto and OpenSSL::SSL) and pkg-config
# names (libcrypto, libssl). tokenfeed uses libcrypto only.
from conan import ConanFile


class OpensslSystemConan(ConanFile):
    name = "openssl-system"
    description = "The system's OpenSSL, with ConanCenter's openssl CMake names"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libssl-dev"
    header = "openssl/opensslv.h"
    libraries = ("ssl", "crypto")

    def system_version(self):
        return ".".join(self.system_define(f"OPENSSL_VERSION_{part}") for part in ("MAJOR", "MINOR", "PATCH"))

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "OpenSSL")
        self.cpp_info.set_property("cmake_target_name", "openssl::openssl")  # the aggregate, as ConanCenter's
        self.cpp_info.set_property("cmake_find_mode", "both")
        self.cpp_info.set_property("pkg_config_name", "openssl")
        # Like ConanCenter's openssl: two components, the libraries on them, none at the root.
        include_dirs, lib_dirs = list(self.cpp_info.includedirs), list(self.cpp_info.libdirs)
        self.cpp_info.includedirs, self.cpp_info.libdirs, self.cpp_info.libs = [], [], []
        crypto = self.cpp_info.components["crypto"]
        crypto.set_property("cmake_target_name", "OpenSSL::Crypto")
        crypto.set_property("pkg_config_name", "libcrypto")
        crypto.includedirs, crypto.libdirs, crypto.bindirs, crypto.resdirs = list(include_dirs), list(lib_dirs), [], []
        crypto.libs = ["crypto"]
        crypto.system_libs = ["dl", "pthread", "rt"]
        ssl = self.cpp_info.components["ssl"]
        ssl.set_property("cmake_target_name", "OpenSSL::SSL")
        ssl.set_property("pkg_config_name", "libssl")
        ssl.includedirs, ssl.libdirs, ssl.bindirs, ssl.resdirs = list(include_dirs), list(lib_dirs), [], []
        ssl.libs = ["ssl"]
        ssl.requires = ["crypto"]
