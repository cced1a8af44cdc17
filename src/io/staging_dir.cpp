#include "io/staging_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>  // renameat2
#include <cstring>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include "tokenfeed/error.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

// Serializes, within this process, creating-and-locking a staging directory with the scan for
// stale ones: between mkdir and flock a new directory is unlocked, and its pid (ours) alive,
// so only a scan from this same process could mistake it for a leftover.
Mutex g_staging_mutex;

// What prepare writes at the top of a dataset directory: the splits, the EpisodeDatasetWriter's
// staging directories for them while it writes (.train.tmp-PID-RANDOM, ...), the JSON files
// (the metadata's written to a temporary name first) and prepare-text's shard journal. A
// staging directory holding
// anything else is not ours to remove.
bool is_prepare_entry(const std::string& name) {
  return name == "train" || name == "val" || name.starts_with(".train.") || name.starts_with(".val.") ||
         name == "dataset_metadata.json" || name.starts_with(".dataset_metadata.json.tmp-") ||
         name == "tokenizer_state.json" || name == "prepare_text_manifest.json" ||
         name == "prepare_text_shards.jsonl" || name.starts_with(".prepare_text_manifest.json.tmp");
}

// What EpisodeDatasetWriter writes into a split's staging directory: shard_NNNNN.
bool is_split_entry(const std::string& name) {
  return name.size() > 6 && name.starts_with("shard_") && name.find_first_not_of("0123456789", 6) == std::string::npos;
}

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string staging_prefix(const fs::path& final_dir) { return "." + final_dir.filename().string() + ".tmp-"; }

// 16 random hex digits.
std::string random_suffix() {
  std::random_device device;
  const std::uint64_t value = (std::uint64_t{device()} << 32) ^ device();
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = kDigits[(value >> (4 * (15 - i))) & 0xf];
  return text;
}

// The pid in NAME = PREFIX + PID [+ "-" SUFFIX], or 0 when NAME is not a staging name.
pid_t staging_pid(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return 0;
  name.remove_prefix(prefix.size());
  const std::size_t dash = name.find('-');
  const std::string_view digits = name.substr(0, dash);
  if (dash != std::string_view::npos && dash + 1 == name.size()) return 0;  // "PID-" with no suffix
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return 0;
  return pid;
}

// True when `pid` is certainly not a live process here (kill reports no such process).
bool process_is_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// fsync of a path. Filesystems that cannot sync (EINVAL, ENOTSUP) give no durability to lose,
// so they are not errors; nor is a directory this process may write but not read (EACCES on
// opening it), which cannot be synced by it at all.
void sync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0 && directory && errno == EACCES) return;
  if (fd < 0) throw Error(ErrorKind::io, "cannot open '" + path.string() + "' to flush it: " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL && error != ENOTSUP) {
    throw Error(ErrorKind::io, "cannot flush '" + path.string() + "' to disk: " + errno_text(error));
  }
}

// Every regular file and directory under `dir`, then `dir` itself.
void sync_tree(const fs::path& dir) {
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const fs::file_status st = entry.symlink_status();
    if (fs::is_directory(st)) {
      sync_tree(entry.path());
    } else if (fs::is_regular_file(st)) {
      sync_path(entry.path(), false);
    }
  }
  sync_path(dir, true);
}

}  // namespace

StagingDir::StagingDir(fs::path final_dir) : final_dir_(std::move(final_dir)) {
  const fs::path parent = final_dir_.parent_path();
  const std::string prefix = staging_prefix(final_dir_) + std::to_string(::getpid()) + "-";
  const MutexLock lock(g_staging_mutex);
  for (int attempt = 0;; ++attempt) {
    path_ = parent / (prefix + random_suffix());
    if (::mkdir(path_.c_str(), 0777) == 0) break;
    const int error = errno;
    if (error != EEXIST || attempt == 8) {
      const fs::path failed = path_;
      path_.clear();
      throw Error(ErrorKind::io, "cannot create '" + failed.string() + "': " + errno_text(error));
    }
  }
  lock_fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Without a lock (a filesystem that has none) the directory is still removed by this run
  // on failure; a later scan cannot lock it either and leaves it alone.
  if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX | LOCK_NB);
}

StagingDir::StagingDir(fs::path final_dir, fs::path path, int lock_fd)
    : final_dir_(std::move(final_dir)), path_(std::move(path)), lock_fd_(lock_fd) {}

StagingDir::~StagingDir() {
  if (!committed_ && !kept_ && !path_.empty()) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock, after the removal
}

void StagingDir::commit() {
  sync_tree(path_);
  std::error_code ec;
  fs::rename(path_, final_dir_, ec);
  if (ec) {
    throw Error(ErrorKind::io,
                "cannot rename '" + path_.string() + "' to '" + final_dir_.string() + "': " + ec.message());
  }
  committed_ = true;
  sync_path(final_dir_.parent_path(), true);  // the rename itself
}

