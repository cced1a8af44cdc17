# sentencepiece-system: Debian's libsentencepiece-dev standing in for a Conan
# "sentencepiece" package. It keeps the upstream recipes' CMake names
# (sentencepiece::sentencepiece); tokenfeed's recipe maps them onto the
# SentencePiece::SentencePiece its CMake expects.
from conan import ConanFile


class SentencepieceSystemConan(ConanFile):
    name = "sentencepiece-system"
    description = "The system's SentencePiece processor library"
    package_type = "shared-library"
    python_requires = "tokenfeed-system-base/1.0"
    python_requires_extend = "tokenfeed-system-base.SystemLibrary"
    apt_package = "libsentencepiece-dev"
    header = "sentencepiece_processor.h"
    libraries = ("sentencepiece",)

    def system_version(self):
        return self.system_pkg_config_version("sentencepiece")  # no version macro in the headers

    def system_package_info(self):
        self.cpp_info.set_property("cmake_file_name", "sentencepiece")
        self.cpp_info.set_property("cmake_target_name", "sentencepiece::sentencepiece")
        self.cpp_info.set_property("pkg_config_name", "sentencepiece")
        self.cpp_info.system_libs = ["pthread", "m"]
