// tokenfeed: the command-line tool. Subcommands live in cmd_*.cpp.
//
// Exit status: 0 on success; on bad input a one-line message on stderr and
// 2 (usage or config), 3 (file access), 4 (invalid file content), 5 (resume state),
// 6 (a pipeline failure), 1 (anything else).
#include <cstdio>
#include <exception>

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
  tokenfeed::set_log_handler([](tokenfeed::LogLevel level, std::string_view line) {
    std::FILE* out = level >= tokenfeed::LogLevel::warning ? stderr : stdout;
    std::fprintf(out, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  tokenfeed::cli::add_run_command(app);
  tokenfeed::cli::add_dump_command(app);
  tokenfeed::cli::add_inspect_command(app);
  tokenfeed::cli::add_prepare_command(app);
  tokenfeed::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tokenfeed::Error& e) {
    std::fprintf(stderr, "tokenfeed: error: %s\n", e.what());
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenfeed: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
