#include "tokenfeed/dataset_writer.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include "dataset/content_checksum.hpp"
#include "io/staging_dir.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"
#include "util/filesystem_errors.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

// A buffered binary output file that reports failures as Error(io) naming the file.
class OutputFile {
 public:
  OutputFile() = default;
  explicit OutputFile(fs::path path) : path_(std::move(path)) {
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) {
      throw Error(ErrorKind::io, "cannot create '" + path_.string() + "': " + std::strerror(errno));
    }
  }
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  OutputFile(OutputFile&& o) noexcept : path_(std::move(o.path_)), file_(std::exchange(o.file_, nullptr)) {}
  OutputFile& operator=(OutputFile&& o) noexcept {
    if (this != &o) {
      if (file_ != nullptr) std::fclose(file_);
      path_ = std::move(o.path_);
      file_ = std::exchange(o.file_, nullptr);
    }
    return *this;
  }

  void write(const void* data, std::size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, file_) != bytes) {
      throw Error(ErrorKind::io, "cannot write '" + path_.string() + "': " + std::strerror(errno));
    }
  }
  void close() {
    if (file_ == nullptr) return;
    const int rc = std::fclose(std::exchange(file_, nullptr));
    if (rc != 0) throw Error(ErrorKind::io, "cannot close '" + path_.string() + "': " + std::strerror(errno));
  }
  bool is_open() const noexcept { return file_ != nullptr; }

 private:
  fs::path path_;
  std::FILE* file_ = nullptr;
};

std::string shard_name(std::uint64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05llu", static_cast<unsigned long long>(index));
  return name;
}

// `split_dir` made absolute with its existing parts' symbolic links resolved, without a
// trailing separator, so that its parent is where the staging directory goes.
fs::path target_path(const fs::path& split_dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(split_dir), ec);
  if (ec) throw Error(ErrorKind::io, "cannot resolve '" + split_dir.string() + "': " + ec.message());
  if (!p.has_filename()) p = p.parent_path();
  if (!p.has_filename() || p == p.root_path()) {
    throw Error(ErrorKind::io, "cannot write a split at '" + split_dir.string() + "': give a directory below the root");
  }
  return p;
}

// Throws unless `dir` is absent, an empty directory, or (with overwrite) a directory.
void check_target(const fs::path& dir, const fs::path& given, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw Error(ErrorKind::io, "cannot inspect '" + given.string() + "': " + ec.message());
  }
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw Error(ErrorKind::io, "'" + given.string() + "' exists and is not a directory");
  if (overwrite) return;
  fs::directory_iterator it(dir, ec);
  if (ec) throw Error(ErrorKind::io, "cannot read '" + given.string() + "': " + ec.message());
  if (it != fs::directory_iterator()) {
    throw Error(ErrorKind::io, "'" + given.string() + "' is not empty (it holds '" + it->path().filename().string() +
                                   "'): a split written over another one would mix their shards; write into a new "
                                   "or empty directory, or pass overwrite=true to replace it");
  }
}

// A new hidden directory beside `target` (whose parent exists): parent/.NAME.KIND-PID-N.
fs::path make_sibling_dir(const fs::path& target, const char* kind) {
  static std::atomic<unsigned long> counter{0};
  const fs::path parent = target.parent_path();
  std::error_code ec;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on "." + std::string at -O3.
    std::string name = ".";
    name += target.filename().string();
    name += '.';
    name += kind;
    name += '-';
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(counter.fetch_add(1));
    const fs::path dir = parent / name;
    if (fs::create_directory(dir, ec)) return dir;
    if (ec) throw Error(ErrorKind::io, "cannot create '" + dir.string() + "': " + ec.message());
  }
  throw Error(ErrorKind::io, "cannot create a temporary directory in '" + parent.string() + "'");
}

}  // namespace

struct EpisodeDatasetWriter::Impl {
  fs::path given_dir;  // as the caller named it, for messages
  fs::path split_dir;  // where finish() puts the split
  std::unique_ptr<StagingDir> staging;  // where the shards are written until then; null once discarded
  EpisodeDatasetWriterOptions options;
  EpisodeDatasetWriterSummary summary;
  OutputFile tokens, mask, index;
  std::uint64_t shard_tokens_written = 0;
  enum class State { writing, finished, discarded } state = State::writing;
  std::vector<std::uint16_t> narrow;  // reused conversion buffer for uint16 output

  void open_shard() {
    const fs::path dir = staging->path() / shard_name(summary.shards);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(ErrorKind::io, "cannot create '" + dir.string() + "': " + ec.message());
    tokens = OutputFile(dir / "tokens.bin");
    index = OutputFile(dir / "episodes.idx");
    if (options.write_mask) mask = OutputFile(dir / "mask.bin");
    shard_tokens_written = 0;
    ++summary.shards;
  }

  void close_shard() {
    tokens.close();
    index.close();
    mask.close();
  }

  void discard() noexcept {
    if (state != State::writing) return;
    state = State::discarded;
    tokens = OutputFile();
    index = OutputFile();
    mask = OutputFile();
    staging.reset();  // removes the staging directory and what was written
  }

