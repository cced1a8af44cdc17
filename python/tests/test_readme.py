"""The README as a new user reads it: the Python quickstart first, the C++ snippet's
includes, the build options it promises, the offline Conan command, and synopses that list
every option the commands take."""
import re
import subprocess

from conftest import REPO

README = (REPO / "README.md").read_text()


def section(title):
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else len(README)]


def test_the_python_quickstart_comes_before_cmake_and_conan():
    headings = re.findall(r"^## (.+)$", README, re.M)
    python = headings.index("Using it from Python")
    assert python < headings.index("Using tokenfeed from CMake") and python < headings.index("Using tokenfeed from Conan")
    assert python < headings.index("Using it from C++")


def test_the_cpp_snippet_includes_what_it_uses():
    snippet = re.search(r"```cpp\n(.*?)```", section("Using it from C++"), re.S).group(1)
    includes = set(re.findall(r"#include <(tokenfeed/[a-z_]+\.hpp)>", snippet))
    if "tokenfeed::version()" in snippet:
        assert includes & {"tokenfeed/version.hpp", "tokenfeed/tokenfeed.hpp"}, includes
    for header in includes:
        assert (REPO / "include" / header).exists(), header
    umbrella = (REPO / "include" / "tokenfeed" / "tokenfeed.hpp").read_text()
    for header in (REPO / "include" / "tokenfeed").glob("*.hpp"):
        if header.name not in ("tokenfeed.hpp", "export.hpp"):
            assert f'"tokenfeed/{header.name}"' in umbrella, header.name


def test_build_options_and_parallelism_are_documented():
    cmake = section("Using tokenfeed from CMake")
    assert "-DTOKENFEED_BUILD_TESTS=OFF" in cmake and "-DTOKENFEED_BUILD_PERF=OFF" in cmake
    assert "CMAKE_BUILD_PARALLEL_LEVEL" in section("Using it from Python")


def test_the_offline_conan_consumer_command_passes_the_debian_profile():
    conan = section("Using tokenfeed from Conan")
    installs = [line for line in conan.splitlines() if line.startswith("conan install")]
    assert any("ci/conan/profiles/debian-system" in line and "--no-remote" in line for line in installs), installs
    assert "not resolved" in conan


def test_synopses_list_every_option(cli):
    synopsis = re.search(r"## The `tokenfeed` command\n\n```\n(.*?)```", README, re.S).group(1)
    commands = {}
    for line in synopsis.splitlines():
        m = re.match(r"tokenfeed ([\w-]+)", line)
        if m:
            current = m.group(1)
        commands[current] = commands.get(current, "") + line
    for command in ("run", "dump", "inspect", "prepare", "prepare-text", "bench", "show"):
        assert command in commands, command
        help_text = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60).stdout
        options = set(re.findall(r"^\s+(--[a-z][a-z-]*)", help_text, re.M)) - {"--help"}
        missing = sorted(o for o in options if o not in commands[command])
        assert not missing, f"tokenfeed {command}: the README synopsis lacks {missing}"


def test_the_batch_contract_names_fields_one_way():
    """The contract says once how each language spells a field (C++ methods, Python
    properties); a name with parentheses would be wrong for Python."""
    import tokenfeed
    start = README.index("### The batch contract")
    contract = README[start:README.index("A trainer that only reads the episode view", start)]
    called = set(re.findall(r"`([a-z_]+)\(\)`", contract))
    properties = {name for name in called if not callable(getattr(tokenfeed.Batch, name, None))}
    assert not properties, f"Python properties written as calls in the batch contract: {sorted(properties)}"
    assert "in Python a\nproperty" in contract
