"""read_audit_log: every complete line of an audit log is an event with its fields
unescaped; a last line cut short by a kill is reported, never taken for an event."""
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
