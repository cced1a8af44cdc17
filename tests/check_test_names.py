#!/usr/bin/env python3
"""Fails when a doctest TEST_CASE name holds a ';'.

doctest_discover_tests makes each TEST_CASE a CTest test through a CMake list, which a ';'
splits: the name becomes two CTest tests whose --test-case filters match no test case, so
both pass without running anything. Usage: check_test_names.py TOKENFEED_TESTS_BINARY
"""
import subprocess
import sys


def main() -> int:
    listing = subprocess.run([sys.argv[1], "--list-test-cases"], check=True, capture_output=True, text=True).stdout
    names = [line for line in listing.splitlines() if line and not line.startswith(("[doctest]", "==="))]
    bad = [name for name in names if ";" in name]
    for name in bad:
        print(f"test case name with ';' (CTest would split it and run neither half): {name}")
    print(f"{len(names)} test case names, {len(bad)} with ';'")
    return 1 if bad or not names else 0


if __name__ == "__main__":
    sys.exit(main())
