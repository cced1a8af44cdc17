"""What the package's command-line programs (``tokenfeed prepare --hf-tokenizer``,
``tokenfeed prepare-text`` for --hf-tokenizer and parquet) share: stopping on a signal, and
the exit status of each error, as the C++ command gives them."""
import os
import signal
import sys
from typing import Any, Callable, Tuple

from ._tokenfeed import ConfigError, FormatError, IoError, UsageError


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def clear_progress() -> None:
    """Erases a progress bar drawn on a terminal."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")


def fail(e: BaseException, status: int) -> int:
    clear_progress()
    sys.stderr.write(f"tokenfeed: error: {e}\n")
    return status


def run_command(run: Callable[[], Any], interrupted: Callable[[str], str]) -> Tuple[int, Any]:
    """Runs ``run()`` with SIGINT, SIGTERM and SIGHUP raising inside it. Returns (0, its
    result), or the exit status of its error: 2 (a bad option or value, a missing package), 3
    (a file that cannot be read or written), 4 (bad input), 6 (anything else). On a signal,
    prints ``interrupted(SIGNAME)`` and ends the process by that signal."""

    def on_signal(signum: int, frame: Any) -> None:
        raise _Stop(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return 0, run()
    except _Stop as e:
        clear_progress()
        sys.stderr.write(f"tokenfeed: error: {interrupted(signal.Signals(e.signum).name)}\n")
        sys.stderr.flush()
        signal.signal(e.signum, signal.SIG_DFL)
        os.kill(os.getpid(), e.signum)
        return 128 + e.signum, None
    except (ConfigError, UsageError) as e:
        return fail(e, 2), None
    except IoError as e:
        return fail(e, 3), None
    except FormatError as e:
        return fail(e, 4), None
    except OSError as e:
        return fail(e, 3), None
    except Exception as e:  # a failure of the run itself, not of its input
        return fail(e, 6), None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

