// StagingDir: the temporary sibling directory a dataset (`tokenfeed prepare`) or a split
// (EpisodeDatasetWriter) is written into before it is published under its final name, so
// that a failed or interrupted run never leaves a directory that looks complete.
//
// For the output PARENT/NAME the staging directory is PARENT/.NAME.tmp-PID-RANDOM (PID: the
// writing process, RANDOM: 16 hex digits, so that runs of one process, or of processes
// that reuse a pid, never share one). The writer holds an exclusive flock(2) on it from
// creation until it is published or removed; the kernel releases that lock however the
// process ends, SIGKILL included, which is how a later run tells a leftover from a live run.
//
// commit() makes the result durable before and after it appears: every file and directory
// under the staging directory is fsync'ed, the directory is renamed to PARENT/NAME (which
// must not exist, or be an empty directory), then PARENT is fsync'ed. A crash at any point
// leaves either no PARENT/NAME or a complete one, never a renamed but truncated dataset.
//
// Thread-safety: a StagingDir is used by one thread. Creating one and
// remove_stale_staging_dirs() may run concurrently from any threads and processes.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace tokenfeed {

class StagingDir {
 public:
  // Creates and locks the staging directory of `final_dir` (absolute, no trailing
  // separator; its parent must exist). Throws Error(io) when it cannot be created.
  explicit StagingDir(std::filesystem::path final_dir);
  // Removes the staging directory and everything in it unless commit() succeeded or keep()
  // was called.
  ~StagingDir();

  // Takes over the staging directory a killed run of `final_dir` left behind (prepare-text
  // --resume): the first leftover (the conditions remove_stale_staging_dirs checks, in name
  // order) for which `accept(dir)` is true is renamed to a name of this process, locked, and
  // returned; nullptr when there is none. Throws Error(io) when the rename fails.
  static std::unique_ptr<StagingDir> adopt_stale(const std::filesystem::path& final_dir,
                                                 const std::function<bool(const std::filesystem::path&)>& accept);

  // Leaves the staging directory in place when this object goes (an interrupted run that
  // can be resumed); a later run takes it over or removes it.
  void keep() noexcept { kept_ = true; }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

  // fsync everything, rename to the final directory, fsync its parent. Throws Error(io)
  // when a step fails (the staging directory is then still removed by the destructor).
  void commit();
  // For a final directory that exists and is not empty (prepare-text --merge, whose OUT holds
  // the tasks' parts): fsync everything, then swap the staging directory and the final one
  // in one step (renameat2 RENAME_EXCHANGE), fsync the parent. Returns the path that now
  // holds what the final directory held, for the caller to remove. On a file system without
  // RENAME_EXCHANGE: the final directory is first renamed aside (to the returned path), then
  // the staging directory renamed in its place; a crash between the two renames leaves
  // the final directory missing and its old contents at the returned path. Throws Error(io)
  // when a step fails.
  std::filesystem::path commit_exchanging();

 private:
  StagingDir(std::filesystem::path final_dir, std::filesystem::path path, int lock_fd);

  std::filesystem::path final_dir_;
  std::filesystem::path path_;
  int lock_fd_ = -1;
  bool committed_ = false;
  bool kept_ = false;
};

// What a staging directory holds, which decides whether a leftover one is ours to remove.
enum class StagingContents {
  dataset,  // `tokenfeed prepare` and `prepare-text`: train/, val/, the dataset writer's staging
            // directories for them (.train.*, .val.*), dataset_metadata.json,
            // tokenizer_state.json, prepare-text's manifest and shard journal
  split,    // EpisodeDatasetWriter: shard directories shard_NNNNN
};

// Removes the staging directories of `final_dir` left behind by runs that are gone (killed,
// or crashed before they could clean up), and returns them. A directory is removed only when
// all of these hold:
//   - its name is .NAME.tmp-PID or .NAME.tmp-PID-SUFFIX, and it is a directory, not a link;
//   - PID is not a live process on this host (kill(PID, 0) fails with ESRCH), or it is this
//     process's own pid (then the lock below tells: this process's live runs hold theirs);
//   - nobody holds its lock (flock LOCK_EX|LOCK_NB succeeds; the lock is kept while removing),
//     which also protects the runs of other hosts or pid namespaces sharing the filesystem;
//   - it holds nothing but what `contents` says such a run writes.
// A directory that cannot be checked (a filesystem without flock, a permission error) is left
// alone. Throws Error(io) only when a stale directory is found but cannot be removed.
std::vector<std::filesystem::path> remove_stale_staging_dirs(const std::filesystem::path& final_dir,
                                                             StagingContents contents = StagingContents::dataset);

// True when `name` is named as a staging directory is: .NAME.tmp-PID or .NAME.tmp-PID-SUFFIX.
bool is_staging_dir_name(std::string_view name);

// Throws Error(io) when `dataset_dir` is not a dataset but the staging directory of a
// `tokenfeed prepare` or dataset writer that was killed or is still writing (by its name,
// symbolic links resolved), or when it has no train split while it holds the staging
// directory of one (.train.tmp-...): a dataset that is not finished, which must never be
// read as if it were.
void refuse_staging_dir(const std::filesystem::path& dataset_dir);

}  // namespace tokenfeed
