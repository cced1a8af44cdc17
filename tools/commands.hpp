// The subcommands of the `tokenfeed` command, each defined in its own cmd_*.cpp.
// Each function adds its subcommand (options and callback) to the application.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tokenfeed::cli {

void add_run_command(CLI::App& app);      // cmd_run.cpp: stream batches, print what and how fast
void add_dump_command(CLI::App& app);     // cmd_dump.cpp: write the next N batches as .npy
void add_inspect_command(CLI::App& app);  // cmd_inspect.cpp: describe and validate a dataset
void add_prepare_command(CLI::App& app);  // cmd_prepare.cpp: JSONL conversations -> dataset
void add_prepare_text_command(CLI::App& app);  // cmd_prepare_text.cpp: raw text -> pretraining dataset
void add_bench_command(CLI::App& app);    // cmd_bench.cpp: get_batch latency and throughput like a trainer
void add_show_command(CLI::App& app);     // cmd_show.cpp: rows of a batch as text, trained targets highlighted
void add_audit_command(CLI::App& app);    // cmd_audit.cpp: an audit log read back: events, epochs, a torn line

// cmd_inspect_mixture.cpp: `inspect --config FILE --steps N` for a shape_schedule's stages and
// a mixture's blend and epochs.
void inspect_config(const std::string& config_file, long steps);

}  // namespace tokenfeed::cli
