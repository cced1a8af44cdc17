// Binding of the audit-log reader: tokenfeed.read_audit_log is the library's own
// (tokenfeed/audit.hpp), the parser `tokenfeed audit` and the kill-soak consumer use, so
// that Python and C++ accept and refuse the same lines.
#include <cstdint>
#include <filesystem>
#include <optional>

#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "tokenfeed/audit.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

// An event as Python's dict: time, level, action, then its fields in order.
nb::dict event_dict(const tokenfeed::AuditEvent& event) {
  nb::dict out;
  out["time"] = file_text(event.time);
  out["level"] = file_text(event.level);
  out["action"] = file_text(event.action);
  for (const auto& [key, value] : event.fields) out[file_text(key)] = file_text(value);
  return out;
}

// The next event of `reader` with the GIL released while the file is read, or nullopt.
std::optional<tokenfeed::AuditEvent> next_event(tokenfeed::AuditLogReader& reader) {
  nb::gil_scoped_release released;
  return reader.next();
}

nb::object torn_text(const tokenfeed::AuditLogReader& reader) {
  const auto& torn = reader.torn_line();
  return torn ? nb::object(file_text(torn->text)) : nb::none();
}

nb::tuple read_audit_log(nb::handle path) {
  tokenfeed::AuditLogReader reader(file_path(path));
  nb::list events;
  while (const std::optional<tokenfeed::AuditEvent> event = next_event(reader)) events.append(event_dict(*event));
  return nb::make_tuple(events, torn_text(reader));
}

// iter_audit_log's iterator: the reader, handing out one dict per event.
class AuditLogIterator {
 public:
  explicit AuditLogIterator(nb::handle path) : reader_(file_path(path)) {}

  nb::dict next() {
    std::optional<tokenfeed::AuditEvent> event = next_event(reader_);
    if (!event) throw nb::stop_iteration();
    return event_dict(*event);
  }
  nb::object torn_line() const { return torn_text(reader_); }
  std::uint64_t torn_line_bytes() const {
    const auto& torn = reader_.torn_line();
    return torn ? torn->bytes : 0;
  }

 private:
  tokenfeed::AuditLogReader reader_;
};

}  // namespace

void bind_audit(nb::module_& m) {
  m.def("read_audit_log", &read_audit_log, "path"_a,
        nb::sig("def read_audit_log(path: str | os.PathLike[str]) -> tuple[list[dict[str, str]], str | None]"),
        "The events of an audit log file, and its torn last line.\n\n"
        "Each complete line (ended by a newline) is one event: a dict of ``time``, ``level``,\n"
        "``action`` and the event's fields, quoted values unescaped. A last line without its\n"
        "newline was cut short (the process was killed while writing it): it is returned as the\n"
        "second item (its first 16 MiB), never taken for an event; ``None`` when the file ends\n"
        "cleanly. A complete line that is not an event, or longer than 16 MiB, raises\n"
        "``FormatError`` naming the file and line; a file that cannot be read, ``IoError``. The\n"
        "library's own reader (``tokenfeed audit`` reads the same way); bytes that are not UTF-8\n"
        "come back as lone surrogates (surrogateescape). Holds every event: for a large log,\n"
        "``iter_audit_log``.");

  nb::class_<AuditLogIterator>(m, "AuditLogIterator",
                               "The events of an audit log, one dict at a time (``iter_audit_log``).")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &AuditLogIterator::next)
      .def_prop_ro("torn_line", &AuditLogIterator::torn_line, nb::sig("def torn_line(self) -> str | None"),
                   "Once the iterator is exhausted: the torn last line (its first 16 MiB), or ``None``.")
      .def_prop_ro("torn_line_bytes", &AuditLogIterator::torn_line_bytes,
                   "Once the iterator is exhausted: the torn last line's length in bytes (0 without one).");
  m.def(
      "iter_audit_log", [](nb::handle path) { return new AuditLogIterator(path); }, "path"_a,
      nb::rv_policy::take_ownership, nb::sig("def iter_audit_log(path: str | os.PathLike[str]) -> AuditLogIterator"),
      "The events of an audit log file one at a time, as ``read_audit_log`` returns them, in\n"
      "memory bounded by the line limit whatever the file's size; the iterator's ``torn_line``\n"
      "and ``torn_line_bytes`` tell the torn last line once it is exhausted. The same errors\n"
      "as ``read_audit_log``, raised when the line is reached.");
}

}  // namespace tokenfeed_python
