// `tokenfeed prepare-text`: raw text (JSONL, parquet, plain text) -> a pretraining dataset of
// token-stream shards or of documents as episodes. With --hf-tokenizer DIR, or parquet input,
// the job is the Python package's (tokenfeed.text_corpus, which drives the same library code
// with the `tokenizers` package or pyarrow): the command replaces itself with that program.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tokenfeed/prepare_text.hpp"
#include "python_program.hpp"
#include "stop_signals.hpp"
#include "val_split_option.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed::cli {
namespace {

constexpr const char* kFooter =
    R"help(Input: files or globs (quote them), read in sorted path order, documents in file order:
  *.jsonl, *.json, *.ndjson   one JSON object per line; the document is --text-field
  *.parquet                   the --text-field column, by row group (needs pyarrow)
  anything else               plain UTF-8 text: --doc-per file (default), line, or blank-line
A .gz or .zst suffix is decompressed. "" is an empty document (skipped and counted); null, a
non-string, a missing field, invalid JSON or invalid UTF-8 is a bad line (--on-error).

Each document becomes [BOS] + its ids + [EOS]: the end-of-text id is appended unless
--no-eos (--eos-token names it; default: the tokenizer's own; bytes: its eot id), BOS only
with --bos.

Output (DIR is created; it must not exist or be empty):
  --format tokens    DIR/train/shard_NNNNN.npy (uint16 when the vocabulary fits, else
                     uint32) and shard_NNNNN.docs.npy (uint64 document start offsets);
                     loads with dataset_mode=token_stream (document_aware=true for labels
                     that never cross a document)
  --format episodes  DIR/train/shard_NNNNN/{tokens.bin,episodes.idx}, one episode per
                     document, every position trained; loads with dataset_mode=sft_packed
                     (truncation=split packs whole documents and splits only longer ones)
  DIR/val/... (documents by content hash, --val-split), DIR/dataset_metadata.json
Shards hold at most --shard-tokens tokens and are cut only at document ends.

The run is staged in a hidden directory beside DIR and renamed at the end. A run that is
killed or interrupted (SIGINT, SIGTERM, SIGHUP) can be continued with --resume: every shard
it finished is kept and the rest redone, giving the same bytes as an uninterrupted run, as
long as the inputs and options are the same. The inputs are known by path, size and
modification time; --resume-check content adds their bytes' SHA-256 (for inputs rewritten
in place; give it to the first run and its resumes alike). Without --resume the leftover is
removed.

On a cluster: --task I --num-tasks N (--task auto in a Slurm array or a Kubernetes indexed
Job) prepares a deterministic part of the inputs (files, and byte ranges of an uncompressed
file of lines larger than --max-part-bytes; no document is cut) into DIR/parts/I, staged and
resumable as above. Once all N have finished, `tokenfeed prepare-text --merge DIR` makes the
dataset: the documents of a one-process run, in its order, split alike.

Exit status: 0 on success; otherwise a one-line message on stderr and 2 (a bad option or
value), 3 (a file that cannot be read or written, an input that matches no file), 4 (a bad
input line, corrupt compressed data, or no document for train) or 6 (an internal failure).

Examples:
  tokenfeed prepare-text 'corpus/*.jsonl.zst' --tokenizer sentencepiece:tok.model --output-dir data/pt
  tokenfeed prepare-text 'web/*.parquet' --hf-tokenizer models/gpt2 --output-dir data/web --resume
)help";

struct PrepareTextArgs {
  PrepareTextOptions options;
  std::vector<std::string> inputs;
  std::string format = "tokens";
  std::string doc_per = "file";
  std::string eos_token;
  bool no_eos = false;
  std::string token_dtype = "auto";
  std::string on_error = "fail";
  std::string resume_check = "stat";
  std::string hf_tokenizer;  // with options.tokenizer_impl and options.verify_fraction
  double progress_seconds = 5;
  std::vector<std::string> argv;  // the options as given, for the Python program
  std::string task;               // --task: I or auto; empty: the whole run
  std::uint32_t num_tasks = 0;    // --num-tasks; 0: not given
  std::uint64_t max_part_bytes = 0;
  std::string merge;  // --merge OUT
};

