#include "tokenfeed/dataset_writer.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tokenfeed/error.hpp"

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

}  // namespace

struct EpisodeDatasetWriter::Impl {
  fs::path split_dir;
  EpisodeDatasetWriterOptions options;
  EpisodeDatasetWriterSummary summary;
  OutputFile tokens, mask, index;
  std::uint64_t shard_tokens_written = 0;
  bool finished = false;
  std::vector<std::uint16_t> narrow;  // reused conversion buffer for uint16 output

  void open_shard() {
    const fs::path dir = split_dir / shard_name(summary.shards);
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
};

EpisodeDatasetWriter::EpisodeDatasetWriter(fs::path split_dir, EpisodeDatasetWriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->split_dir = std::move(split_dir);
  impl_->options = options;
  impl_->open_shard();
}

EpisodeDatasetWriter::~EpisodeDatasetWriter() {
  try {
    finish();
  } catch (...) {
    // Destructors must not throw; call finish() to see write errors.
  }
}

void EpisodeDatasetWriter::add(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> mask) {
  Impl& s = *impl_;
  if (s.finished) throw Error(ErrorKind::usage, "EpisodeDatasetWriter::add after finish()");
  if (s.options.write_mask && mask.size() != tokens.size()) {
    throw Error(ErrorKind::usage, "EpisodeDatasetWriter::add: mask has " + std::to_string(mask.size()) +
                                      " values for " + std::to_string(tokens.size()) + " tokens");
  }
  if (s.options.shard_tokens != 0 && s.shard_tokens_written != 0 &&
      s.shard_tokens_written + tokens.size() > s.options.shard_tokens) {
    s.close_shard();
    s.open_shard();
  }
  const std::uint64_t record[2] = {s.shard_tokens_written, tokens.size()};
  if (s.options.token_dtype == TokenDtype::uint16) {
    s.narrow.resize(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] > 0xffff) {
        throw Error(ErrorKind::format, "token id " + std::to_string(tokens[i]) + " of episode " +
                                           std::to_string(s.summary.episodes) + " does not fit uint16");
      }
      s.narrow[i] = static_cast<std::uint16_t>(tokens[i]);
    }
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
}

EpisodeDatasetWriterSummary EpisodeDatasetWriter::finish() {
  if (!impl_->finished) {
    impl_->finished = true;
    impl_->close_shard();
  }
  return impl_->summary;
}

}  // namespace tokenfeed
