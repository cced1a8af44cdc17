# tokenfeed-system-base: the shared code of the wrapper recipes in ci/conan/recipes/.
#
# A wrapper stands in for a ConanCenter package (through the profile's [replace_requires])
# with a library the system's package manager installed: it packages nothing, takes its
# version from the installed headers, and its package_info() points at the system's
# include and library directories, so that CMakeDeps and the graph still carry the include
# directories, libraries and CMake target names a consumer (and a static tokenfeed's
# consumer) needs. Unlike [platform_requires], the link information survives.
import glob
import os
import re
import subprocess

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration

# Debian multiarch triplets by Conan arch.
MULTIARCH = {
    "x86_64": "x86_64-linux-gnu",
    "armv8": "aarch64-linux-gnu",
    "x86": "i386-linux-gnu",
    "armv7hf": "arm-linux-gnueabihf",
    "ppc64le": "powerpc64le-linux-gnu",
    "s390x": "s390x-linux-gnu",
    "riscv64": "riscv64-linux-gnu",
}
INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


class SystemLibrary:
    """Base of a wrapper. Subclasses set `apt_package`, `header` (a header identifying the
    package, relative to the include directory), `libraries` (names as in -l, empty for a
    header-only package), and define system_version() and system_package_info()."""

    settings = "os", "arch"
    build_policy = "missing"  # the (empty) binary is made on first use
    upload_policy = "skip"    # meaningful on this machine only
    apt_package = None
    header = None
    libraries = ()

    # --- helpers ---------------------------------------------------------------------
    def _missing(self, what):
        return (f"{self.name}: {what} not found on this system; install the Debian package "
                f"{self.apt_package} (apt-get install {self.apt_package})")

    def system_include_dir(self):
        for directory in INCLUDE_DIRS:
            if os.path.isfile(os.path.join(directory, self.header)):
                return directory
        raise ConanException(self._missing(f"header <{self.header}>"))

    def system_header_text(self, header=None):
        path = os.path.join(self.system_include_dir(), header or self.header)
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def system_define(self, macro, header=None):
        """The value of `#define macro value` in the header (quotes stripped)."""
        text = self.system_header_text(header)
        match = re.search(r"^\s*#\s*define\s+" + re.escape(macro) + r"\s+(\S+)", text, re.MULTILINE)
        if not match:
            raise ConanException(f"{self.name}: no #define {macro} in <{header or self.header}>")
        return match.group(1).strip('"')

    def system_pkg_config_version(self, module):
        try:
            out = subprocess.run(["pkg-config", "--modversion", module], check=True,
                                 capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            raise ConanException(self._missing(f"pkg-config module '{module}'"))
        return out.strip()

    def _library_dirs(self):
        dirs = []
        triplet = MULTIARCH.get(str(self.settings.arch))
        for prefix in ("/usr", "/usr/local"):
            if triplet:
                dirs.append(os.path.join(prefix, "lib", triplet))
            dirs += [os.path.join(prefix, "lib64"), os.path.join(prefix, "lib")]
        return dirs

    def system_library_dir(self):
        """The one directory holding every library of the package (shared or static)."""
        for directory in self._library_dirs():
            if all(glob.glob(os.path.join(directory, f"lib{name}.so")) or
                   glob.glob(os.path.join(directory, f"lib{name}.a")) for name in self.libraries):
                return directory
        names = ", ".join(f"lib{name}" for name in self.libraries)
        raise ConanException(self._missing(f"{names} (searched {', '.join(self._library_dirs())})"))

    # --- recipe methods --------------------------------------------------------------
    def set_version(self):
        self.version = self.system_version()

    def validate(self):
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration(f"{self.name} wraps a Debian package: Linux only")
        try:
            self.system_include_dir()
            if self.libraries:
                self.system_library_dir()
        except ConanException as e:
            raise ConanInvalidConfiguration(str(e))
        found = self.system_version()
        if found != str(self.version):
            raise ConanInvalidConfiguration(
                f"{self.name}/{self.version} was exported, but the system now has {found}: "
                f"export ci/conan/recipes/{self.name} again")

    def package_info(self):
        self.cpp_info.includedirs = [self.system_include_dir()]
        self.cpp_info.bindirs = []
        self.cpp_info.resdirs = []
        if self.libraries:
            self.cpp_info.libdirs = [self.system_library_dir()]
            self.cpp_info.libs = list(self.libraries)
        else:
            self.cpp_info.libdirs = []
        self.system_package_info()


class TokenfeedSystemBase(ConanFile):
    name = "tokenfeed-system-base"
    version = "1.0"
    package_type = "python-require"
    description = "Base class of tokenfeed's CI wrappers for system packages"
