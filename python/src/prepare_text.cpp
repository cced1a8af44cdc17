// _prepare_text: prepare-text (src/prepare/prepare_text.hpp) driven from Python, with the
// `tokenizers` package's encoder (or, beside the native hf-bpe: tokenizer, its verifier) and
// pyarrow's parquet reader as callbacks, so that reading, splitting, sharding, staging and
// resuming are the library's own, written once for the command and the package.
//
// The run goes on a thread of its own while the calling thread, without the GIL, waits for
// it and checks for signals every 50 ms: Ctrl-C stops the run within a chunk (its staging
// directory kept for --resume) and raises KeyboardInterrupt. The callbacks take the GIL.
#include <Python.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "tokenfeed/prepare.hpp"
#include "tokenfeed/prepare_text.hpp"
#include "tokenfeed/error.hpp"

namespace nb = nanobind;

namespace tokenfeed_python {
namespace {

using tokenfeed::Error;
using tokenfeed::ErrorKind;

// Python's ids for one text: a list of ints (what Encoding.ids gives), read without a
// conversion object per id.
void read_ids(nb::handle list, std::vector<std::uint32_t>& out, std::size_t which) {
  PyObject* seq = PySequence_Fast(list.ptr(), "the encoder must return a list of id lists");
  if (seq == nullptr) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  out.resize(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(items[i]);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
      Py_DECREF(seq);
      PyErr_Clear();
      throw Error(ErrorKind::format, "the tokenizer gave text " + std::to_string(which) + " an id that is not a " +
                                         "non-negative integer");
    }
    if (v > 0xffffffffULL) {
      Py_DECREF(seq);
      throw Error(ErrorKind::format, "the tokenizer gave id " + std::to_string(v) + ", which does not fit 32 bits");
    }
    out[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(v);
  }
  Py_DECREF(seq);
}

// The Python encoder: encode(list[str]) -> list[list[int]].
class PythonEncoder final : public tokenfeed::DocumentEncoder {
 public:
  explicit PythonEncoder(nb::object encode) : encode_(std::move(encode)) {}
  ~PythonEncoder() override {
    nb::gil_scoped_acquire gil;
    encode_.reset();
  }

  void encode(std::span<const std::string_view> texts, std::vector<std::vector<std::uint32_t>>& ids) override {
    nb::gil_scoped_acquire gil;
    try {
      nb::list batch;
      for (const std::string_view t : texts) batch.append(nb::str(t.data(), t.size()));
      const nb::object result = encode_(batch);
      const nb::list lists = nb::cast<nb::list>(result);
      if (lists.size() != texts.size()) {
        throw Error(ErrorKind::pipeline, "the encoder returned " + std::to_string(lists.size()) + " id lists for " +
                                             std::to_string(texts.size()) + " texts");
      }
      for (std::size_t i = 0; i < texts.size(); ++i) read_ids(lists[i], ids[i], i);
    } catch (nb::python_error& e) {
      throw error_from_python(e);
    } catch (const nb::cast_error&) {
      throw Error(ErrorKind::pipeline, "the encoder must return a list of id lists");
    }
  }

 private:
  nb::object encode_;
};

// A parquet column through a Python iterator of lists (str; bytes for a value that is not
// UTF-8, which the library reports as invalid_utf8; None for null or not a string).
class PythonParquetReader final : public tokenfeed::ParquetTextReader {
 public:
  explicit PythonParquetReader(nb::object reader) : reader_(std::move(reader)) {}
  ~PythonParquetReader() override {
    nb::gil_scoped_acquire gil;
    reader_.reset();
  }

