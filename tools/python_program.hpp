// Handing a command's job to the tokenfeed Python package (prepare --hf-tokenizer,
// prepare-text with --hf-tokenizer or parquet input): the process replaces itself with
// `PYTHON -c BOOTSTRAP ARGS...`, BOOTSTRAP running tokenfeed.MODULE.main(ARGS) (a missing
// package is one clear line, status 2), so that the Python run's output, exit status and
// signals are the command's. PYTHON is $TOKENFEED_PYTHON, else $TOKENFEED_COMMAND_PYTHON
// (set by the console script pip installs: its own interpreter, so that a venv's command
// runs in that venv, activated or not), else python3 on PATH. Each message names the
// interpreter tried and why it was chosen.
#pragma once

#include <string>
#include <vector>

namespace tokenfeed::cli {

// Replaces the process; returns only by throwing Error(config) naming `what` (e.g.
// "--hf-tokenizer") when the interpreter cannot be started.
[[noreturn]] void exec_python_program(const std::string& module, const std::vector<std::string>& args,
                                      const std::string& what);

// "" when the interpreter exec_python_program would run can import `modules` (e.g.
// "tokenizers, tokenfeed"), else why not (naming the interpreter). Runs it once, output hidden.
std::string python_cannot_import(const std::string& modules);

// A double as the Python program reads it back exactly (%.17g).
std::string exact_double(double v);

}  // namespace tokenfeed::cli
