# Consumes the tokenfeed package the way a trainer's build would (CMakeDeps +
# find_package), then runs a program that streams batches from a dataset it writes itself.
#
# `conan create` leaves the source tree as it was: this build goes to the folder the conf
# tools.cmake.cmake_layout:test_folder names (ci/packaging.sh sets it), else to a
# temporary directory, never to test_package/build; and no CMakeUserPresets.json is
# written beside test_package/CMakeLists.txt.
import hashlib
import os
import tempfile

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class TokenfeedTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "VirtualRunEnv"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)
        if not self.conf.get("tools.cmake.cmake_layout:test_folder"):
            # One folder per source tree and user, so that runs from two clones do not mix.
            key = hashlib.sha256(os.path.abspath(self.recipe_folder).encode()).hexdigest()[:12]
            base = os.path.join(tempfile.gettempdir(), f"tokenfeed-test_package-{os.getuid()}-{key}")
            self.folders.build = os.path.join(base, self.folders.build)
            self.folders.generators = os.path.join(self.folders.build, "generators")

    def generate(self):
        CMakeDeps(self).generate()
        toolchain = CMakeToolchain(self)
        toolchain.user_presets_path = False
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure(variables={"TOKENFEED_EXPECTED_VERSION": str(self.dependencies["tokenfeed"].ref.version)})
        cmake.build()

    def test(self):
        if can_run(self):
            program = os.path.join(self.cpp.build.bindir, "test_package")
            work_dir = os.path.join(self.build_folder, "work")
            self.run(f'"{program}" "{work_dir}"', env="conanrun")
