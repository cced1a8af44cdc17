// The C++ kill -9 soak's child (driven by tests/kill_soak_test.py): a training-like consumer
// of the public API that checkpoints its loader the way a trainer does, and a reader of the
// audit logs the killed consumers leave.
//
//   kill_soak_consumer consume CONFIG.xml WORKDIR TOTAL_STEPS CHECKPOINT_EVERY STEP_PAUSE_US
//   kill_soak_consumer read-audit FILE
//
// consume keeps in WORKDIR:
//   checkpoint   "step N\n" then the loader's save_state() text: the trainer's step and the
//                loader state after N consumed batches, written to checkpoint.tmp, flushed to
//                disk and renamed over checkpoint, so no kill at any instant tears it
//   records.txt  one line per consumed batch, "STEP HASH" (a hash of every array of the
//                batch), each written with one write(2) as the batch is consumed
// On start it resumes from the checkpoint when there is one, keeps the records of the
// steps before it (those after it were consumed after the checkpoint, and are consumed again
// now) and consumes steps up to TOTAL_STEPS, pausing STEP_PAUSE_US per step (the training
// step). Exits 0 when done, 2 on a usage error, 3 when the checkpoint cannot be read (torn),
// 4 when a batch is not the step it should be, 1 on a tokenfeed::Error.
//
// read-audit prints "events N", "torn yes|no" and "actions A,B,..." for an audit log
// (read_audit_log, include/tokenfeed/audit.hpp), or the reader's error on stderr and exits 1.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tokenfeed/audit.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace fs = std::filesystem;

namespace {

// FNV-1a over bytes, chained across arrays.
struct Fnv {
  std::uint64_t value = 14695981039346656037ULL;
  template <typename T>
  void add(std::span<const T> data) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
    for (std::size_t i = 0; i < data.size_bytes(); ++i) value = (value ^ bytes[i]) * 1099511628211ULL;
    value = (value ^ data.size()) * 1099511628211ULL;  // array boundaries count
  }
};

std::uint64_t batch_hash(const tokenfeed::Batch& b) {
  Fnv h;
  h.add(b.tokens());
  h.add(b.y());
  h.add(b.labels());
  h.add(b.mask());
  h.add(b.token_weights());
  h.add(b.position_ids());
  h.add(b.cu_seqlens());
  h.add(b.episode_ids());
  h.add(b.doc_ids());
  h.add(b.source_ids());
  return h.value;
}

[[noreturn]] void die(int status, const std::string& what) {
  std::fprintf(stderr, "kill_soak_consumer: %s\n", what.c_str());
  std::exit(status);
}

// Writes all of `text` to `fd`, or dies.
void write_all(int fd, std::string_view text, const fs::path& path) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die(1, "cannot write '" + path.string() + "': " + std::strerror(errno));
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// What a trainer does with a checkpoint: temporary file, fsync, rename over the old one.
void replace_file(const fs::path& path, std::string_view text) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die(1, "cannot create '" + tmp.string() + "': " + std::strerror(errno));
  write_all(fd, text, tmp);
  if (::fsync(fd) != 0) die(1, "cannot flush '" + tmp.string() + "': " + std::strerror(errno));
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) die(1, "cannot rename '" + tmp.string() + "': " + std::strerror(errno));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::uint64_t parse_count(std::string_view text, const char* what) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    die(2, std::string("bad ") + what + ": '" + std::string(text) + "'");
  return value;
}

int consume(const fs::path& config_file, const fs::path& work, std::uint64_t total, std::uint64_t every,
            std::uint64_t pause_us) {
  tokenfeed::set_log_handler({});
  tokenfeed::Loader loader(tokenfeed::load_config_file(config_file));
  const fs::path checkpoint = work / "checkpoint";
  const fs::path records = work / "records.txt";

  std::uint64_t step = 0;
  if (fs::exists(checkpoint)) {
    const std::string text = read_file(checkpoint);
    const std::size_t newline = text.find('\n');
    if (!text.starts_with("step ") || newline == std::string::npos) die(3, "the checkpoint is torn: '" + text + "'");
    step = parse_count(std::string_view(text).substr(5, newline - 5), "checkpoint step");
    loader.load_state(std::string_view(text).substr(newline + 1));  // throws for a torn state
  }

  // The records of the steps before the checkpoint, complete lines only; replaced atomically
  // so that a kill now loses none of them.
  std::string kept;
  {
    std::istringstream in(read_file(records));
    std::string line;
    while (std::getline(in, line) && !in.eof()) {  // eof: the last line had no newline
      const std::size_t space = line.find(' ');
      if (space != std::string::npos && parse_count(std::string_view(line).substr(0, space), "record step") < step) {
        kept += line + "\n";
      }
    }
  }
  replace_file(records, kept);

  const int out = ::open(records.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (out < 0) die(1, "cannot open '" + records.string() + "': " + std::strerror(errno));
  for (; step < total; ++step) {
    std::uint64_t hash = 0;
    {
      const tokenfeed::Batch batch = loader.get_batch("train");
      if (batch.step() != step) {
        die(4, "batch step " + std::to_string(batch.step()) + " where step " + std::to_string(step) + " was due");
      }
      hash = batch_hash(batch);
    }
    write_all(out, std::to_string(step) + " " + std::to_string(hash) + "\n", records);
    if ((step + 1) % every == 0)
      replace_file(checkpoint, "step " + std::to_string(step + 1) + "\n" + loader.save_state());
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  ::close(out);
  return 0;
}

int read_audit(const fs::path& file) {
  const tokenfeed::AuditLogContents contents = tokenfeed::read_audit_log(file);
  std::string actions;
  for (const tokenfeed::AuditEvent& e : contents.events) actions += (actions.empty() ? "" : ",") + e.action;
  std::printf("events %zu\ntorn %s\nactions %s\n", contents.events.size(), contents.torn_line ? "yes" : "no",
              actions.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 6 && args[0] == "consume") {
      return consume(args[1], args[2], parse_count(args[3], "TOTAL_STEPS"), parse_count(args[4], "CHECKPOINT_EVERY"),
                     parse_count(args[5], "STEP_PAUSE_US"));
    }
    if (args.size() == 2 && args[0] == "read-audit") return read_audit(args[1]);
  } catch (const tokenfeed::Error& e) {
    die(1, e.what());
  }
  die(2, "usage: kill_soak_consumer consume CONFIG WORKDIR TOTAL EVERY PAUSE_US | read-audit FILE");
}
