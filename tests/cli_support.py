"""What the end-to-end tests of the `tokenfeed` command share: the command under test (the
first argument), a failure list that every check adds to, running the command, writing its
configs, and reading the .npy files it writes. Standard library only."""
import struct
import subprocess
import sys

TOKENFEED = sys.argv[1]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, cwd=None):
    return subprocess.run([TOKENFEED, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def write_config(path, dataset_dir, audit_log_dir="", **keys):
    """Writes a <training> config: dataset_dir, audit_log_dir (empty: no audit log, so tests
    leave no logs/ behind), then the other keys in their order (booleans as true/false)."""
    def text(value):
        return str(value).lower() if isinstance(value, bool) else str(value)
    keys = {"dataset_dir": dataset_dir, "audit_log_dir": audit_log_dir, **keys}
    with open(path, "w") as f:
        f.write("<training>" + "".join(f"<{k}>{text(v)}</{k}>" for k, v in keys.items()) + "</training>")


def read_npy(path):
    """(descr, shape, data bytes) of a version 1.0 .npy file, checking the layout tokenfeed promises."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:6] == b"\x93NUMPY" and raw[6] == 1, path
    (header_len,) = struct.unpack("<H", raw[8:10])
    header = eval(raw[10:10 + header_len].decode("latin1"))  # a Python dict literal, as numpy writes it
    assert not header["fortran_order"]
    assert (10 + header_len) % 64 == 0, "data must start 64-byte aligned"
    return header["descr"], header["shape"], raw[10 + header_len:]


def npy_values(path):
    """(descr, shape, values) of a .npy file of int64, int32 or float32."""
    descr, shape, data = read_npy(path)
    code = {"<i8": "q", "<i4": "i", "<f4": "f"}[descr]
    count = len(data) // struct.calcsize(code)
    return descr, shape, struct.unpack(f"<{count}{code}", data)


def finish(name):
    """Prints the summary line and exits with the test's status."""
    print(f"{name}: {len(failures)} failed")
    sys.exit(1 if failures else 0)