// The options as the Python program takes them (the same names).
std::vector<std::string> python_arguments(const PrepareTextArgs& a) {
  const PrepareTextOptions& o = a.options;
  std::vector<std::string> argv(a.inputs.begin(), a.inputs.end());
  const auto add = [&argv](const char* name, const std::string& value) {
    argv.emplace_back(name);
    argv.push_back(value);
  };
  add("--output-dir", o.output_dir.string());
  add("--format", a.format);
  add("--text-field", o.read.text_field);
  add("--doc-per", a.doc_per);
  if (!a.hf_tokenizer.empty()) {
    add("--hf-tokenizer", a.hf_tokenizer);
    add("--tokenizer-impl", o.tokenizer_impl);
    add("--verify-sample", exact_double(o.verify_fraction));
  } else {
    add("--tokenizer", o.tokenizer);
  }
  if (!a.eos_token.empty()) add("--eos-token", a.eos_token);
  if (a.no_eos) argv.emplace_back("--no-eos");
  if (o.prepend_bos) argv.emplace_back("--bos");
  add("--val-split", exact_double(o.val_split));
  add("--seed", std::to_string(o.seed));
  add("--shard-tokens", std::to_string(o.shard_tokens));
  add("--token-dtype", a.token_dtype);
  add("--on-error", a.on_error);
  add("--max-document-bytes", std::to_string(o.read.max_document_bytes));
  add("--workers", std::to_string(o.workers));
  add("--progress-seconds", exact_double(a.progress_seconds));
  if (o.resume) argv.emplace_back("--resume");
  add("--resume-check", a.resume_check);
  if (o.task) {
    add("--task", std::to_string(o.task->index));
    add("--num-tasks", std::to_string(o.task->count));
    add("--max-part-bytes", std::to_string(o.task->max_part_bytes));
  }
  return argv;
}

bool has_parquet(const PrepareTextArgs& args) {
  for (const TextInputFile& f : expand_text_inputs(args.inputs)) {
    if (f.format == TextInputFormat::parquet) return true;
  }
  return false;
}

