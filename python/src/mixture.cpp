#include "mixture.hpp"

#include <filesystem>

#include "config/config_values.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;

namespace tokenfeed::python {
namespace {

std::string repr_of(nb::handle value) { return nb::cast<std::string>(nb::repr(value)); }

// A number's exact text: a float by its shortest round-trip decimal (repr), so 0.1 is "0.1".
// `what` names the value in errors ("weight", "max_epochs").
std::string number_text(const std::string& where, nb::handle value, const char* what = "weight") {
  PyObject* v = value.ptr();
  const std::string wrong = where + ": " + what + " must be a number, got " + repr_of(value);
  if (PyBool_Check(v)) throw Error(ErrorKind::config, wrong);
  if (PyUnicode_Check(v)) return nb::cast<std::string>(value);
  if (PyFloat_Check(v)) {
    // The repr of the float value itself: a subclass's may print more (numpy 2's float64
    // prints "np.float64(0.5)").
    const nb::object exact = nb::steal(PyFloat_FromDouble(PyFloat_AsDouble(v)));
    if (!exact.is_valid()) throw nb::python_error();
    std::string text = repr_of(exact);
    if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
    return text;
  }
  if (PyLong_Check(v) || PyIndex_Check(v)) return nb::cast<std::string>(nb::str(value));
  throw Error(ErrorKind::config, wrong);
}

// mixture_temperature and mixture_planned_steps (<mixture temperature planned_steps> in
// XML), read by the XML parser's own checks. True when `key` is one of them.
bool apply_weights_from_sizes_key(Config& config, std::string_view key, nb::handle value) {
  const std::string where = "config key '" + std::string(key) + "'";
  if (key == "mixture_temperature") {
    config.mixture_temperature = parse_config_number("mixture_temperature", number_text(where, value, "the value"));
    return true;
  }
  if (key == "mixture_planned_steps") {
    config.mixture_planned_steps = parse_config_int("mixture_planned_steps", number_text(where, value, "the value"));
    return true;
  }
  return false;
}

nb::list as_list(const char* key, nb::handle value) {
  if (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())) {
    throw Error(ErrorKind::config, std::string("config key '") + key + "' must be a list, got " + repr_of(value));
  }
  return nb::list(value);
}

nb::dict as_dict(const std::string& where, nb::handle value) {
  if (!PyDict_Check(value.ptr())) throw Error(ErrorKind::config, where + " must be a dict, got " + repr_of(value));
  return nb::borrow<nb::dict>(value);
}

}  // namespace

bool apply_mixture_key(Config& config, std::string_view key, nb::handle value, const ValueText& value_text) {
  if (apply_weights_from_sizes_key(config, key, value)) return true;
  if (key == "mixture") {
    config.mixture.clear();
    std::size_t i = 0;
    for (nb::handle item : as_list("mixture", value)) {
      const std::string where = "mixture[" + std::to_string(i++) + "]";
      MixtureSource source;
      bool has_weight = false;
      for (auto [k, v] : as_dict(where, item)) {
        const std::string name = nb::cast<std::string>(nb::str(k));
        if (name == "name") {
          source.name = nb::cast<std::string>(nb::str(v));
        } else if (name == "weight") {
          source.weight = number_text(where, v);
          has_weight = true;
        } else if (name == "max_epochs") {
          source.max_epochs = parse_config_number(where + " max_epochs", number_text(where, v, "max_epochs"));
        } else {
          std::string text = value_text(name, v);
          if (name == "dataset_dir" && std::filesystem::path(text).is_relative()) {
            text = std::filesystem::absolute(text).lexically_normal().string();
          }
          source.keys.emplace_back(name, std::move(text));
        }
      }
      if (!has_weight) throw Error(ErrorKind::config, where + " ('" + source.name + "') has no weight");
      config.mixture.push_back(std::move(source));
    }
    return true;
  }
  if (key == "stages") {
    config.stages.clear();
    std::size_t i = 0;
    for (nb::handle item : as_list("stages", value)) {
      const std::string where = "stages[" + std::to_string(i++) + "]";
      MixtureStage stage;
      for (auto [k, v] : as_dict(where, item)) {
        const std::string name = nb::cast<std::string>(nb::str(k));
        if (name == "until_step") {
          if (!v.is_none()) stage.until_step = parse_config_int("until_step", value_text("until_step", v));
        } else if (name == "weights") {
          for (auto [source, w] : as_dict(where + "['weights']", v)) {
            stage.weights.emplace_back(nb::cast<std::string>(nb::str(source)), number_text(where, w));
          }
        } else {
          throw Error(ErrorKind::config, where + ": unknown key '" + name + "' (a stage has until_step and weights)");
        }
      }
      config.stages.push_back(std::move(stage));
    }
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
