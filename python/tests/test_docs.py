"""The README and docs/ as a new user reads them: a short README whose examples include
what they use, links that lead somewhere, every page reachable from the README, synopses
that list every command and option `--help` does, the build options and the offline Conan
command they promise, and performance figures only where the perf harness keeps them."""
import re
import subprocess

from conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def section(text, title, level=2):
    marks = "#" * level
    start = text.index(f"\n{marks} {title}\n")
    end = text.find(f"\n{marks} ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def page(name):
    return (DOCS / name).read_text()


def code_block(text, language):
    return re.search(rf"```{language}\n(.*?)```", text, re.S).group(1)


def test_the_readme_is_a_front_door():
    """What it is, the two quickstart commands, short examples, the headline figures, links."""
    assert len(README.splitlines()) <= 210, len(README.splitlines())
    headings = re.findall(r"^## (.+)$", README, re.M)
    for wanted in ("Quickstart", "From Python", "From C++", "Performance", "Documentation",
                   "Dependencies, and why each"):
        assert wanted in headings, (wanted, headings)
    quickstart = section(README, "Quickstart")
    assert "./dev.sh sample" in quickstart and "./dev.sh test" in quickstart
    assert len(code_block(section(README, "From Python"), "python").splitlines()) <= 15
    assert len(code_block(section(README, "From C++"), "cpp").splitlines()) <= 15


def test_every_docs_page_is_linked_from_the_readme():
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", README))
    missing = sorted(p.name for p in PAGES if p.name not in linked)
    assert not missing, f"docs pages the README does not link: {missing}"


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped,
    spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path):
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    broken = []
    for source in [REPO / "README.md", *PAGES]:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path_part, _, anchor = target.partition("#")
            path = (source.parent / path_part).resolve() if path_part else source
            if not path.exists():
                broken.append(f"{source.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{source.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_cpp_snippet_includes_what_it_uses():
    snippet = code_block(section(README, "From C++"), "cpp")
    includes = set(re.findall(r"#include <(tokenfeed/[a-z_]+\.hpp)>", snippet))
    assert includes
    if "tokenfeed::version()" in snippet:
        assert includes & {"tokenfeed/version.hpp", "tokenfeed/tokenfeed.hpp"}, includes
    for header in includes:
        assert (REPO / "include" / header).exists(), header
    umbrella = (REPO / "include" / "tokenfeed" / "tokenfeed.hpp").read_text()
    for header in (REPO / "include" / "tokenfeed").glob("*.hpp"):
        if header.name not in ("tokenfeed.hpp", "export.hpp"):
            assert f'"tokenfeed/{header.name}"' in umbrella, header.name


def test_build_options_and_parallelism_are_documented():
    cmake = section(page("packaging.md"), "CMake")
    assert "-DTOKENFEED_BUILD_TESTS=OFF" in cmake and "-DTOKENFEED_BUILD_PERF=OFF" in cmake
    assert "CMAKE_BUILD_PARALLEL_LEVEL" in section(page("packaging.md"), "pip")


def test_the_offline_conan_consumer_command_passes_the_debian_profile():
    conan = section(page("packaging.md"), "Conan")
    installs = [line for line in conan.splitlines() if line.startswith("conan install")]
    assert any("ci/conan/profiles/debian-system" in line and "--no-remote" in line for line in installs), installs
    assert "not resolved" in conan


def _subcommands(cli):
    help_text = subprocess.run([cli, "--help"], capture_output=True, text=True, timeout=60).stdout
    listing = help_text[help_text.index("Subcommands:"):]
    return re.findall(r"^  ([a-z][\w-]*)\s", listing, re.M)


def test_the_cli_synopsis_lists_every_command_and_option(cli):
    synopsis = code_block(section(page("cli.md"), "Synopsis"), "")
    commands = {}
    for line in synopsis.splitlines():
        m = re.match(r"tokenfeed ([\w-]+)", line)
        if m:
            current = m.group(1)
        commands[current] = commands.get(current, "") + line
    subcommands = _subcommands(cli)
    assert len(subcommands) >= 7, subcommands
    for command in subcommands:
        assert command in commands, f"tokenfeed {command}: not in docs/cli.md's synopsis"
        help_text = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60).stdout
        options = set(re.findall(r"^\s+(--[a-z][a-z-]*)", help_text, re.M)) - {"--help"}
        missing = sorted(o for o in options if o not in commands[command])
        assert not missing, f"tokenfeed {command}: docs/cli.md's synopsis lacks {missing}"