// --hf-tokenizer with the native byte-level BPE (hf-bpe:) when --tokenizer-impl allows and the
// native encoder supports the file (auto tells why it does not, then runs the tokenizers
// package); the Python program otherwise, as for parquet input. A native run with
// --verify-sample is the Python program's too when its interpreter has the tokenizers package
// (the verifier; the encoding is still the library's, on its threads), else this command's
// without verification, said on stderr.
bool needs_python(PrepareTextArgs& args) {
  if (args.hf_tokenizer.empty()) return has_parquet(args);
  if (args.options.tokenizer_impl == "tokenizers") return true;
  const std::string file = (std::filesystem::path(args.hf_tokenizer) / "tokenizer.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return true;  // the Python program says what DIR lacks
  std::string refusal = hf_bpe_unsupported(file);
  if (refusal.empty() && has_parquet(args)) refusal = "parquet input is read by the Python package";
  if (refusal.empty()) {
    args.options.tokenizer_impl = "native";
    if (args.options.verify_fraction > 0) {
      const std::string why_not = python_cannot_import("tokenizers, tokenfeed._tokenfeed");
      if (why_not.empty()) return true;
      std::fprintf(stderr, "tokenfeed prepare-text: --verify-sample: %s; no document is verified\n", why_not.c_str());
    }
    args.options.tokenizer = "hf-bpe:" + file;
    args.hf_tokenizer.clear();
    return false;
  }
  if (args.options.tokenizer_impl == "native") throw Error(ErrorKind::config, "--tokenizer-impl native: " + refusal);
  std::fprintf(stderr,
               "tokenfeed prepare-text: the native encoder is not used (%s); encoding with the tokenizers "
               "package\n",
               refusal.c_str());
  args.options.tokenizer_impl = "tokenizers";
  return true;
}

void print_summary(const PrepareTextArgs& args, const PrepareTextSummary& s) {
  std::ostringstream out;
  out << "tokenfeed prepare-text: wrote " << s.written.string() << " (" << args.format << ")";
  if (args.options.task) {
    out << ", task " << args.options.task->index << " of " << args.options.task->count << ": run prepare-text --merge "
        << args.options.output_dir.string() << " when every task is done";
  }
  out << "\n";
  out << "  input      " << plural(s.input_files, "file") << ", " << human_bytes(static_cast<double>(s.input_bytes))
      << "\n";
  const auto split = [&](const char* name, const CorpusSplitSummary& c) {
    out << "  " << name << "      " << plural(c.documents, "document") << ", " << plural(c.tokens, "token") << ", "
        << plural(c.shards, "shard") << "; " << c.empty_documents << " empty, " << c.skipped_lines << " skipped\n";
  };
  split("train", s.train);
  split("val  ", s.val);
  if (s.resumed) out << "  resumed    " << plural(s.shards_reused, "finished shard") << " kept from the killed run\n";
  for (const auto& dir : s.removed_stale_dirs) {
    out << "  removed    " << dir.string() << " (left by an earlier run that was killed)\n";
  }
  if (s.blank_lines > 0) out << "  blank      " << plural(s.blank_lines, "blank line") << " ignored\n";
  for (const auto& [reason, skipped] : s.skipped) {
    out << "  skipped    " << reason << ": " << skipped.count << " (first: " << skipped.first_detail << ")\n";
  }
  out << "  tokenizer  " << args.options.tokenizer << ", vocab " << s.vocab_size << ", token dtype "
      << to_string(s.token_dtype) << ", eos " << (s.eos_id ? std::to_string(*s.eos_id) : "none") << ", bos "
      << (s.bos_id ? std::to_string(*s.bos_id) : "none") << "\n";
  const std::uint64_t tokens = s.train.tokens + s.val.tokens;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", s.seconds);
  out << "  time       " << seconds << " ("
      << human_count(s.seconds > 0 ? static_cast<double>(tokens) / s.seconds : 0.0) << "tokens/s)\n";
  std::cout << out.str() << std::flush;
}

// --task I|auto --num-tasks N [--max-part-bytes B] into the options; --merge's exclusions.
void settle_task(PrepareTextArgs& args) {
  if (!args.merge.empty()) {
    if (!args.inputs.empty() || !args.options.output_dir.empty() || !args.task.empty()) {
      throw Error(ErrorKind::config,
                  "--merge OUT takes no inputs, --output-dir or --task: it merges the parts the "
                  "tasks wrote into OUT");
    }
    return;
  }
  if (args.inputs.empty()) throw Error(ErrorKind::config, "no input: give one or more files or globs");
  if (args.options.output_dir.empty()) throw Error(ErrorKind::config, "--output-dir is required");
  if (args.task.empty()) {
    if (args.num_tasks != 0 || args.max_part_bytes != 0) {
      throw Error(ErrorKind::config, "--num-tasks and --max-part-bytes go with --task I (or --task auto)");
    }
    return;
  }
  PrepareTextTask task;
  if (args.task == "auto") {
    task =
        text_task_from_environment(args.num_tasks != 0 ? std::optional<std::uint32_t>(args.num_tasks) : std::nullopt);
  } else {
    std::uint32_t index = 0;
    const auto [end, ec] = std::from_chars(args.task.data(), args.task.data() + args.task.size(), index);
    if (ec != std::errc() || end != args.task.data() + args.task.size()) {
      throw Error(ErrorKind::config, "--task must be a task number or auto, not '" + args.task + "'");
    }
    if (args.num_tasks == 0) throw Error(ErrorKind::config, "--task " + args.task + " needs --num-tasks N");
    if (index >= args.num_tasks) {
      throw Error(ErrorKind::config, "--task " + args.task + " is not below --num-tasks " +
                                         std::to_string(args.num_tasks) + " (tasks are numbered from 0)");
    }
    task.index = index;
    task.count = args.num_tasks;
  }
  task.max_part_bytes = args.max_part_bytes;
  args.options.task = task;
}

void run_merge(const PrepareTextArgs& args) {
  const PrepareTextSummary s = merge_text_parts(args.merge);
  std::ostringstream out;
  out << "tokenfeed prepare-text: merged " << plural(s.shards_reused, "part") << " into " << s.written.string() << "\n";
  for (const auto& [name, c] : {std::pair{"train", s.train}, std::pair{"val  ", s.val}}) {
    out << "  " << name << "      " << plural(c.documents, "document") << ", " << plural(c.tokens, "token") << ", "
        << plural(c.shards, "shard") << "; " << c.empty_documents << " empty, " << c.skipped_lines << " skipped\n";
  }
  std::cout << out.str() << std::flush;
}

void run_prepare_text(PrepareTextArgs& args) {
  settle_task(args);
  if (!args.merge.empty()) {
    run_merge(args);
    return;
  }
  PrepareTextOptions& o = args.options;
  o.inputs = args.inputs;
  if (needs_python(args))
    exec_python_program("text_corpus", python_arguments(args), "prepare-text with --hf-tokenizer or parquet");
  o.format = args.format == "episodes" ? CorpusFormat::episodes : CorpusFormat::tokens;
  o.read.doc_per = parse_doc_per(args.doc_per);
  o.token_dtype = args.token_dtype == "auto" ? std::nullopt : parse_token_dtype(args.token_dtype);
  o.on_error = args.on_error == "skip" ? OnBadLine::skip : OnBadLine::fail;
  o.resume_check = args.resume_check == "content" ? ResumeCheck::content : ResumeCheck::stat;
  if (!args.eos_token.empty()) o.eos_token = args.eos_token;
  o.append_eos = !args.no_eos;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  o.on_progress = [tty](const PrepareTextProgress& p) {
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", format_text_progress(p, true).c_str());
    } else if (!p.done) {
      std::fprintf(stderr, "%s\n", format_text_progress(p, false).c_str());
    }
    std::fflush(stderr);
  };
  if (!tty) o.progress_interval_seconds = args.progress_seconds;
  o.stop_requested = &stop_requested();
  const auto clear_progress = [tty] {
    if (tty) std::fprintf(stderr, "\r\033[K");
  };
  PrepareTextSummary summary;
  try {
    const StopSignalScope signals;
    summary = prepare_text_corpus(o);
  } catch (const PrepareInterrupted&) {
    clear_progress();
    const int signal_number = stop_signal();
    if (signal_number == 0) throw;
    std::fprintf(stderr,
                 "tokenfeed: error: prepare-text interrupted by %s; '%s' was not written. Its finished shards are "
                 "kept: run the same command with --resume to go on\n",
                 stop_signal_name(signal_number), o.output_dir.string().c_str());
    die_by_signal(signal_number);
  } catch (...) {
    clear_progress();
    throw;
  }
  clear_progress();
  print_summary(args, summary);
}

