"""The `tokenfeed` console script that `pip install .` makes: runs the `tokenfeed` command
built into the package (tokenfeed/_bin/tokenfeed) with the same arguments, in place of
this process, so its exit status and signals are the command's own. The command hands
--hf-tokenizer and parquet work to Python: to this interpreter, the one pip installed the
command for (``TOKENFEED_COMMAND_PYTHON``), not to whichever python3 comes first on PATH;
``TOKENFEED_PYTHON`` still wins."""
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
    env = dict(os.environ)
    if sys.executable:
        env["TOKENFEED_COMMAND_PYTHON"] = sys.executable
    os.execve(exe, [str(exe), *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