def test_the_prepare_commands_defaults_are_one_definition(cli):
    """A default has one definition whichever door the data comes in by: `tokenfeed prepare`
    and `prepare-text` (their --help), tokenfeed.prepare / prepare_text (their signatures, and
    the argument parsers the CLI hands Hugging Face work to), and docs/cli.md's synopsis
    where it shows a value, all give the library's (tokenfeed::PrepareOptions,
    PrepareTextOptions)."""
    import inspect

    import tokenfeed
    from tokenfeed import _tokenfeed as core
    from tokenfeed import hf_prepare, text_corpus

    synopsis = code_block(section(page("cli.md"), "Synopsis"), "")
    cases = [("prepare", core._prepare_defaults(), [tokenfeed.prepare, hf_prepare.prepare],
              hf_prepare.argument_parser().parse_args(["--input", "x", "--output-dir", "y", "--hf-tokenizer", "z"])),
             ("prepare-text", core._prepare_text_defaults(), [tokenfeed.prepare_text],
              text_corpus.argument_parser().parse_args(["x", "--output-dir", "y"]))]
    assert cases[0][1]["val_split"] == 0.1 and cases[1][1]["val_split"] == 0.0005  # the library's, as documented
    assert cases[1][1]["tokenizer_impl"] == "auto" and cases[1][1]["verify_sample"] == 0.001  # issue 41's options
    for command, defaults, functions, parsed in cases:
        help_text = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60).stdout
        # Every line of the synopsis that belongs to this command (its own and its continuations).
        block = "".join(re.findall(rf"^tokenfeed {command} .*?(?=^tokenfeed |\Z)", synopsis, re.M | re.S))
        assert block, command
        for key, value in defaults.items():
            option = "--" + key.replace("_", "-")
            for function in functions:
                assert inspect.signature(function).parameters[key].default == value, (function, key)
            assert getattr(parsed, key) == value, (command, "argument parser", key)
            m = re.search(rf"^  {option} [^=\n]*=(\S+)", help_text, re.M)
            if m:
                assert type(value)(m.group(1)) == value, (command, option, m.group(1))
            else:  # prepare's --workers needs --hf-tokenizer, and CLI11 shows no default for it
                assert (command, key) == ("prepare", "workers"), (command, option)
            for shown in re.findall(rf"\[{option} ([0-9][0-9.]*)\]", block):
                assert type(value)(shown) == value, (command, option, shown)


def test_the_batch_contract_names_fields_one_way():
    """The contract says once how each language spells a field (C++ methods, Python
    properties); a name with parentheses would be wrong for Python."""
    import tokenfeed
    text = page("batch-contract.md")
    contract = text[:text.index("A trainer that only reads the episode view")]
    called = set(re.findall(r"`([a-z_]+)\(\)`", contract))
    properties = {name for name in called if not callable(getattr(tokenfeed.Batch, name, None))}
    assert not properties, f"Python properties written as calls in the batch contract: {sorted(properties)}"
    assert "in Python a\nproperty" in contract


def test_performance_figures_live_only_in_the_results_and_the_readme_table():
    """A ratio or a rate in a docs page goes stale when the code changes; perf/RESULTS*.md
    are rewritten by the benchmarks that measure them."""
    figure = re.compile(r"\b\d+\.\d+x\b|\b\d[\d,]*(\.\d+)? (batches|conversations|tokens)/s\b")
    found = [f"{p.name}: {m.group(0)}" for p in PAGES for m in figure.finditer(p.read_text())]
    assert not found, found
