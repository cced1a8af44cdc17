// Bindings of a preparation's output rules, so that `tokenfeed.prepare` (hf_prepare) follows
// the ones `tokenfeed prepare` and prepare-text follow, written once in C++:
//   _StagingDir, _remove_stale_staging_dirs  the staging-directory protocol (io/staging_dir.hpp:
//                                             .NAME.tmp-PID-RANDOM, flock-ed while in use,
//                                             fsync-ed and renamed; a killed run's leftover
//                                             removed by the next run)
//   _check_output_dir                         the output must be absent or an empty directory
//   _choose_token_dtype                       uint16 when the vocabulary fits, else uint32
//                                             (prepare/output_dir.hpp)
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "io/staging_dir.hpp"
#include "prepare/output_dir.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

namespace fs = std::filesystem;

// The staging directory of one run, owned by Python: created (with the output's parent) and
// locked on construction; commit() publishes it, remove() deletes it. Either releases the
// lock; a later call raises UsageError.
class PyStagingDir {
 public:
  explicit PyStagingDir(nb::handle output_dir) {
    const fs::path out = tokenfeed::normalized_output(file_path(output_dir));
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (ec) {
      throw tokenfeed::Error(tokenfeed::ErrorKind::io,
                             "cannot create '" + out.parent_path().string() + "': " + ec.message());
    }
    staging_ = std::make_unique<tokenfeed::StagingDir>(out);
  }

  nb::str path() const { return file_text(live().path().string()); }

  // Flushes everything to disk and renames it to the output directory (absent or empty).
  void commit() {
    {
      nb::gil_scoped_release released;
      live().commit();
    }
    staging_.reset();
  }

  void remove() {
    nb::gil_scoped_release released;
    staging_.reset();
  }

 private:
  tokenfeed::StagingDir& live() const {
    if (!staging_) usage_error("the staging directory was already published or removed");
    return *staging_;
  }

  std::unique_ptr<tokenfeed::StagingDir> staging_;
};

nb::list remove_stale_staging_dirs(nb::handle output_dir) {
  const fs::path out = tokenfeed::normalized_output(file_path(output_dir));
  std::vector<fs::path> removed;
  {
    nb::gil_scoped_release released;
    removed = tokenfeed::remove_stale_staging_dirs(out);
  }
  nb::list paths;
  for (const fs::path& p : removed) paths.append(file_text(p.string()));
  return paths;
}

void check_output_dir(nb::handle output_dir) { tokenfeed::check_output_dir(file_path(output_dir)); }

std::string choose_token_dtype(const std::string& asked, std::uint64_t vocab_size) {
  std::optional<tokenfeed::TokenDtype> dtype;
  if (asked != "auto") {
    dtype = tokenfeed::parse_token_dtype(asked);
    if (!dtype) {
      throw tokenfeed::Error(tokenfeed::ErrorKind::config,
                             "token dtype must be auto, uint16 or uint32, got '" + asked + "'");
    }
  }
  return tokenfeed::to_string(tokenfeed::choose_token_dtype(dtype, vocab_size));
}

}  // namespace

void bind_output_dir(nb::module_& m) {
  nb::class_<PyStagingDir>(m, "_StagingDir",
                           "The staging directory of a preparation's output (PARENT/.NAME.tmp-PID-RANDOM), locked "
                           "while this run uses it; see src/io/staging_dir.hpp.")
      .def(nb::init<nb::handle>(), "output_dir"_a,
           nb::sig("def __init__(self, output_dir: str | os.PathLike[str]) -> None"),
           "Creates (with the output's parent) and locks the staging directory of ``output_dir``.")
      .def_prop_ro("path", &PyStagingDir::path, "The staging directory's path.")
      .def("commit", &PyStagingDir::commit,
           "Flushes every file to disk, renames the directory to the output (absent or empty) and "
           "flushes its parent; releases the lock. Raises IoError when a step fails.")
      .def("remove", &PyStagingDir::remove, "Removes the staging directory and what it holds; releases the lock.");
  m.def("_remove_stale_staging_dirs", &remove_stale_staging_dirs, "output_dir"_a,
        nb::sig("def _remove_stale_staging_dirs(output_dir: str | os.PathLike[str]) -> list[str]"),
        "Removes the staging directories of ``output_dir`` that killed runs left (their process gone, "
        "nobody holding their lock, holding only what a preparation writes); returns their paths.");
  m.def("_check_output_dir", &check_output_dir, "output_dir"_a,
        nb::sig("def _check_output_dir(output_dir: str | os.PathLike[str]) -> None"),
        "Raises ConfigError unless ``output_dir`` is absent or an empty directory.");
  m.def("_choose_token_dtype", &choose_token_dtype, "token_dtype"_a, "vocab_size"_a,
        "The token dtype of a prepared dataset: ``token_dtype`` (\"uint16\" or \"uint32\") when given, for "
        "\"auto\" uint16 when every id of the vocabulary fits, else uint32. Raises ConfigError for another "
        "value, or uint16 for a vocabulary larger than 65536.");
}

}  // namespace tokenfeed_python
