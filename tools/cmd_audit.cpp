// `tokenfeed audit LOG`: reads an audit log back with the library's reader (read_audit_log,
// include/tokenfeed/audit.hpp) and prints what it records: the events by action, the
// dataset loads and mixture stages, and each epoch's order (its seed, size and first ids,
// where it opened and whether it completed). A last line cut short by a kill is reported;
// a complete line that is not an event is an error naming its line (exit status 4).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "tokenfeed/audit.hpp"

namespace tokenfeed::cli {
namespace {

constexpr const char* kFooter =
    R"help(Each complete line of the log is one event, as the loader writes them:
  TIME | TRAINING | LEVEL | action=ACTION | key=value | key="quoted value" | ...
Printed: the events by action, each dataset_load, stage_start and weights_changed (a
mixture's weights changed by the trainer from a step on), and one line per epoch
(per split, mixture source and rank) in the order the epochs opened: the fields of its
epoch_start (or epoch_resume: seed, size, first ids) and of its epoch_complete, if any.

A last line without its newline was cut short when the process was killed: it is reported
("torn") and is not an error. A complete line that is not an event (damaged or forged) is.

Exit status: 0 (the log was read, a torn last line included), 2 (a bad command line),
3 (the log cannot be read), 4 (a complete line is not an audit event: its number is named).)help";

// What identifies an epoch across its events: split, mixture source (empty for a single
// dataset), epoch number, rank.
using EpochKey = std::tuple<std::string, std::string, std::string, std::string>;

// An epoch's opening (epoch_start or epoch_resume) and closing (epoch_complete) events.
struct EpochEvents {
  const AuditEvent* opened = nullptr;
  const AuditEvent* completed = nullptr;
};

std::string text_of(std::optional<std::string_view> value) { return value ? std::string(*value) : std::string(); }

EpochKey epoch_key(const AuditEvent& event) {
  return {text_of(event.field("split")), text_of(event.field("source")), text_of(event.field("epoch")),
          text_of(event.field("rank"))};
}

// A field as the log writes it (a value with a space or a control character quoted and
// escaped), so that every printed line is one line.
std::string field_text(const std::string& key, const std::string& value) {
  return audit_name_text(key) + "=" + audit_value_text(value);
}

// The fields of `event` but those of the epoch's key, as "key=value, ...".
std::string other_fields(const AuditEvent& event) {
  std::string out;
  for (const auto& [key, value] : event.fields) {
    if (key == "split" || key == "source" || key == "epoch" || key == "rank") continue;
    out += (out.empty() ? "" : ", ") + field_text(key, value);
  }
  return out;
}

// Every field of `event`, as "key=value ...".
std::string all_fields(const AuditEvent& event) {
  std::string out;
  for (const auto& [key, value] : event.fields) out += (out.empty() ? "" : " ") + field_text(key, value);
  return out;
}

void print_actions(const AuditLogContents& log) {
  std::vector<std::pair<std::string, std::size_t>> counts;  // in order of first appearance
  for (const AuditEvent& event : log.events) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == event.action; });
    if (it == counts.end()) {
      counts.emplace_back(event.action, 1);
    } else {
      ++it->second;
    }
  }
  std::string line;
  for (const auto& [action, count] : counts) {
    line += (line.empty() ? "" : ", ") + audit_value_text(action) + " " + std::to_string(count);
  }
  std::printf("  events     %zu%s%s\n", log.events.size(), line.empty() ? "" : ": ", line.c_str());
  if (!log.events.empty()) {
    std::printf("  time       %s (line 1) to %s (line %llu)\n", log.events.front().time.c_str(),
                log.events.back().time.c_str(), static_cast<unsigned long long>(log.events.back().line));
  }
}

void print_epochs(const AuditLogContents& log) {
  std::map<EpochKey, EpochEvents> epochs;
  std::vector<EpochKey> opened_order;
  for (const AuditEvent& event : log.events) {
    const bool opens = event.action == "epoch_start" || event.action == "epoch_resume";
    if (!opens && event.action != "epoch_complete") continue;
    const EpochKey key = epoch_key(event);
    EpochEvents& e = epochs[key];
    if (e.opened == nullptr && e.completed == nullptr) opened_order.push_back(key);
    (opens ? e.opened : e.completed) = &event;
  }
  if (opened_order.empty()) return;
  std::printf("  epochs     %zu\n", opened_order.size());
  for (const EpochKey& key : opened_order) {
    const auto& [split, source, epoch, rank] = key;
    const EpochEvents& e = epochs[key];
    std::string line = "    " + audit_value_text(split) +
                       (source.empty() ? "" : " source " + audit_value_text(source)) + " epoch " +
                       audit_value_text(epoch) + (rank.empty() ? "" : " rank " + audit_value_text(rank)) + ": ";
    if (e.opened != nullptr) {
      line += (e.opened->action == "epoch_resume" ? "resumed line " : "started line ") +
              std::to_string(e.opened->line) + " (" + other_fields(*e.opened) + ")";
    } else {
      line += "no opening line";
    }
    if (e.completed != nullptr) {
      line += "; completed line " + std::to_string(e.completed->line) + " (" + other_fields(*e.completed) + ")";
    } else {
      line += "; not completed";
    }
    std::printf("%s\n", line.c_str());
  }
}

void audit(const std::string& path) {
  const AuditLogContents log = read_audit_log(path);
  std::printf("tokenfeed audit: %s\n", audit_name_text(path).c_str());
  print_actions(log);
  for (const AuditEvent& event : log.events) {
    const bool changed = event.action == "weights_changed";
    if (event.action == "dataset_load" || event.action == "stage_start" || changed) {
      std::printf("  %-10s line %llu: %s\n", event.action == "dataset_load" ? "load" : (changed ? "weights" : "stage"),
                  static_cast<unsigned long long>(event.line), all_fields(event).c_str());
    }
  }
  print_epochs(log);
  if (log.torn_line) {
    std::printf("  torn       line %llu was cut short (the process was killed while writing it): %s\n",
                static_cast<unsigned long long>(log.events.size() + 1), audit_name_text(*log.torn_line).c_str());
  }
}

}  // namespace

void add_audit_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("audit",
                                     "Read an audit log back: its events, dataset loads, stages, weight changes and "
                                     "each epoch's order");
  cmd->footer(kFooter);
  cmd->add_option("log", *path, "Audit log file (audit_log_dir/audit_*.log)")->required()->check(CLI::ExistingFile);
  cmd->callback([path] { audit(*path); });
}

}  // namespace tokenfeed::cli