  // Publishes the staging directory as split_dir (flushed to disk, then renamed: see
  // StagingDir::commit), which replaces an absent or empty split_dir atomically; with
  // overwrite, a non-empty one is first moved aside, then removed.
  void commit() {
    check_target(split_dir, given_dir, options.overwrite);  // throws the message for a non-empty split_dir
    std::error_code ec;
    fs::path old;  // the split being replaced, moved aside
    if (fs::is_directory(split_dir, ec) && !fs::is_empty(split_dir, ec)) {
      old = make_sibling_dir(split_dir, "replaced");
      fs::rename(split_dir, old, ec);  // `old` is an empty directory: the rename replaces it
      if (ec) {
        fs::remove(old, ec);
        throw Error(ErrorKind::io, "cannot move '" + given_dir.string() + "' aside to replace it: " + ec.message());
      }
    }
    try {
      staging->commit();
    } catch (...) {
      if (!old.empty()) fs::rename(old, split_dir, ec);  // put the old split back
      throw;
    }
    if (!old.empty()) fs::remove_all(old, ec);  // the new split is in place; a leftover is only a hidden directory
  }
};

// The constructor, add and finish turn a filesystem error (a symbolic link loop where the
// split goes) into tokenfeed's.
EpisodeDatasetWriter::EpisodeDatasetWriter(fs::path split_dir, EpisodeDatasetWriterOptions options) try
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.given_dir = split_dir;
  s.options = options;
  s.split_dir = target_path(split_dir);
  check_target(s.split_dir, s.given_dir, options.overwrite);
  std::error_code ec;
  fs::create_directories(s.split_dir.parent_path(), ec);
  if (ec) throw Error(ErrorKind::io, "cannot create '" + s.split_dir.parent_path().string() + "': " + ec.message());
  // A writer of this split that was killed left its staging directory: nothing will ever
  // finish it, so it goes (only when its process is gone and nobody holds its lock).
  for (const fs::path& stale : remove_stale_staging_dirs(s.split_dir, StagingContents::split)) {
    log_line(LogLevel::info, "[tokenfeed] removed '" + stale.string() + "', left by an earlier writer of '" +
                                 s.given_dir.string() + "' that was killed");
  }
  s.staging = std::make_unique<StagingDir>(s.split_dir);
  try {
    s.open_shard();
  } catch (...) {
    s.discard();
    throw;
  }
} catch (const fs::filesystem_error& e) {
  throw io_error_of(e);
}

EpisodeDatasetWriter::~EpisodeDatasetWriter() { impl_->discard(); }

void EpisodeDatasetWriter::add(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> mask) try {
  Impl& s = *impl_;
  if (s.state == Impl::State::finished) throw Error(ErrorKind::usage, "EpisodeDatasetWriter::add after finish()");
  if (s.state == Impl::State::discarded) throw Error(ErrorKind::usage, "EpisodeDatasetWriter::add after discard()");
  if (s.options.write_mask && mask.size() != tokens.size()) {
    throw Error(ErrorKind::usage, "EpisodeDatasetWriter::add: mask has " + std::to_string(mask.size()) +
                                      " values for " + std::to_string(tokens.size()) + " tokens");
  }
  if (s.options.token_dtype == TokenDtype::uint16) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] > 0xffff) {
        throw Error(ErrorKind::format, "token id " + std::to_string(tokens[i]) + " of episode " +
                                           std::to_string(s.summary.episodes) + " does not fit uint16");
      }
    }
  }
  if (s.options.shard_tokens != 0 && s.shard_tokens_written != 0 &&
      s.shard_tokens_written + tokens.size() > s.options.shard_tokens) {
    s.close_shard();
    s.open_shard();
  }
  const std::uint64_t record[2] = {s.shard_tokens_written, tokens.size()};
  if (s.options.token_dtype == TokenDtype::uint16) {
    s.narrow.resize(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) s.narrow[i] = static_cast<std::uint16_t>(tokens[i]);  // fits: checked
    s.tokens.write(s.narrow.data(), s.narrow.size() * sizeof(std::uint16_t));
  } else {
    s.tokens.write(tokens.data(), tokens.size_bytes());
  }
  s.index.write(record, sizeof record);
  if (s.options.write_mask) {
    for (const std::uint8_t m : mask) s.summary.masked_tokens += m != 0 ? 1 : 0;
    s.mask.write(mask.data(), mask.size_bytes());
  }
  s.shard_tokens_written += tokens.size();
  s.summary.tokens += tokens.size();
  ++s.summary.episodes;
} catch (const fs::filesystem_error& e) {
  throw io_error_of(e);
}

EpisodeDatasetWriterSummary EpisodeDatasetWriter::finish() try {
  Impl& s = *impl_;
  if (s.state == Impl::State::finished) return s.summary;
  if (s.state == Impl::State::discarded) throw Error(ErrorKind::usage, "EpisodeDatasetWriter::finish after discard()");
  try {
    s.close_shard();
    s.commit();
  } catch (...) {
    s.discard();
    throw;
  }
  s.state = Impl::State::finished;
  if (s.options.record_checksums) {
    ContentChecksums sums;
    const std::string split = s.split_dir.filename().string();
    for (std::uint64_t i = 0; i < s.summary.shards; ++i) {
      sums[split + "/" + shard_name(i)] = checksum_shard(s.split_dir / shard_name(i));
    }
    record_content_checksums(s.split_dir.parent_path(), split, sums);
  }
  return s.summary;
} catch (const fs::filesystem_error& e) {
  throw io_error_of(e);
}

void EpisodeDatasetWriter::discard() noexcept { impl_->discard(); }

bool EpisodeDatasetWriter::finished() const noexcept { return impl_->state == Impl::State::finished; }

}  // namespace tokenfeed
