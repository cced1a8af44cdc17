"""read_audit_log: every complete line of an audit log is an event with its fields
unescaped; a last line cut short by a kill is reported, never taken for an event."""
import subprocess
import sys

import pytest

import tokenfeed
from conftest import base_keys


def audit_file(directory):
    files = sorted(directory.iterdir())
    assert len(files) == 1, files
    return files[0]


def test_events_round_trip_and_a_torn_line_is_reported(sft_dir, tmp_path):
    log_dir = tmp_path / "audit\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged"
    loader = tokenfeed.Loader(base_keys(sft_dir, audit_log_dir=str(log_dir)))
    for _ in range(3):
        loader.get_batch()
    loader.close()
    path = audit_file(log_dir)
    events, torn = tokenfeed.read_audit_log(path)
    assert torn is None
    assert [e["action"] for e in events][:2] == ["dataset_load", "epoch_start"]
    assert events[0]["audit_log_dir"] == str(log_dir)  # the newline came back, inside its field
    assert not any(e["action"] == "forged" for e in events)

    with open(path, "a") as f:
        f.write('2026-01-01T00:00:00.000Z | TRAINING | INFO | action=epoch_complete | split="tra')
    again, torn = tokenfeed.read_audit_log(path)
    assert again == events and torn.startswith("2026-01-01T00:00:00.000Z | TRAINING")

    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "not an event\n")
    path.write_text("".join(lines))
    with pytest.raises(tokenfeed.FormatError, match="line 2 is not an audit event"):
        tokenfeed.read_audit_log(path)


def test_the_library_reader_decides_what_an_event_is(tmp_path):
    """read_audit_log is the C++ reader that `tokenfeed audit` uses: a line its writer could
    not have made (action not first, a plain value with a quote, a bad escape) is refused
    alike, and bytes that are not UTF-8 come back as lone surrogates."""
    head = "2026-01-01T00:00:00.000Z | TRAINING | INFO | "
    path = tmp_path / "audit.log"
    path.write_bytes((head + 'action=epoch_start | split=train | note="caf\\xe9 \\xff"\n').encode())
    events, torn = tokenfeed.read_audit_log(path)
    assert torn is None and events == [{"time": "2026-01-01T00:00:00.000Z", "level": "INFO",
                                        "action": "epoch_start", "split": "train", "note": "caf\udce9 \udcff"}]
    for forged in ("split=train | action=epoch_start", 'action=epoch_start | split=tr"ain',
                   'action=epoch_start | split="tr\\qain"'):
        path.write_text(head + forged + "\n")
        with pytest.raises(tokenfeed.FormatError, match="line 1 is not an audit event"):
            tokenfeed.read_audit_log(path)
    with pytest.raises(tokenfeed.IoError):
        tokenfeed.read_audit_log(tmp_path / "missing.log")


def test_iter_audit_log_streams_the_same_events_and_reports_a_long_torn_line(tmp_path):
    """iter_audit_log yields read_audit_log's events one by one; a torn last line longer than
    the line limit is reported with its length, not refused."""
    head = "2026-01-01T00:00:00.000Z | TRAINING | INFO | "
    path = tmp_path / "audit.log"
    body = "".join(f"{head}action=epoch_start | split=train | epoch={i}\n" for i in range(1000))
    path.write_text(body)
    events, torn = tokenfeed.read_audit_log(path)
    it = tokenfeed.iter_audit_log(path)
    assert iter(it) is it
    assert list(it) == events and len(events) == 1000
    assert it.torn_line is None and it.torn_line_bytes == 0 and torn is None

    limit = 16 << 20
    with open(path, "a") as f:
        f.write(head + "x" * limit)
    it = tokenfeed.iter_audit_log(path)
    assert sum(1 for _ in it) == 1000
    assert it.torn_line_bytes == len(head) + limit
    assert len(it.torn_line) == limit and it.torn_line.startswith(head)
    events, torn = tokenfeed.read_audit_log(path)
    assert len(events) == 1000 and torn == it.torn_line

    path.write_text(body[: len(body) // 2].rsplit("\n", 1)[0] + "\nforged\n")
    it = tokenfeed.iter_audit_log(path)
    with pytest.raises(tokenfeed.FormatError, match="is not an audit event"):
        for _ in it:
            pass


def test_tokenfeed_audit_streams_a_large_log(cli, tmp_path):
    """`tokenfeed audit` holds what it prints, not the file: a 40 MB log (120,000 events over
    3 epochs) is read in a small fraction of its size (the whole-file reader peaked at 93 MB
    on it, without the torn line), and a torn last line past the 16 MiB line limit is reported, exit 0."""
    head = "2026-01-01T00:00:00.000Z | TRAINING | INFO | "
    ids = '"[' + ", ".join(str(i) for i in range(60)) + ']"'
    path = tmp_path / "audit.log"
    line = f"{head}action=epoch_start | split=train | epoch={{}} | seed=42 | first_episode_ids={ids}\n"
    with open(path, "w") as f:
        for i in range(120_000):
            f.write(line.format(i % 3))
        f.write(head + "x" * (17 << 20))
    assert path.stat().st_size > 40e6
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)")
    result = subprocess.run([sys.executable, "-c", probe, cli, "audit", str(path)], capture_output=True, text=True,
                            timeout=120)
    first, rest = result.stdout.split("\n", 1)
    code, peak_kib = map(int, first.split())
    assert code == 0, result.stdout + result.stderr
    assert "events     120000: epoch_start 120000" in rest
    assert "epochs     3" in rest
    assert f"torn       line 120001 was cut short (the process was killed while writing it), {len(head) + (17 << 20)} bytes" in rest
    # 16 MiB of the torn line are kept; the events themselves must not add up.
    assert peak_kib < 48 * 1024, peak_kib
