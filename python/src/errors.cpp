// tokenfeed's exceptions in Python: one class per tokenfeed::ErrorKind (ConfigError, ...),
// all subclasses of tokenfeed.Error and of the Python exception that fits (ValueError,
// OSError, RuntimeError), made at import; a C++ tokenfeed::Error reaching Python becomes
// the class of its kind with the C++ message unchanged. ConversationError is the one
// exception: an unusable in-memory conversation given to the chat template functions, a
// ValueError (not the OSError that FormatError is for files).
#include <array>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <string>

#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;

namespace tokenfeed_python {
namespace {

using tokenfeed::Error;
using tokenfeed::ErrorKind;

constexpr std::size_t kErrorKinds = 6;  // tokenfeed::ErrorKind's enumerators

// The Python class of each ErrorKind, created at import and kept for the process.
std::array<PyObject*, kErrorKinds> g_error_classes{};
// tokenfeed.ConversationError: what the chat template functions raise for a conversation
// they cannot serialize (an argument's content, so a ValueError; kind "format").
PyObject* g_conversation_error = nullptr;

std::size_t kind_index(ErrorKind kind) { return static_cast<std::size_t>(kind); }

PyObject* new_error_class(nb::module_& m, const char* name, const char* doc, nb::handle bases, const char* kind) {
  nb::dict attrs;
  if (kind != nullptr) attrs["kind"] = kind;
  const std::string qualified = std::string("tokenfeed.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), attrs.ptr());
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

// Raises `type` with `message`, whose bytes that are not UTF-8 become \xNN escapes
// (backslashreplace): a path or a quoted record is not always UTF-8, and PyErr_SetString
// would fail on it with a UnicodeDecodeError of its own instead of the error.
void set_error(PyObject* type, const std::string& message) {
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace");
  if (text == nullptr) return;  // the decode's own error (out of memory) stays set
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

void bind_errors(nb::module_& m) {
  PyObject* base =
      new_error_class(m, "Error", "Base class of every error tokenfeed raises; `kind` names the C++ ErrorKind.",
                      nb::handle(PyExc_Exception), nullptr);
  const auto make = [&](ErrorKind kind, const char* name, PyObject* python_base, const char* doc) {
    nb::tuple bases = nb::make_tuple(nb::handle(base), nb::handle(python_base));
    g_error_classes[kind_index(kind)] = new_error_class(m, name, doc, bases, tokenfeed::to_string(kind));
  };
  make(ErrorKind::config, "ConfigError", PyExc_ValueError, "A bad configuration key or value, or malformed XML.");
  make(ErrorKind::io, "IoError", PyExc_OSError, "A file or directory that cannot be opened, read or written.");
  make(ErrorKind::format, "FormatError", PyExc_OSError,
       "A file whose content is invalid (sizes, index records, headers), or an unusable conversation.");
  make(ErrorKind::state, "StateError", PyExc_ValueError,
       "A resume state that is malformed or belongs to another dataset or config.");
  make(ErrorKind::usage, "UsageError", PyExc_ValueError, "A call made where it is not allowed.");
  make(ErrorKind::pipeline, "PipelineError", PyExc_RuntimeError,
       "A failure inside a background stage that is none of the other kinds.");
  g_conversation_error = new_error_class(
      m, "ConversationError",
      "A conversation the chat template cannot serialize (no assistant turn, a special id in the content, an id "
      "past vocab_size, an unknown role): a ValueError, as the problem is in the argument, not in a file.",
      nb::make_tuple(nb::handle(base), nb::handle(PyExc_ValueError)), tokenfeed::to_string(ErrorKind::format));

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const std::size_t i = kind_index(e.kind());
      set_error(
          i < kErrorKinds && g_error_classes[i] ? g_error_classes[i] : g_error_classes[kind_index(ErrorKind::pipeline)],
          e.what());
    } catch (const std::filesystem::filesystem_error& e) {  // one no entry point turned into tokenfeed's
      set_error(g_error_classes[kind_index(ErrorKind::io)], tokenfeed::io_error_of(e).what());
    }
  });
}

tokenfeed::Error error_from_python(const nb::python_error& e) {
  // A tokenfeed error keeps its kind; anything else is a failure of the Python code called.
  for (std::size_t i = 0; i < kErrorKinds; ++i) {
    if (g_error_classes[i] != nullptr && e.matches(g_error_classes[i])) {
      return Error(static_cast<ErrorKind>(i), std::string(nb::str(e.value()).c_str()));
    }
  }
  return Error(ErrorKind::pipeline, e.what());
}

void conversation_error(const std::string& message) {
  set_error(g_conversation_error, message);
  throw nb::python_error();
}

}  // namespace tokenfeed_python