void add_task_options(CLI::App& command, PrepareTextArgs& args) {
  CLI::App* cmd = &command;
  PrepareTextArgs* const a = &args;
  cmd->add_option("--task", a->task,
                  "Prepare only part I of the inputs into DIR/parts/I (0 <= I < --num-tasks), or auto: I (and N) "
                  "from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX");
  cmd->add_option("--num-tasks", a->num_tasks, "With --task: how many tasks prepare DIR together")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-part-bytes", a->max_part_bytes,
                  "With --task: an uncompressed file of lines larger than this is cut into byte ranges, parts of "
                  "several tasks (0: the inputs' bytes / --num-tasks)")
      ->capture_default_str();
  cmd->add_option("--merge", a->merge,
                  "Once every task has finished: make the dataset OUT from OUT/parts/ (no inputs, no --output-dir)");
}

}  // namespace

void add_prepare_text_command(CLI::App& app) {
  auto args = std::make_shared<PrepareTextArgs>();
  CLI::App* cmd =
      app.add_subcommand("prepare-text",
                         "Turn raw text (JSONL, parquet, plain text) into a pretraining dataset of token streams or "
                         "documents");
  cmd->footer(kFooter);
  PrepareTextOptions& o = args->options;
  cmd->add_option("inputs", args->inputs, "Input files or globs (required, but with --merge)");
  cmd->add_option("--output-dir", o.output_dir,
                  "Dataset directory to create (must not exist, or be empty; required, but with --merge)");
  add_task_options(*cmd, *args);
  cmd->add_option("--format", args->format, "tokens (token-stream shards) or episodes (one episode per document)")
      ->check(CLI::IsMember({"tokens", "episodes"}))
      ->capture_default_str();
  cmd->add_option("--text-field", o.read.text_field, "JSONL field (or parquet column) holding the text")
      ->capture_default_str();
  cmd->add_option("--doc-per", args->doc_per, "Plain text: a document per file, line, or blank-line-separated block")
      ->check(CLI::IsMember({"file", "line", "blank-line"}))
      ->capture_default_str();
  auto* tokenizer = cmd->add_option("--tokenizer", o.tokenizer, "bytes or sentencepiece:MODEL")->capture_default_str();
  cmd->add_option("--hf-tokenizer", args->hf_tokenizer,
                  "A local Hugging Face tokenizer directory (tokenizer.json): runs the Python package")
      ->excludes(tokenizer);
  cmd->add_option("--tokenizer-impl", o.tokenizer_impl,
                  "--hf-tokenizer's encoder: native (tokenfeed's byte-level BPE, the same ids), tokenizers (the "
                  "Python package), or auto (native when it supports the tokenizer.json)")
      ->check(CLI::IsMember({"auto", "native", "tokenizers"}))
      ->capture_default_str();
  cmd->add_option("--verify-sample", o.verify_fraction,
                  "With the native encoder and the tokenizers package installed: the fraction of documents (by "
                  "content hash) the package encodes too; the first difference stops the run naming the document "
                  "(0: none)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  auto* eos = cmd->add_option("--eos-token", args->eos_token,
                              "The end-of-text token appended to each document (default: the tokenizer's own)");
  cmd->add_flag("--no-eos", args->no_eos, "Append no end-of-text id")->excludes(eos);
  cmd->add_flag("--bos", o.prepend_bos, "Prepend the tokenizer's BOS id to each document");
  const CLI::Validator below_one = val_split_validator("documents");
  cmd->add_option("--val-split", o.val_split, "Fraction of documents put in val/ (by content hash)")
      ->check(below_one)
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the content-hash train/val split")->capture_default_str();
  cmd->add_option("--shard-tokens", o.shard_tokens, "Maximum tokens per shard (cut only at document ends)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--token-dtype", args->token_dtype, "Token dtype; auto picks uint16 when the vocabulary fits")
      ->check(CLI::IsMember({"auto", "uint16", "uint32"}))
      ->capture_default_str();
  cmd->add_option("--on-error", args->on_error, "A bad line: fail (stop, naming file and line) or skip (count it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--max-document-bytes", o.read.max_document_bytes,
                  "A longer document (a JSONL text as decoded) is a bad line (document_too_long)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--workers", o.workers, "Threads that parse and tokenize (0: all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--resume", o.resume, "Continue a killed run into the same DIR, keeping its finished shards");
  cmd->add_option("--resume-check", args->resume_check,
                  "What tells a resume the inputs are unchanged: stat (path, size, mtime) or content (also "
                  "their SHA-256, every input read once more at the start)")
      ->check(CLI::IsMember({"stat", "content"}))
      ->capture_default_str();
  cmd->add_option("--progress-seconds", args->progress_seconds,
                  "When stderr is not a terminal: a progress line every this many seconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->callback([args] { run_prepare_text(*args); });
}

}  // namespace tokenfeed::cli
