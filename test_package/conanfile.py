# Consumes the tokenfeed package the way a trainer's build would (CMakeDeps +
# find_package), then runs a program that streams batches from a dataset it writes itself.
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class TokenfeedTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain", "VirtualRunEnv"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure(variables={"TOKENFEED_EXPECTED_VERSION": str(self.dependencies["tokenfeed"].ref.version)})
        cmake.build()

    def test(self):
        if can_run(self):
            program = os.path.join(self.cpp.build.bindir, "test_package")
            work_dir = os.path.join(self.build_folder, "work")
            self.run(f'"{program}" "{work_dir}"', env="conanrun")
