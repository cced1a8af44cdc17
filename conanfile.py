# Conan 2 recipe for tokenfeed: the library (static or shared) with its public headers.
#
#   conan create . -o "&:shared=True"         build the package, then run test_package/
#
# The version is the CMake project version (CMakeLists.txt), read at export time.
# Tests, the command and the benchmarks are not built; pass
# `-c tools.build:skip_test=False` to build and run the unit tests during `conan create`.
# ci/packaging.sh builds this recipe offline against Debian's packages (ci/conan/).
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.env import Environment
from conan.tools.files import load, rmdir

required_conan_version = ">=2.0"


class TokenfeedConan(ConanFile):
    name = "tokenfeed"
    description = ("Fixed-shape token batches for LLM training loops from memory-mapped "
                   "datasets, prepared ahead through a oneTBB flow graph")
    topics = ("llm", "training", "dataloader", "tokens", "mmap")
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False], "fPIC": [True, False]}
    default_options = {
        "shared": False,
        "fPIC": True,
        # tokenfeed uses only header-only Boost libraries (lockfree).
        "boost/*:header_only": True,
    }
    exports_sources = ("CMakeLists.txt", "cmake/*", "include/*", "src/*", "tests/*",
                       "!tests/consumers/*")

    def set_version(self):
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(\s*tokenfeed\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
        self.version = match.group(1)

    def config_options(self):
        if self.settings.os == "Windows":
            del self.options.fPIC

    def configure(self):
        if self.options.shared:
            self.options.rm_safe("fPIC")

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # The ranges admit ConanCenter's current versions and Debian bookworm's
        # (oneTBB 2021.8, pugixml 1.13, Boost 1.74, nlohmann_json 3.11.2,
        # SentencePiece 0.1.97, zlib 1.2.13, zstd 1.5.4, OpenSSL 3.0, PCRE2 10.42, utf8proc 2.8). None of them appears in
        # tokenfeed's public headers, so none is a transitive header dependency.
        self.requires("onetbb/[>=2021.8.0 <2023]")
        self.requires("pugixml/[>=1.13 <2]")
        self.requires("boost/[>=1.74.0 <2]")
        self.requires("nlohmann_json/[>=3.10.0 <4]")
        self.requires("sentencepiece/[>=0.1.97 <1]")
        self.requires("zlib/[>=1.2.11 <2]")
        self.requires("zstd/[>=1.4 <2]")  # .zst input of prepare-text
        self.requires("openssl/[>=3.0.0 <4]")  # libcrypto's SHA-256 (the EVP interface of 3.x)
        self.requires("pcre2/[>=10.40 <11]")  # the native BPE's pre-tokenizer patterns (binary properties: 10.40)
        self.requires("utf8proc/[>=2.6 <3]")  # NFC for the native BPE

    def build_requirements(self):
        self.test_requires("doctest/[>=2.4.9 <3]")

    def validate(self):
        check_min_cppstd(self, 20)

    @property
    def _run_unit_tests(self):
        # Off unless asked for explicitly: the package is the library alone.
        return self.conf.get("tools.build:skip_test", check_type=bool) is False

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["TOKENFEED_BUILD_TESTS"] = self._run_unit_tests
        tc.cache_variables["TOKENFEED_BUILD_TOOLS"] = False
        tc.cache_variables["TOKENFEED_BUILD_PERF"] = False
        tc.cache_variables["TOKENFEED_INSTALL"] = True
        tc.generate()

        deps = CMakeDeps(self)
        # tokenfeed's CMake looks SentencePiece up as find_package(SentencePiece) with the
        # target SentencePiece::SentencePiece (cmake/FindSentencePiece.cmake); map whatever
        # package provides "sentencepiece" onto those names.
        sentencepiece = self.dependencies["sentencepiece"].ref.name
        deps.set_property(sentencepiece, "cmake_file_name", "SentencePiece")
        deps.set_property(sentencepiece, "cmake_target_name", "SentencePiece::SentencePiece")
        # The same for PCRE2 (its 8-bit library) and utf8proc (cmake/FindPCRE2.cmake,
        # cmake/Findutf8proc.cmake).
        for dep, file_name, target in (("pcre2", "PCRE2", "PCRE2::PCRE2"), ("utf8proc", "utf8proc", "utf8proc::utf8proc")):
            name = self.dependencies[dep].ref.name
            deps.set_property(name, "cmake_file_name", file_name)
            deps.set_property(name, "cmake_target_name", target)
        deps.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()
        if self._run_unit_tests:
            env = Environment()
            env.define("CTEST_OUTPUT_ON_FAILURE", "1")
            with env.vars(self).apply():
                cmake.test()

    def package(self):
        cmake = CMake(self)
        cmake.install()
        # Conan generates the consumers' CMake and pkg-config files from package_info().
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "tokenfeed")
        self.cpp_info.set_property("cmake_target_name", "tokenfeed::tokenfeed")
        self.cpp_info.set_property("pkg_config_name", "tokenfeed")
        self.cpp_info.libs = ["tokenfeed"]
        if not self.options.shared:
            self.cpp_info.defines = ["TOKENFEED_STATIC_DEFINE"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
