"""The `tokenfeed` console script that `pip install .` makes: runs the `tokenfeed` command
built into the package (tokenfeed/_bin/tokenfeed) with the same arguments, in place of
this process, so its exit status and signals are the command's own."""
import os
import sys
from pathlib import Path


def executable() -> Path:
    """The command built into the installed package."""
    return Path(__file__).resolve().parent / "_bin" / "tokenfeed"


def main() -> None:
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.exit(f"tokenfeed: the command is not in this installation ({exe} is missing); "
                 "reinstall the package with pip install .")
    os.execv(exe, [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()
