#include "mixture.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "config/mixture_schema.hpp"
#include "config/shape_schedule_schema.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;

namespace tokenfeed::python {
namespace {

std::string repr_of(nb::handle value) { return nb::cast<std::string>(nb::repr(value)); }

// A float's exact text: its shortest round-trip decimal (repr), so 0.1 is "0.1", and a whole
// number without ".0". The repr of the float value itself: a subclass's may print more
// (numpy 2's float64 prints "np.float64(0.5)").
std::string float_text(nb::handle value) {
  const nb::object exact = nb::steal(PyFloat_FromDouble(PyFloat_AsDouble(value.ptr())));
  if (!exact.is_valid()) throw nb::python_error();
  std::string text = repr_of(exact);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

// A weight's text for set_mixture_weights: a str as it is, a float by float_text, an
// integer exactly; anything else (bool included) is refused, naming `where`.
std::string number_text(const std::string& where, nb::handle value) {
  PyObject* v = value.ptr();
  if (PyBool_Check(v)) throw Error(ErrorKind::config, where + ": weight must be a number, got " + repr_of(value));
  if (PyUnicode_Check(v)) return nb::cast<std::string>(value);
  if (PyFloat_Check(v)) return float_text(value);
  if (PyLong_Check(v) || PyIndex_Check(v)) return nb::cast<std::string>(nb::str(value));
  throw Error(ErrorKind::config, where + ": weight must be a number, got " + repr_of(value));
}

// A mixture value as the text XML would give: a float by float_text (weights, max_epochs and
// temperatures keep their exact decimal), anything else by the config keys' rule. What the
// text means, and whether it is right, is the schema's (config/mixture_schema).
std::string mixture_text(const std::string& where, const std::string& key, nb::handle value,
                         const ValueText& value_text) {
  if (PyFloat_Check(value.ptr())) return float_text(value);
  try {
    return value_text(key, value);
  } catch (const Error& e) {
    throw Error(ErrorKind::config, where.empty() ? std::string(e.what()) : where + ": " + e.what());
  }
}

nb::list as_list(const char* key, nb::handle value) {
  if (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())) {
    throw Error(ErrorKind::config, std::string("config key '") + key + "' must be a list, got " + repr_of(value));
  }
  return nb::list(value);
}

nb::dict as_dict(const std::string& what, nb::handle value) {
  if (!PyDict_Check(value.ptr())) throw Error(ErrorKind::config, what + " must be a dict, got " + repr_of(value));
  return nb::borrow<nb::dict>(value);
}

// Source `index` of the `mixture` list, named as the schema names it (by its name when the
// dict has a str one).
std::string source_where(std::size_t index, nb::handle item) {
  PyObject* name = PyDict_Check(item.ptr()) ? PyDict_GetItemString(item.ptr(), "name") : nullptr;
  if (name == nullptr || !PyUnicode_Check(name)) return mixture_source_where(index, "");
  return mixture_source_where(index, nb::cast<std::string>(nb::handle(name)));
}

// A dict of the `mixture` or `stages` list as the schema's record: its items as keys (a None
// value left out: absent), and the items of its `entries_key` dict (a stage's weights) as
// entries.
ConfigRecord dict_record(const std::string& where, nb::handle item, const ValueText& value_text,
                         std::string_view entries_key = {}) {
  ConfigRecord record;
  for (auto [k, v] : as_dict(where, item)) {
    const std::string key = nb::cast<std::string>(nb::str(k));
    if (v.is_none()) continue;
    if (!entries_key.empty() && key == entries_key) {
      for (auto [name, w] : as_dict(where + ": " + key, v)) {
        record.entries.emplace_back(nb::cast<std::string>(nb::str(name)), mixture_text(where, key, w, value_text));
      }
      continue;
    }
    record.keys.emplace_back(key, mixture_text(where, key, v, value_text));
  }
  return record;
}

}  // namespace

bool apply_mixture_key(Config& config, std::string_view key, nb::handle value, const ValueText& value_text) {
  if (key == "mixture_temperature") {
    set_mixture_temperature(config, mixture_text("", std::string(key), value, value_text));
    return true;
  }
  if (key == "mixture_planned_steps") {
    set_mixture_planned_steps(config, mixture_text("", std::string(key), value, value_text));
    return true;
  }
  if (key == "mixture") {
    std::vector<ConfigRecord> records;
    for (nb::handle item : as_list("mixture", value)) {
      records.push_back(dict_record(source_where(records.size(), item), item, value_text));
    }
    // A relative dataset_dir resolves against the working directory.
    set_mixture_sources(config, records, std::filesystem::current_path());
    return true;
  }
  if (key == "stages") {
    std::vector<ConfigRecord> records;
    for (nb::handle item : as_list("stages", value)) {
      records.push_back(dict_record(mixture_stage_where(records.size()), item, value_text, "weights"));
    }
    set_mixture_stages(config, records);
    return true;
  }
  if (key == "shape_schedule") {
    std::vector<ConfigRecord> records;
    for (nb::handle item : as_list("shape_schedule", value)) {
      records.push_back(dict_record("shape_schedule stage " + std::to_string(records.size()), item, value_text));
    }
    set_shape_schedule(config, records);
    return true;
  }
  return false;
}

std::map<std::string, std::string> mixture_weight_texts(nb::handle weights) {
  if (!PyDict_Check(weights.ptr()) && !nb::hasattr(weights, "items")) {
    throw Error(ErrorKind::config,
                "set_mixture_weights: weights must be a mapping of source names to weights, got " + repr_of(weights));
  }
  std::map<std::string, std::string> texts;
  for (nb::handle item : weights.attr("items")()) {
    const nb::handle name = item[0];
    if (!PyUnicode_Check(name.ptr())) {
      throw Error(ErrorKind::config, "set_mixture_weights: a source name must be a str, got " + repr_of(name));
    }
    const std::string source = nb::cast<std::string>(name);
    nb::object value = nb::borrow(item[1]);
    PyObject* v = value.ptr();
    // A number that is no float but converts to one (numpy's float32, a 0-d tensor) as the
    // plain float it converts to (number_text reads a float subclass by its value itself);
    // integers of any type stay exact through __index__.
    const bool other_float = !PyFloat_Check(v) && !PyBool_Check(v) && !PyLong_Check(v) && !PyIndex_Check(v) &&
                             !PyUnicode_Check(v) && nb::hasattr(value, "__float__");
    if (other_float) value = nb::steal(PyNumber_Float(v));
    if (!value.is_valid()) throw nb::python_error();
    texts[source] = number_text("set_mixture_weights: source '" + source + "'", value);
  }
  return texts;
}

}  // namespace tokenfeed::python
