// `tokenfeed prepare`: JSONL conversations -> an episode-indexed SFT dataset.
// With --hf-tokenizer DIR the job is the Python package's (tokenfeed.hf_prepare): the
// command replaces itself with that Python program and the same options.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenfeed/prepare.hpp"
#include "commands.hpp"
#include "python_program.hpp"
#include "stop_signals.hpp"
#include "val_split_option.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

constexpr const char* kFooter = R"help(Input: one conversation per line (JSONL), optionally gzip-compressed:

  {"messages": [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4."}]}

  (shown wrapped; each conversation must be on one line). With a tool call:

  {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": "get_weather(\"Oslo\")"},
                {"role": "tool", "content": "{\"temp_c\": 3}"},
                {"role": "assistant", "content": "It is 3 °C in Oslo."}]}

Roles are system, user, assistant and tool (a tool result, never trained on). A system
message may only come first; when there is none, --system-text is used. Each conversation
needs at least one assistant message. Other keys are ignored. Each message becomes
ROLE_TOKEN content EOT with the role and end-of-turn tokens as single ids, and the loss mask
is on assistant content and the assistant's EOT only.

Pre-tokenized input: with --special-tokens FILE.json, every message carries "ids" instead of
"content", e.g. {"role": "user", "ids": [17, 4, 99]}, and the file gives the special ids:
  {"system": 1, "user": 2, "assistant": 3, "tool": 4, "eot": 0,
   "default_system_ids": [7, 8], "vocab_size": 32000}

Output (DIR is created; it must not exist or be empty):
  DIR/train/shard_NNNNN/{tokens.bin,mask.bin,episodes.idx}, DIR/val/...,
  DIR/dataset_metadata.json, DIR/tokenizer_state.json
It loads with dataset_mode=sft_episode; use_loss_mask=auto (the default) applies its masks.

A conversation's split depends only on its content and --seed: rerunning, or appending
lines, never moves it; train must get at least one conversation (--val-split is below 1).
Bad lines (invalid JSON, missing fields, unknown roles, no assistant turn, ...) stop the run
with the line number (--on-error fail) or are counted per reason (--on-error skip).

The output is written to a hidden temporary directory beside DIR, flushed to disk and
renamed to DIR at the end. On SIGINT (Ctrl-C), SIGTERM or SIGHUP the run stops, removes it
and ends by that signal (shell status 130, 143, 129; a second signal stops it at once).
Temporary directories left by killed runs are removed by the next run into the same DIR.

Exit status: 0 on success; otherwise a one-line message on stderr and 2 (a bad option or
value, or a bad special-tokens file), 3 (a file that cannot be read or written, a missing
input), 4 (a bad input line, corrupt gzip, or no conversation for train) or 6 (an internal
failure).

Example:
  tokenfeed prepare --input chats.jsonl.gz --output-dir data/chat_sft --val-split 0.05

With a model's own tokenizer (a local Hugging Face directory: tokenizer.json and
tokenizer_config.json with its Jinja chat_template), JSONL or parquet input:
  tokenfeed prepare --hf-tokenizer models/Qwen2.5-0.5B-Instruct --input chats.parquet --output-dir data/qwen_sft
The conversations are rendered with the model's template and tokenized with its tokenizer;
the loss mask covers what the template's {% generation %} blocks mark, or else each assistant
reply and the end-of-turn token(s) after it, found by rendering prefixes of the conversation.
This runs the tokenfeed Python package (PYTHON -m tokenfeed.hf_prepare: TOKENFEED_PYTHON,
else the Python pip installed this command with, else python3 on PATH), which needs `pip install 'tokenfeed[hf]'`; `python3 -m
tokenfeed.hf_prepare --help` lists its options.
)help";

struct PrepareArgs {
  PrepareOptions options;
  std::string token_dtype = "auto";
  std::string on_error = "fail";
  std::string special_tokens_file;
  std::string special_token_strings_file;
  std::string system_text{kDefaultSystemText};
  const CLI::Option* system_text_option = nullptr;  // to tell a given --system-text from the default
  double progress_seconds = 5;                      // when stderr is not a terminal
  std::string hf_tokenizer;                         // --hf-tokenizer DIR: run by the Python package
  std::string messages_field;                       // with --hf-tokenizer only
  int workers = -1;                                 // with --hf-tokenizer only; -1: not given
};

// A one-line progress bar on stderr, redrawn in place.
void draw_progress(const PrepareProgress& p) {
  constexpr int kWidth = 28;
  const double fraction =
      p.input_bytes_total > 0
          ? std::min(1.0, static_cast<double>(p.input_bytes_read) / static_cast<double>(p.input_bytes_total))
          : 0.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  const double rate = p.seconds > 0 ? static_cast<double>(p.tokens) / p.seconds : 0.0;
  const double byte_rate = p.seconds > 0 ? static_cast<double>(p.input_bytes_read) / p.seconds : 0.0;
  std::fprintf(stderr, "\r\033[K%3.0f%% [%s] %s / %s (%s/s)  %s lines  %stokens/s", fraction * 100.0, bar.c_str(),
               human_bytes(static_cast<double>(p.input_bytes_read)).c_str(),
               human_bytes(static_cast<double>(p.input_bytes_total)).c_str(), human_bytes(byte_rate).c_str(),
               human_count(static_cast<double>(p.lines)).c_str(), human_count(rate).c_str());
  std::fflush(stderr);
}