  bool next_batch(std::vector<std::optional<std::string>>& rows) override {
    nb::gil_scoped_acquire gil;
    try {
      const nb::object batch = reader_.attr("next_batch")();
      if (batch.is_none()) return false;
      for (nb::handle v : batch) {
        if (PyUnicode_Check(v.ptr())) {
          Py_ssize_t size = 0;
          const char* utf8 = PyUnicode_AsUTF8AndSize(v.ptr(), &size);
          if (utf8 == nullptr) {  // a lone surrogate: not encodable as UTF-8
            PyErr_Clear();
            rows.emplace_back(std::nullopt);
            continue;
          }
          rows.emplace_back(std::string(utf8, static_cast<std::size_t>(size)));
        } else if (PyBytes_Check(v.ptr())) {  // a value that is not UTF-8: the library reports it
          rows.emplace_back(
              std::string(PyBytes_AS_STRING(v.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(v.ptr()))));
        } else {
          rows.emplace_back(std::nullopt);
        }
      }
      return true;
    } catch (nb::python_error& e) {
      throw error_from_python(e);
    }
  }

  std::uint64_t bytes_read() const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::uint64_t>(reader_.attr("bytes_read"));
  }

 private:
  nb::object reader_;
};

nb::dict split_dict(const tokenfeed::CorpusSplitSummary& s) {
  nb::dict d;
  d["documents"] = s.documents;
  d["tokens"] = s.tokens;
  d["empty_documents"] = s.empty_documents;
  d["skipped_lines"] = s.skipped_lines;
  d["shards"] = s.shards;
  return d;
}

nb::dict summary_dict(const tokenfeed::PrepareTextSummary& s) {
  nb::dict d;
  d["train"] = split_dict(s.train);
  d["val"] = split_dict(s.val);
  nb::dict skipped;
  for (const auto& [reason, lines] : s.skipped) {
    nb::dict r;
    r["count"] = lines.count;
    r["first"] = lines.first_detail;
    skipped[reason.c_str()] = r;
  }
  d["skipped"] = skipped;
  d["blank_lines"] = s.blank_lines;
  d["input_files"] = s.input_files;
  d["input_bytes"] = s.input_bytes;
  d["token_dtype"] = tokenfeed::to_string(s.token_dtype);
  d["vocab_size"] = s.vocab_size;
  d["eos_token_id"] = s.eos_id ? nb::cast(*s.eos_id) : nb::none();
  d["bos_token_id"] = s.bos_id ? nb::cast(*s.bos_id) : nb::none();
  d["shards_reused"] = s.shards_reused;
  d["resumed"] = s.resumed;
  d["verified_documents"] = s.verified_documents;
  d["seconds"] = s.seconds;
  nb::list removed;
  for (const auto& p : s.removed_stale_dirs) removed.append(p.string());
  d["removed_stale_dirs"] = removed;
  d["written"] = s.written.string();
  return d;
}

// Runs `run` on a thread of its own; this thread, without the GIL, checks for signals every
// 50 ms and, when a handler raises, sets `stop` and waits for the run to wind down.
tokenfeed::PrepareTextSummary run_interruptibly(tokenfeed::PrepareTextOptions& options) {
  std::atomic<bool> stop{false};
  options.stop_requested = &stop;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr failure;
  tokenfeed::PrepareTextSummary summary;
  std::thread worker([&] {
    try {
      summary = tokenfeed::prepare_text_corpus(options);
    } catch (...) {
      failure = std::current_exception();
    }
    const std::lock_guard lock(mutex);
    done = true;
    done_cv.notify_all();
  });
  bool interrupted = false;
  for (;;) {
    {
      nb::gil_scoped_release release;
      std::unique_lock lock(mutex);
      if (done_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; })) break;
    }
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted = true;  // the Python exception stays set; raised once the run has stopped
      stop.store(true);
    }
  }
  {
    nb::gil_scoped_release release;
    worker.join();
  }
  if (interrupted) throw nb::python_error();
  if (failure) std::rethrow_exception(failure);
  return summary;
}

// The caller's encoder (Python's encode) and its identity (HfTextEncoder.identity()'s dict).
void set_encoder(tokenfeed::PrepareTextOptions& o, nb::object encoder, nb::object identity) {
  o.encoder = std::make_shared<PythonEncoder>(std::move(encoder));
  tokenfeed::EncoderIdentity& id = o.encoder_identity;
  id.kind = nb::cast<std::string>(identity["kind"]);
  id.model_path = nb::cast<std::string>(identity["model"]);
  id.model_sha256 = nb::cast<std::string>(identity["sha256"]);
  id.version = nb::cast<std::string>(identity["version"]);
  id.vocab_size = nb::cast<std::uint64_t>(identity["vocab_size"]);
  id.eos_id = nb::cast<std::optional<std::uint32_t>>(identity["eos_token_id"]);
  id.bos_id = nb::cast<std::optional<std::uint32_t>>(identity["bos_token_id"]);
}

}  // namespace

