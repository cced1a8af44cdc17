// `tokenfeed audit LOG`: reads an audit log back with the library's reader (read_audit_log,
// include/tokenfeed/audit.hpp) and prints what it records: the events by action, the
// dataset loads and mixture stages, and each epoch's order (its seed, size and first ids,
// where it opened and whether it completed). A last line cut short by a kill is reported;
// a complete line that is not an event is an error naming its line (exit status 4).
#include <algorithm>
#include <cstdint>
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

The log is read as a stream: memory grows with what is printed, not with the file. A last
line without its newline was cut short when the process was killed: it is reported ("torn",
its length and first 200 bytes) and is not an error, however long. A complete line that is
not an event (damaged or forged, or longer than 16 MiB, which no writer makes) is.

Exit status: 0 (the log was read, a torn last line included), 2 (a bad command line),
3 (the log cannot be read), 4 (a complete line is not an audit event: its number is named).)help";

// What identifies an epoch across its events: split, mixture source (empty for a single
// dataset), epoch number, rank.
using EpochKey = std::tuple<std::string, std::string, std::string, std::string>;

// An epoch's opening (epoch_start or epoch_resume) and closing (epoch_complete) events, as
// printed: the line number and the fields but the key's.
struct EpochLine {
  std::uint64_t line = 0;
  std::string fields;
};
struct EpochEvents {
  std::optional<EpochLine> opened, completed;
  bool resumed = false;
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

// What `tokenfeed audit` prints, gathered while the log streams past: memory grows with what
// is printed (actions, loads and stages, epochs), not with the file.
class AuditSummary {
 public:
  void add(const AuditEvent& event) {
    count(event.action);
    if (events_ == 0) first_time_ = event.time;
    ++events_;
    last_time_ = event.time;
    last_line_ = event.line;
    const bool changed = event.action == "weights_changed";
    if (event.action == "dataset_load" || event.action == "stage_start" || event.action == "shape_stage_start" ||
        changed) {
      char head[64];
      std::snprintf(head, sizeof head,
                    "  %-10s line %llu: ", event.action == "dataset_load" ? "load" : (changed ? "weights" : "stage"),
                    static_cast<unsigned long long>(event.line));
      notable_.push_back(head + all_fields(event));
    }
    const bool opens = event.action == "epoch_start" || event.action == "epoch_resume";
    if (opens || event.action == "epoch_complete") {
      const EpochKey key = epoch_key(event);
      auto [it, inserted] = epochs_.try_emplace(key);
      if (inserted) opened_order_.push_back(key);
      EpochEvents& e = it->second;
      (opens ? e.opened : e.completed) = EpochLine{event.line, other_fields(event)};
      if (opens) e.resumed = event.action == "epoch_resume";
    }
  }

  void print(const std::optional<AuditTornLine>& torn) const {
    print_actions();
    for (const std::string& line : notable_) std::printf("%s\n", line.c_str());
    print_epochs();
    if (torn) {
      const std::string shown = torn->text.substr(0, kShownTornBytes);
      std::printf("  torn       line %llu was cut short (the process was killed while writing it), %llu bytes: %s%s\n",
                  static_cast<unsigned long long>(torn->line), static_cast<unsigned long long>(torn->bytes),
                  audit_name_text(shown).c_str(), torn->bytes > shown.size() ? "..." : "");
    }
  }

 private:
  // At most this much of a torn line is printed.
  static constexpr std::size_t kShownTornBytes = 200;

  void count(const std::string& action) {
    auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& c) { return c.first == action; });
    if (it == counts_.end()) {
      counts_.emplace_back(action, 1);
    } else {
      ++it->second;
    }
  }

  void print_actions() const {
    std::string line;
    for (const auto& [action, count] : counts_) {
      line += (line.empty() ? "" : ", ") + audit_value_text(action) + " " + std::to_string(count);
    }
    std::printf("  events     %llu%s%s\n", static_cast<unsigned long long>(events_), line.empty() ? "" : ": ",
                line.c_str());
    if (events_ > 0) {
      std::printf("  time       %s (line 1) to %s (line %llu)\n", first_time_.c_str(), last_time_.c_str(),
                  static_cast<unsigned long long>(last_line_));
    }
  }

  void print_epochs() const {
    if (opened_order_.empty()) return;
    std::printf("  epochs     %zu\n", opened_order_.size());
    for (const EpochKey& key : opened_order_) {
      const auto& [split, source, epoch, rank] = key;
      const EpochEvents& e = epochs_.at(key);
      std::string line = "    " + audit_value_text(split) +
                         (source.empty() ? "" : " source " + audit_value_text(source)) + " epoch " +
                         audit_value_text(epoch) + (rank.empty() ? "" : " rank " + audit_value_text(rank)) + ": ";
      if (e.opened) {
        line += (e.resumed ? "resumed line " : "started line ") + std::to_string(e.opened->line) + " (" +
                e.opened->fields + ")";
      } else {
        line += "no opening line";
      }
      if (e.completed) {
        line += "; completed line " + std::to_string(e.completed->line) + " (" + e.completed->fields + ")";
      } else {
        line += "; not completed";
      }
      std::printf("%s\n", line.c_str());
    }
  }

  std::uint64_t events_ = 0, last_line_ = 0;
  std::string first_time_, last_time_;
  std::vector<std::pair<std::string, std::uint64_t>> counts_;  // in order of first appearance
  std::vector<std::string> notable_;                           // loads, stages, weight changes
  std::map<EpochKey, EpochEvents> epochs_;
  std::vector<EpochKey> opened_order_;
};

void audit(const std::string& path) {
  AuditLogReader reader(path);
  AuditSummary summary;
  while (const std::optional<AuditEvent> event = reader.next()) summary.add(*event);
  std::printf("tokenfeed audit: %s\n", audit_name_text(path).c_str());
  summary.print(reader.torn_line());
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