fs::path StagingDir::commit_exchanging() {
  sync_tree(path_);
  if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, final_dir_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    sync_path(final_dir_.parent_path(), true);
    return path_;
  }
  const int error = errno;
  if (error != EINVAL && error != ENOSYS && error != ENOTSUP) {
    throw Error(ErrorKind::io,
                "cannot exchange '" + path_.string() + "' and '" + final_dir_.string() + "': " + std::strerror(error));
  }
  const fs::path aside =
      final_dir_.parent_path() / ("." + final_dir_.filename().string() + ".replaced-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::rename(final_dir_, aside, ec);
  if (ec) {
    throw Error(ErrorKind::io,
                "cannot rename '" + final_dir_.string() + "' to '" + aside.string() + "': " + ec.message());
  }
  fs::rename(path_, final_dir_, ec);
  if (ec) {
    throw Error(ErrorKind::io, "cannot rename '" + path_.string() + "' to '" + final_dir_.string() +
                                   "' (its old contents are at '" + aside.string() + "'): " + ec.message());
  }
  committed_ = true;
  sync_path(final_dir_.parent_path(), true);
  return aside;
}

namespace {

// Calls visit(dir, fd) for each staging directory of `final_dir` whose run is gone, with `fd`
// open on it and locked; visit returns true to keep the fd (it then owns it) and stop.
void for_each_stale(const fs::path& final_dir, const std::function<bool(const fs::path&, int)>& visit)
    TF_REQUIRES(g_staging_mutex) {
  const fs::path parent = final_dir.parent_path();
  const std::string prefix = staging_prefix(final_dir);
  const pid_t self = ::getpid();
  std::error_code ec;
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path dir = it->path();
    const pid_t pid = staging_pid(dir.filename().string(), prefix);
    if (pid == 0) continue;
    std::error_code st_ec;
    if (!fs::is_directory(it->symlink_status(st_ec)) || st_ec) continue;
    if (pid != self && !process_is_gone(pid)) continue;
    candidates.push_back(dir);
  }
  std::sort(candidates.begin(), candidates.end());
  for (const fs::path& dir : candidates) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // a live run holds it, or no locks here
      ::close(fd);
      continue;
    }
    if (visit(dir, fd)) return;
    ::close(fd);
  }
}

}  // namespace

std::unique_ptr<StagingDir> StagingDir::adopt_stale(const fs::path& final_dir,
                                                    const std::function<bool(const fs::path&)>& accept) {
  const MutexLock lock(g_staging_mutex);
  std::unique_ptr<StagingDir> adopted;
  for_each_stale(final_dir, [&](const fs::path& dir, int fd) {
    if (!accept(dir)) return false;
    const fs::path renamed =
        final_dir.parent_path() / (staging_prefix(final_dir) + std::to_string(::getpid()) + "-" + random_suffix());
    std::error_code ec;
    fs::rename(dir, renamed, ec);
    if (ec) {
      ::close(fd);
      throw Error(ErrorKind::io, "cannot take over '" + dir.string() + "': " + ec.message());
    }
    adopted.reset(new StagingDir(final_dir, renamed, fd));
    return true;
  });
  return adopted;
}

std::vector<fs::path> remove_stale_staging_dirs(const fs::path& final_dir, StagingContents contents) {
  const auto is_ours = contents == StagingContents::dataset ? is_prepare_entry : is_split_entry;
  std::vector<fs::path> removed;
  const MutexLock lock(g_staging_mutex);
  for_each_stale(final_dir, [&](const fs::path& dir, int fd) {
    bool ours = true;
    std::error_code list_ec;
    for (fs::directory_iterator child(dir, list_ec); !list_ec && child != fs::directory_iterator();
         child.increment(list_ec)) {
      ours = ours && is_ours(child->path().filename().string());
    }
    if (ours && !list_ec) {
      std::error_code rm_ec;
      fs::remove_all(dir, rm_ec);
      if (rm_ec) {
        ::close(fd);
        throw Error(ErrorKind::io, "cannot remove the stale temporary directory '" + dir.string() +
                                       "' of an earlier run: " + rm_ec.message());
      }
      removed.push_back(dir);
    }
    return false;
  });
  return removed;
}

bool is_staging_dir_name(std::string_view name) {
  constexpr std::string_view kMarker = ".tmp-";
  const std::size_t marker = name.rfind(kMarker);
  // ".NAME" before the marker, NAME non-empty.
  if (marker == std::string_view::npos || marker < 2 || name[0] != '.') return false;
  return staging_pid(name, name.substr(0, marker + kMarker.size())) != 0;
}

void refuse_staging_dir(const fs::path& dataset_dir) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::absolute(dataset_dir, ec), ec);
  if (ec) resolved = dataset_dir.lexically_normal();
  if (!resolved.has_filename()) resolved = resolved.parent_path();
  if (is_staging_dir_name(resolved.filename().string())) {
    throw Error(ErrorKind::io, "'" + dataset_dir.string() +
                                   "' is not a dataset: it is the staging directory of an unfinished `tokenfeed "
                                   "prepare` or dataset writer that was killed (or is still writing). Its output "
                                   "appears under its final name only once complete; run it again (the new run "
                                   "removes a killed run's staging directory)");
  }
  for (const char* split : {"train", "train.bin", "train.npy"}) {
    if (fs::exists(dataset_dir / split, ec)) return;
  }
  const std::string prefix = ".train.tmp-";
  for (fs::directory_iterator it(dataset_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(prefix) && is_staging_dir_name(name)) {
      throw Error(ErrorKind::io, "dataset '" + dataset_dir.string() + "' has no train split, only '" + name +
                                     "', the staging directory of an unfinished dataset writer that was killed (or "
                                     "is still writing): write the split again (the new writer removes a killed "
                                     "one's staging directory)");
    }
  }
}

}  // namespace tokenfeed