// Python's parquet reader and progress callback, when given, as the run's hooks (each takes
// the GIL).
void set_python_callbacks(tokenfeed::PrepareTextOptions& o, nb::object open_parquet, nb::object on_progress,
                          double progress_seconds) {
  if (!open_parquet.is_none()) {
    o.read.open_parquet = [open_parquet](const std::filesystem::path& path, const std::string& column,
                                         std::uint64_t first_row) -> std::unique_ptr<tokenfeed::ParquetTextReader> {
      nb::gil_scoped_acquire gil;
      try {
        return std::make_unique<PythonParquetReader>(open_parquet(path.string(), column, first_row));
      } catch (nb::python_error& e) {
        throw error_from_python(e);
      }
    };
  }
  if (!on_progress.is_none()) {
    o.on_progress = [on_progress](const tokenfeed::PrepareTextProgress& p) {
      nb::gil_scoped_acquire gil;
      try {
        on_progress(tokenfeed::format_text_progress(p, true), tokenfeed::format_text_progress(p, false), p.done);
      } catch (nb::python_error& e) {
        throw error_from_python(e);
      }
    };
    o.progress_interval_seconds = progress_seconds;
  }
}

// The defaults of the prepare commands' options, from the library's option structs: the one
// definition the CLI and Python's tokenfeed.prepare / prepare_text both take.
nb::dict prepare_defaults() {
  const tokenfeed::PrepareOptions o;
  nb::dict d;
  d["val_split"] = o.val_split;
  d["seed"] = o.seed;
  d["shard_tokens"] = o.shard_tokens;
  d["max_line_bytes"] = o.max_line_bytes;
  d["workers"] = o.threads;
  return d;
}

nb::dict prepare_text_defaults() {
  const tokenfeed::PrepareTextOptions o;
  nb::dict d;
  d["val_split"] = o.val_split;
  d["seed"] = o.seed;
  d["shard_tokens"] = o.shard_tokens;
  d["max_document_bytes"] = o.read.max_document_bytes;
  d["workers"] = o.workers;
  d["resume_check"] = tokenfeed::to_string(o.resume_check);
  d["tokenizer_impl"] = o.tokenizer_impl;
  d["verify_sample"] = o.verify_fraction;
  return d;
}

// prepare-text's tasks: the merge, and --task auto's reading of the environment.
void bind_text_tasks(nb::module_& m) {
  m.def(
      "_merge_text_parts",
      [](const std::string& output_dir) {
        tokenfeed::PrepareTextSummary s;
        {
          nb::gil_scoped_release release;
          s = tokenfeed::merge_text_parts(output_dir);
        }
        return summary_dict(s);
      },
      nb::arg("output_dir"), "prepare-text --merge (use tokenfeed.merge_text_parts). Returns the summary as a dict.");
  m.def(
      "_text_task_from_environment",
      [](std::optional<std::uint32_t> count) {
        const tokenfeed::PrepareTextTask t = tokenfeed::text_task_from_environment(count);
        return std::make_tuple(t.index, t.count);
      },
      nb::arg("count").none(), "--task auto: (index, count) from Slurm's or a Kubernetes indexed Job's variables.");
}

