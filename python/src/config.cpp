// Configs from Python: Loader(config, **overrides) and RLLoader take an XML file's path or
// a mapping of its keys, whose values are str, int, bool (numpy's integers and bool_ too),
// whole-number floats, paths, or a list of str (fields); a mixture's `mixture` and `stages`
// lists are mixture.cpp's. Loader.config gives the effective keys back as a dict of their
// texts.
#include <filesystem>
#include <string>
#include <string_view>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "mixture.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;

namespace tokenfeed_python {
namespace {

using tokenfeed::Error;
using tokenfeed::ErrorKind;

// A config value as its XML text: str, int (numpy integers too), bool (numpy's too), an
// integer-valued float, or a path.
std::string value_text(std::string_view key, nb::handle value) {
  PyObject* v = value.ptr();
  if (PyBool_Check(v)) return v == Py_True ? "true" : "false";
  if (is_instance(value, "numpy", "bool_")) return PyObject_IsTrue(v) == 1 ? "true" : "false";
  if (PyUnicode_Check(v)) return nb::cast<std::string>(value);
  if (PyLong_Check(v) || PyIndex_Check(v)) {  // int, numpy integers
    PyObject* index = PyNumber_Index(v);
    if (index == nullptr) throw nb::python_error();
    return nb::cast<std::string>(nb::str(nb::steal(index)));
  }
  if (PyFloat_Check(v) && nb::cast<bool>(value.attr("is_integer")())) {
    return nb::cast<std::string>(nb::str(nb::int_(value)));
  }
  if (key == "fields" && (PyList_Check(v) || PyTuple_Check(v))) {  // a list key: its names, comma-separated
    std::string text;
    for (nb::handle item : value) {
      if (!PyUnicode_Check(item.ptr())) {
        throw Error(ErrorKind::config, "config key '" + std::string(key) + "': expected a list of str, got " +
                                           nb::cast<std::string>(nb::repr(value)));
      }
      text += (text.empty() ? "" : ",") + nb::cast<std::string>(item);
    }
    return text;
  }
  if (nb::hasattr(value, "__fspath__"))
    return nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(value));
  throw Error(ErrorKind::config, "config key '" + std::string(key) + "': unsupported value " +
                                     nb::cast<std::string>(nb::repr(value)) +
                                     " (give a str, int, bool, path or list of str; a float only when it is a whole "
                                     "number)");
}

// Applies key/value pairs; a relative dataset_dir given from Python resolves against the
// working directory (an XML file's own keys resolve against the file's directory).
void apply_items(tokenfeed::Config& config, nb::handle mapping) {
  for (auto [k, v] : nb::borrow<nb::dict>(mapping)) {
    if (!PyUnicode_Check(k.ptr()))
      throw Error(ErrorKind::config, "config keys must be strings, got " + nb::cast<std::string>(nb::repr(k)));
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;  // absent: the default
    if (tokenfeed::python::apply_mixture_key(config, key, v, value_text)) continue;
    tokenfeed::set_config_value(config, key, value_text(key, v));
    if (key == "dataset_dir" && config.dataset_dir.is_relative()) {
      config.dataset_dir = std::filesystem::absolute(config.dataset_dir).lexically_normal();
    }
  }
}

}  // namespace

bool is_instance(nb::handle value, const char* module, const char* type) {
  const int r = PyObject_IsInstance(value.ptr(), nb::module_::import_(module).attr(type).ptr());
  if (r < 0) throw nb::python_error();
  return r == 1;
}

tokenfeed::Config config_from_python(nb::handle source, const nb::kwargs& overrides) {
  tokenfeed::Config config;
  if (PyDict_Check(source.ptr())) {
    apply_items(config, source);
  } else if (PyUnicode_Check(source.ptr()) || nb::hasattr(source, "__fspath__")) {
    const std::string path = nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(source));
    nb::gil_scoped_release release;
    config = tokenfeed::load_config_file(path);
  } else if (is_instance(source, "collections.abc", "Mapping")) {
    apply_items(config, nb::handle(reinterpret_cast<PyObject*>(&PyDict_Type))(source));  // dict(source)
  } else {
    throw nb::type_error("Loader(config): config must be a path to an XML file or a mapping (dict) of config keys");
  }
  apply_items(config, overrides);
  return config;
}

nb::dict config_to_python(const tokenfeed::Config& config) {
  nb::dict d;
  for (const auto& [key, value] : tokenfeed::config_entries(config)) d[key.c_str()] = value;
  return d;
}

}  // namespace tokenfeed_python