// Progress into a file or pipe (a CI log): one plain line every progress interval, none
// at the end (the summary follows).
void print_progress_line(const PrepareProgress& p) {
  if (p.done) return;
  const double rate = p.seconds > 0 ? static_cast<double>(p.tokens) / p.seconds : 0.0;
  std::string share;
  if (p.input_bytes_total > 0) {
    char percent[16];
    std::snprintf(
        percent, sizeof percent, "%.0f%% ",
        std::min(100.0, 100.0 * static_cast<double>(p.input_bytes_read) / static_cast<double>(p.input_bytes_total)));
    share = percent;
  }
  std::fprintf(stderr, "tokenfeed prepare: %s%s / %s read, %s lines, %stokens/s, %.0f s\n", share.c_str(),
               human_bytes(static_cast<double>(p.input_bytes_read)).c_str(),
               human_bytes(static_cast<double>(p.input_bytes_total)).c_str(),
               human_count(static_cast<double>(p.lines)).c_str(), human_count(rate).c_str(), p.seconds);
  std::fflush(stderr);
}

void print_summary(const PrepareArgs& args, const PrepareSummary& s) {
  const PrepareOptions& o = args.options;
  std::ostringstream out;
  out << "tokenfeed prepare: wrote " << o.output_dir.string() << "\n";
  out << "  input      " << o.input.string() << " (" << human_bytes(static_cast<double>(s.input_bytes)) << ", "
      << plural(s.lines, "line") << ", sha256 " << s.input_sha256.substr(0, 16) << "...)\n";
  const auto split = [&](const char* name, const EpisodeDatasetWriterSummary& w) {
    out << "  " << name << "      ";
    if (w.episodes == 0) {
      out << "no conversations (not written)\n";
      return;
    }
    out << plural(w.episodes, "conversation") << ", " << plural(w.tokens, "token") << " (" << w.masked_tokens
        << " trained on), " << plural(w.shards, "shard") << "\n";
  };
  split("train", s.train);
  split("val  ", s.val);
  for (const auto& dir : s.removed_stale_dirs) {
    out << "  removed    " << dir.string() << " (left by an earlier run that was killed)\n";
  }
  out << "  skipped    " << plural(s.skipped_total, "line");
  if (s.blank_lines > 0) out << " (and " << plural(s.blank_lines, "blank line") << " ignored)";
  out << "\n";
  for (const auto& [reason, skipped] : s.skipped) {
    out << "    " << reason << ": " << skipped.count << " (first at line " << skipped.first_line << ": "
        << skipped.first_detail << ")\n";
  }
  out << "  tokenizer  " << (o.special_tokens_file ? std::string("pre-tokenized") : o.tokenizer) << ", vocab "
      << s.vocab_size << ", token dtype " << to_string(s.token_dtype) << ", eot id " << s.special.eot << "\n";
  const std::uint64_t tokens = s.train.tokens + s.val.tokens;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", s.seconds);
  out << "  time       " << seconds << " ("
      << human_count(s.seconds > 0 ? static_cast<double>(tokens) / s.seconds : 0.0) << "tokens/s)\n";
  std::cout << out.str() << std::flush;
}

// Replaces the process with `PYTHON -c BOOTSTRAP` and the options, so that the Python run's
// output, exit status and signals are the command's. Returns only by throwing.
[[noreturn]] void exec_hf_prepare(const PrepareArgs& args) {
  const PrepareOptions& o = args.options;
  std::vector<std::string> argv = {
      "--input",        o.input.string(),       "--output-dir",   o.output_dir.string(),
      "--hf-tokenizer", args.hf_tokenizer,      "--val-split",    exact_double(o.val_split),
      "--seed",         std::to_string(o.seed), "--shard-tokens", std::to_string(o.shard_tokens),
      "--token-dtype",  args.token_dtype,       "--on-error",     args.on_error};
  if (!args.messages_field.empty()) argv.insert(argv.end(), {"--messages-field", args.messages_field});
  if (args.workers >= 0) argv.insert(argv.end(), {"--workers", std::to_string(args.workers)});
  argv.insert(argv.end(), {"--max-line-bytes", std::to_string(o.max_line_bytes)});
  exec_python_program("hf_prepare", argv, "--hf-tokenizer");
}