void bind_prepare_text(nb::module_& m) {
  m.def("_prepare_defaults", &prepare_defaults,
        "The defaults of tokenfeed prepare's options (tokenfeed::PrepareOptions), as a dict.");
  m.def("_prepare_text_defaults", &prepare_text_defaults,
        "The defaults of tokenfeed prepare-text's options (tokenfeed::PrepareTextOptions), as a dict.");
  m.def(
      "_prepare_text",
      [](const std::vector<std::string>& inputs, const std::string& output_dir, const std::string& format,
         const std::string& text_field, const std::string& doc_per, const std::string& tokenizer, nb::object encoder,
         nb::object encoder_identity, std::optional<std::string> eos_token, bool append_eos, bool prepend_bos,
         double val_split, std::uint64_t seed, std::uint64_t shard_tokens, const std::string& token_dtype,
         const std::string& on_error, std::uint64_t max_document_bytes, int workers, bool resume,
         const std::string& resume_check, nb::object open_parquet, nb::object on_progress, double progress_seconds,
         nb::object verify_encoder, double verify_fraction,
         std::optional<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>> task) {
        tokenfeed::PrepareTextOptions o;
        o.inputs = inputs;
        o.output_dir = output_dir;
        if (format != "tokens" && format != "episodes") {
          throw Error(ErrorKind::config, "format must be 'tokens' or 'episodes', not '" + format + "'");
        }
        o.format = format == "episodes" ? tokenfeed::CorpusFormat::episodes : tokenfeed::CorpusFormat::tokens;
        o.read.text_field = text_field;
        o.read.doc_per = tokenfeed::parse_doc_per(doc_per);
        o.read.max_document_bytes = static_cast<std::size_t>(max_document_bytes);
        o.tokenizer = tokenizer;
        if (!encoder.is_none()) set_encoder(o, encoder, encoder_identity);
        o.eos_token = std::move(eos_token);
        o.append_eos = append_eos;
        o.prepend_bos = prepend_bos;
        o.val_split = val_split;
        o.seed = seed;
        o.shard_tokens = shard_tokens;
        if (token_dtype != "auto") o.token_dtype = tokenfeed::parse_token_dtype(token_dtype);
        if (on_error != "fail" && on_error != "skip") {
          throw Error(ErrorKind::config, "on_error must be 'fail' or 'skip', not '" + on_error + "'");
        }
        o.on_error = on_error == "skip" ? tokenfeed::OnBadLine::skip : tokenfeed::OnBadLine::fail;
        o.workers = workers;
        o.resume = resume;
        if (!verify_encoder.is_none()) o.verify_encoder = std::make_shared<PythonEncoder>(verify_encoder);
        o.verify_fraction = verify_fraction;
        if (resume_check != "stat" && resume_check != "content") {
          throw Error(ErrorKind::config, "resume_check must be 'stat' or 'content', not '" + resume_check + "'");
        }
        o.resume_check = resume_check == "content" ? tokenfeed::ResumeCheck::content : tokenfeed::ResumeCheck::stat;
        if (task) o.task = tokenfeed::PrepareTextTask{std::get<0>(*task), std::get<1>(*task), std::get<2>(*task)};
        set_python_callbacks(o, open_parquet, on_progress, progress_seconds);
        const tokenfeed::PrepareTextSummary s = run_interruptibly(o);
        // The callbacks hold Python objects: release them with the GIL held.
        o.read.open_parquet = nullptr;
        o.on_progress = nullptr;
        return summary_dict(s);
      },
      nb::arg("inputs"), nb::arg("output_dir"), nb::arg("format"), nb::arg("text_field"), nb::arg("doc_per"),
      nb::arg("tokenizer"), nb::arg("encoder").none(), nb::arg("encoder_identity").none(), nb::arg("eos_token").none(),
      nb::arg("append_eos"), nb::arg("prepend_bos"), nb::arg("val_split"), nb::arg("seed"), nb::arg("shard_tokens"),
      nb::arg("token_dtype"), nb::arg("on_error"), nb::arg("max_document_bytes"), nb::arg("workers"), nb::arg("resume"),
      nb::arg("resume_check"), nb::arg("open_parquet").none(), nb::arg("on_progress").none(),
      nb::arg("progress_seconds"), nb::arg("verify_encoder").none(), nb::arg("verify_fraction"), nb::arg("task").none(),
      "prepare-text's library run (use tokenfeed.prepare_text); `task`: (index, count, max_part_bytes) for one "
      "task's part. Returns the summary as a dict.");
  bind_text_tasks(m);
}

}  // namespace tokenfeed_python
