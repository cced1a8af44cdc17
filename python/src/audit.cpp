// Binding of the audit-log reader: tokenfeed.read_audit_log is the library's own
// (tokenfeed/audit.hpp), the parser `tokenfeed audit` and the kill-soak consumer use, so
// that Python and C++ accept and refuse the same lines.
#include <filesystem>

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

nb::tuple read_audit_log(nb::handle path) {
  const std::filesystem::path file = file_path(path);
  tokenfeed::AuditLogContents contents;
  {
    nb::gil_scoped_release released;
    contents = tokenfeed::read_audit_log(file);
  }
  nb::list events;
  for (const tokenfeed::AuditEvent& event : contents.events) events.append(event_dict(event));
  nb::object torn = contents.torn_line ? nb::object(file_text(*contents.torn_line)) : nb::none();
  return nb::make_tuple(events, torn);
}

}  // namespace

void bind_audit(nb::module_& m) {
  m.def("read_audit_log", &read_audit_log, "path"_a,
        nb::sig("def read_audit_log(path: str | os.PathLike[str]) -> tuple[list[dict[str, str]], str | None]"),
        "The events of an audit log file, and its torn last line.\n\n"
        "Each complete line (ended by a newline) is one event: a dict of ``time``, ``level``,\n"
        "``action`` and the event's fields, quoted values unescaped. A last line without its\n"
        "newline was cut short (the process was killed while writing it): it is returned as the\n"
        "second item, never taken for an event; ``None`` when the file ends cleanly. A complete\n"
        "line that is not an event raises ``FormatError`` naming the file and line; a file that\n"
        "cannot be read, ``IoError``. The library's own reader (``tokenfeed audit`` reads the\n"
        "same way); bytes that are not UTF-8 come back as lone surrogates (surrogateescape).");
}

}  // namespace tokenfeed_python