// Errors propagate to main(), which prints them on one line and sets the exit status.
void run_prepare(PrepareArgs& args) {
  if (!args.hf_tokenizer.empty()) exec_hf_prepare(args);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto clear_progress = [tty] {
    if (tty) std::fprintf(stderr, "\r\033[K");
  };
  PrepareSummary summary;
  try {
    PrepareOptions& o = args.options;
    o.token_dtype = args.token_dtype == "auto" ? std::nullopt : parse_token_dtype(args.token_dtype);
    o.on_error = args.on_error == "skip" ? OnBadLine::skip : OnBadLine::fail;
    if (!args.special_tokens_file.empty()) o.special_tokens_file = args.special_tokens_file;
    if (!args.special_token_strings_file.empty()) {
      o.special_strings = read_special_token_strings(args.special_token_strings_file);
    }
    if (args.system_text_option != nullptr && args.system_text_option->count() > 0) o.system_text = args.system_text;
    // On a terminal, a bar redrawn in place; elsewhere a line every few seconds, so that a
    // long run in a log is not silent until it ends.
    if (tty) {
      o.on_progress = draw_progress;
    } else {
      o.on_progress = print_progress_line;
      o.progress_interval_seconds = args.progress_seconds;
    }
    o.stop_requested = &stop_requested();
    const StopSignalScope signals;
    summary = prepare_chat_dataset(o);
  } catch (const PrepareInterrupted&) {
    clear_progress();
    const int signal_number = stop_signal();
    if (signal_number == 0) throw;
    const char* name = stop_signal_name(signal_number);
    std::fprintf(stderr,
                 "tokenfeed: error: prepare interrupted by %s; removed its temporary output, '%s' was not written\n",
                 name, args.options.output_dir.string().c_str());
    die_by_signal(signal_number);
  } catch (...) {
    clear_progress();
    throw;
  }
  clear_progress();
  print_summary(args, summary);
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto args = std::make_shared<PrepareArgs>();
  CLI::App* cmd = app.add_subcommand("prepare",
                                     "Turn a JSONL file of chat conversations into an episode-indexed SFT dataset with "
                                     "assistant-only loss masks");
  cmd->footer(kFooter);
  PrepareOptions& o = args->options;
  cmd->add_option("--input", o.input, "JSONL file of conversations, one per line (.gz accepted)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output-dir", o.output_dir, "Dataset directory to create (must not exist, or be empty)")
      ->required();
  auto* tokenizer =
      cmd->add_option("--tokenizer", o.tokenizer, "bytes (UTF-8 bytes, no model needed) or sentencepiece:MODEL")
          ->capture_default_str();
  auto* special = cmd->add_option("--special-tokens", args->special_tokens_file,
                                  "Pre-tokenized input: JSON file of special token ids and vocab_size (see below)")
                      ->check(CLI::ExistingFile);
  tokenizer->excludes(special);
  cmd->add_option("--special-token-strings", args->special_token_strings_file,
                  "JSON object overriding the special token strings, e.g. {\"tool\": \"<|tool|>\"} "
                  "(keys system, user, assistant, tool, eot)")
      ->check(CLI::ExistingFile)
      ->excludes(special);
  const CLI::Validator below_one = val_split_validator("conversations");
  cmd->add_option("--val-split", o.val_split, "Fraction of conversations put in val/")
      ->check(below_one)
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the content-hash train/val split")->capture_default_str();
  cmd->add_option("--shard-tokens", o.shard_tokens, "Maximum tokens per shard (0: one shard per split)")
      ->capture_default_str();
  cmd->add_option("--token-dtype", args->token_dtype, "Token file dtype; auto picks uint16 when the vocabulary fits")
      ->check(CLI::IsMember({"auto", "uint16", "uint32"}))
      ->capture_default_str();
  auto* system_text = cmd->add_option("--system-text", args->system_text,
                                      "System text injected when a conversation has no system message (text input "
                                      "only; \"\": no system turn)")
                          ->capture_default_str()
                          ->excludes(special);
  args->system_text_option = system_text;
  cmd->add_option("--progress-seconds", args->progress_seconds,
                  "When stderr is not a terminal: a progress line every this many seconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-line-bytes", o.max_line_bytes,
                  "A longer line is a bad line (line_too_long; with --hf-tokenizer invalid_json), never held in memory")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--on-error", args->on_error, "What to do with a bad line: fail (stop) or skip (count it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  auto* hf = cmd->add_option("--hf-tokenizer", args->hf_tokenizer,
                             "A local Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json with "
                             "its chat_template): render and tokenize as that model does; JSONL or .parquet input "
                             "(runs the Python package, see below)");
  hf->excludes(tokenizer)->excludes(special)->excludes(system_text);
  hf->excludes("--special-token-strings");
  cmd->add_option("--messages-field", args->messages_field,
                  "With --hf-tokenizer: the field (or parquet column) holding the messages (default messages)")
      ->needs(hf);
  cmd->add_option("--workers", args->workers,
                  "With --hf-tokenizer: processes that render and tokenize (default 0: one per core)")
      ->check(CLI::NonNegativeNumber)
      ->needs(hf);
  cmd->callback([args] { run_prepare(*args); });
}

}  // namespace tokenfeed::cli
