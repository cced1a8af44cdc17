#include "prepare/corpus_shards.hpp"

#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>

#include "io/npy.hpp"
#include "util/sha256.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kNpyHeaderBytes = 128;  // npy_header of any 1-D array
constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

// A file written by appending through a buffer, cut back and reopened on resume.
class AppendFile {
 public:
  // Creates `path` (truncating it), or with `keep_bytes` set opens it and cuts it to that.
  AppendFile(fs::path path, bool resume, std::uint64_t keep_bytes) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | (resume ? 0 : O_CREAT | O_TRUNC), 0644);
    if (fd_ < 0) throw Error(ErrorKind::io, "cannot open '" + path_.string() + "' for writing: " + errno_text());
    if (resume) {
      struct stat st {};
      if (::fstat(fd_, &st) != 0) fail("cannot read the size of");
      if (static_cast<std::uint64_t>(st.st_size) < keep_bytes) {
        throw Error(ErrorKind::format, "'" + path_.string() + "' holds " + std::to_string(st.st_size) +
                                           " bytes, fewer than the " + std::to_string(keep_bytes) +
                                           " the resumed run had written: it cannot be resumed");
      }
      if (::ftruncate(fd_, static_cast<off_t>(keep_bytes)) != 0) fail("cannot cut back");
      if (::lseek(fd_, 0, SEEK_END) < 0) fail("cannot seek in");
    }
    buffer_.reserve(kBufferBytes);
  }
  ~AppendFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void write(const void* data, std::size_t bytes) {
    if (buffer_.size() + bytes > kBufferBytes) flush();
    if (bytes >= kBufferBytes) {
      write_all(static_cast<const char*>(data), bytes);
      return;
    }
    buffer_.insert(buffer_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void sync() {
    flush();
    if (::fsync(fd_) != 0 && errno != EINVAL && errno != ENOTSUP) fail("cannot flush to disk");
  }
  void rewrite_at_start(const std::string& bytes) {
    flush();
    if (::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) fail("cannot write");
  }
  void close() {
    flush();
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot close");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(ErrorKind::io, std::string(what) + " '" + path_.string() + "': " + errno_text());
  }
  void write_all(const char* data, std::size_t bytes) {
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, data, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      data += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }

  fs::path path_;
  int fd_ = -1;
  std::vector<char> buffer_;
};

const char* token_descr(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? "<u2" : "<u4"; }

}  // namespace

std::string shard_name(std::uint64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05llu", static_cast<unsigned long long>(index));
  return name;
}

std::vector<std::string> corpus_shard_files(CorpusFormat format, std::uint64_t index) {
  const std::string name = shard_name(index);
  if (format == CorpusFormat::tokens) return {name + ".npy", name + ".docs.npy"};
  return {name + "/tokens.bin", name + "/episodes.idx"};
}

const char* to_string(CorpusFormat format) noexcept { return format == CorpusFormat::tokens ? "tokens" : "episodes"; }

struct CorpusShardWriter::OpenFiles {
  AppendFile data;
  AppendFile index;
  OpenFiles(const fs::path& data_path, const fs::path& index_path, bool resume, std::uint64_t data_bytes,
            std::uint64_t index_bytes)
      : data(data_path, resume, data_bytes), index(index_path, resume, index_bytes) {}
};

CorpusShardWriter::CorpusShardWriter(fs::path split_dir, CorpusFormat format, TokenDtype dtype,
                                     std::uint64_t shard_tokens)
    : split_dir_(std::move(split_dir)), format_(format), dtype_(dtype), shard_tokens_(shard_tokens) {
  std::error_code ec;
  fs::create_directories(split_dir_, ec);
  if (ec) throw Error(ErrorKind::io, "cannot create '" + split_dir_.string() + "': " + ec.message());
}

CorpusShardWriter::~CorpusShardWriter() = default;

fs::path CorpusShardWriter::shard_file(std::uint64_t index, bool index_file) const {
  const std::string name = shard_name(index);
  if (format_ == CorpusFormat::tokens) return split_dir_ / (name + (index_file ? ".docs.npy" : ".npy"));
  return split_dir_ / name / (index_file ? "episodes.idx" : "tokens.bin");
}

std::uint64_t CorpusShardWriter::file_bytes(std::uint64_t tokens, std::uint64_t documents, bool index_file) const {
  const std::uint64_t header = format_ == CorpusFormat::tokens ? kNpyHeaderBytes : 0;
  if (index_file) return header + documents * (format_ == CorpusFormat::tokens ? 8 : 16);
  return header + tokens * size_of(dtype_);
}

