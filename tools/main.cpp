// tokenfeed: the command-line tool. Subcommands live in cmd_*.cpp.
//
// Exit status: 0 on success; on bad input a one-line message on stderr and
// 2 (usage or config), 3 (file access), 4 (invalid file content), 5 (resume state),
// 6 (a pipeline failure), 1 (anything else). A bad command line is 2 (3 when a file it
// names does not exist), whatever CLI11's own codes are. `tokenfeed prepare` ends by the
// signal that stopped it (cmd_prepare.cpp).
#include <array>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string_view>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/version.hpp"

namespace {

int exit_code(tokenfeed::ErrorKind kind) {
  switch (kind) {
    case tokenfeed::ErrorKind::config:
    case tokenfeed::ErrorKind::usage: return 2;
    case tokenfeed::ErrorKind::io: return 3;
    case tokenfeed::ErrorKind::format: return 4;
    case tokenfeed::ErrorKind::state: return 5;
    case tokenfeed::ErrorKind::pipeline: return 6;
  }
  return 1;
}

// The status of a command line CLI11 rejected. CLI11 has its own codes (105 for a failed
// validator, 106 for a missing option, 108 for excluded options, ...); tokenfeed's are 2 for
// usage, and 3 when an option names a file that does not exist, as for the files the
// commands open themselves. CLI11's path validators (ExistingFile, ExistingDirectory,
// ExistingPath) throw a plain ValidationError, so their messages tell them apart.
int parse_error_status(const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return 0;  // --help, --version
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
    static constexpr std::array<std::string_view, 5> kPathProblems = {
        "File does not exist: ", "File is actually a directory: ", "Directory does not exist: ",
        "Directory is actually a file: ", "Path does not exist: "};
    const std::string_view what = e.what();
    for (const std::string_view problem : kPathProblems) {
      if (what.find(problem) != std::string_view::npos) return 3;
    }
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenfeed: fixed-shape training batches from pre-tokenized datasets, prepared ahead on background threads"};
  app.set_version_flag("--version", std::string("tokenfeed ") + tokenfeed::version());
  app.require_subcommand(1);
  // Bad input: one line on stderr (CLI11's default adds a second line).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("tokenfeed: error: ") + e.what() + " (see --help)\n";
  });
  // Progress lines go to stdout with the command's own output; stderr carries only
  // warnings and the final error line.
  // Debug lines (each split at open, each epoch boundary) only with TOKENFEED_LOG_LEVEL=debug.
  tokenfeed::set_log_handler(
      [threshold = tokenfeed::log_level_from_environment()](tokenfeed::LogLevel level, std::string_view line) {
        if (level < threshold) return;
        std::FILE* out = level >= tokenfeed::LogLevel::warning ? stderr : stdout;
        std::fprintf(out, "%.*s\n", static_cast<int>(line.size()), line.data());
      });
  tokenfeed::cli::add_run_command(app);
  tokenfeed::cli::add_dump_command(app);
  tokenfeed::cli::add_inspect_command(app);
  tokenfeed::cli::add_prepare_command(app);
  tokenfeed::cli::add_prepare_text_command(app);
  tokenfeed::cli::add_bench_command(app);
  tokenfeed::cli::add_show_command(app);
  tokenfeed::cli::add_audit_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the help, the version or the one-line error
    return parse_error_status(e);
  } catch (const tokenfeed::Error& e) {
    std::fprintf(stderr, "tokenfeed: error: %s\n", e.what());
    return exit_code(e.kind());
  } catch (const std::filesystem::filesystem_error& e) {  // a command's own file checks
    std::fprintf(stderr, "tokenfeed: error: %s\n", tokenfeed::io_error_of(e).what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenfeed: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
