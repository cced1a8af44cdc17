"""A conversation that cannot be prepared, and the reasons one is counted under: what every
stage of ``tokenfeed.prepare`` (the template, the encoder, the reader) raises for one record,
skipped and counted under ``on_error="skip"``."""

# Bad-record reasons, counted under --on-error skip (all of them recorded in the metadata).
REASONS = ("invalid_json", "bad_messages", "no_assistant", "template_error", "inconsistent_template",
           "empty_mask")


class BadRecord(Exception):
    """A conversation that cannot be prepared: ``reason`` (one of REASONS) and what is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