void CorpusShardWriter::open_shard(bool resume, std::uint64_t tokens, std::uint64_t documents) {
  const std::uint64_t index = finished_.size();
  if (format_ == CorpusFormat::episodes) {
    std::error_code ec;
    fs::create_directories(shard_file(index, false).parent_path(), ec);
    if (ec) throw Error(ErrorKind::io, "cannot create a shard in '" + split_dir_.string() + "': " + ec.message());
  }
  open_ = std::make_unique<OpenFiles>(shard_file(index, false), shard_file(index, true), resume,
                                      file_bytes(tokens, documents, false), file_bytes(tokens, documents, true));
  if (!resume && format_ == CorpusFormat::tokens) {
    const std::string data_header = npy_header(token_descr(dtype_), {0});
    const std::string index_header = npy_header("<u8", {0});
    open_->data.write(data_header.data(), data_header.size());
    open_->index.write(index_header.data(), index_header.size());
  }
  open_tokens_ = tokens;
  open_documents_ = documents;
}

void CorpusShardWriter::restore(const CorpusSplitState& state) {
  // Sizes, not checksums: reading every finished shard back would cost a good part of what
  // resuming saves. The checksums recorded then go into the metadata (inspect --deep).
  for (std::size_t i = 0; i < state.finished.size(); ++i) {
    for (const bool index_file : {false, true}) {
      const fs::path path = shard_file(i, index_file);
      const std::uint64_t expected = file_bytes(state.finished[i].tokens, state.finished[i].documents, index_file);
      std::error_code ec;
      const std::uint64_t size = fs::file_size(path, ec);
      if (ec || size != expected) {
        throw Error(ErrorKind::format,
                    "'" + path.string() + "' is not the shard the resumed run finished (" +
                        (ec ? ec.message() : std::to_string(size) + " bytes, not " + std::to_string(expected)) + ")");
      }
    }
  }
  finished_ = state.finished;
  // No shard past the open one: a run killed while finishing a shard may have started the next.
  for (std::uint64_t i = finished_.size() + 1;; ++i) {
    std::error_code ec;
    const fs::path data = shard_file(i, false);
    if (!fs::exists(data, ec)) break;
    fs::remove_all(format_ == CorpusFormat::tokens ? data : data.parent_path(), ec);
    fs::remove(shard_file(i, true), ec);
  }
  if (state.open_tokens > 0) open_shard(true, state.open_tokens, state.open_documents);
}

void CorpusShardWriter::append(std::span<const std::span<const std::uint32_t>> pieces, std::uint64_t tokens) {
  if (!open_) open_shard(false, 0, 0);
  if (format_ == CorpusFormat::tokens) {
    open_->index.write(&open_tokens_, sizeof open_tokens_);
  } else {
    const std::uint64_t record[2] = {open_tokens_, tokens};
    open_->index.write(record, sizeof record);
  }
  // uint16 ids are narrowed this many at a time: the copy stays small whatever the document.
  constexpr std::size_t kNarrowRun = std::size_t{1} << 16;
  for (std::span<const std::uint32_t> piece : pieces) {
    if (dtype_ != TokenDtype::uint16) {
      open_->data.write(piece.data(), piece.size_bytes());
      continue;
    }
    while (!piece.empty()) {
      const std::span<const std::uint32_t> run = piece.first(std::min(piece.size(), kNarrowRun));
      narrow_.assign(run.begin(), run.end());
      open_->data.write(narrow_.data(), narrow_.size() * sizeof(std::uint16_t));
      piece = piece.subspan(run.size());
    }
  }
  open_tokens_ += tokens;
  ++open_documents_;
}

void CorpusShardWriter::finish_shard() {
  if (!open_) return;
  if (format_ == CorpusFormat::tokens) {
    open_->data.rewrite_at_start(npy_header(token_descr(dtype_), {open_tokens_}));
    open_->index.rewrite_at_start(npy_header("<u8", {open_documents_}));
  }
  open_->data.close();
  open_->index.close();
  open_.reset();
  CorpusShard shard;
  shard.tokens = open_tokens_;
  shard.documents = open_documents_;
  const std::uint64_t index = finished_.size();
  for (const bool index_file : {false, true}) {
    const fs::path path = shard_file(index, index_file);
    shard.sha256[path.lexically_relative(split_dir_).generic_string()] = sha256_file_hex(path);
  }
  finished_.push_back(std::move(shard));
  open_tokens_ = open_documents_ = 0;
}

void CorpusShardWriter::sync() {
  if (open_) {
    open_->data.sync();
    open_->index.sync();
  }
}

void CorpusShardWriter::finish() { finish_shard(); }

std::uint64_t CorpusShardWriter::tokens() const noexcept {
  std::uint64_t n = open_tokens_;
  for (const CorpusShard& s : finished_) n += s.tokens;
  return n;
}

std::uint64_t CorpusShardWriter::documents() const noexcept {
  std::uint64_t n = open_documents_;
  for (const CorpusShard& s : finished_) n += s.documents;
  return n;
}

}  // namespace tokenfeed
