// merge_text_parts (tokenfeed/prepare_text.hpp): the finished parts of prepare-text --task
// made into one dataset, staged and swapped in at once.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataset/dataset_metadata.hpp"
#include "io/staging_dir.hpp"
#include "prepare/corpus_shards.hpp"
#include "prepare/output_dir.hpp"
#include "prepare/text_parts.hpp"
#include "util/bounded_json.hpp"
#include "util/filesystem_errors.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/prepare_text.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kSplits[] = {"train", "val"};

// Every part's metadata, in task order. Throws Error(config) naming every task that is
// missing or unfinished, Error(format) for a part of another preparation.
std::vector<ordered_json> read_parts(const fs::path& out) {
  const fs::path parts = out / "parts";
  if (!fs::is_directory(parts)) {
    throw Error(ErrorKind::config, "'" + out.string() +
                                       "' has no parts/ to merge: run the tasks first (prepare-text "
                                       "--task I --num-tasks N)");
  }
  const ordered_json job = read_part_json(parts / "job.json");
  const auto count = job.at("num_tasks").get<std::uint32_t>();
  std::vector<ordered_json> metas;
  std::string missing;
  for (std::uint32_t i = 0; i < count; ++i) {
    const fs::path dir = parts / std::to_string(i);
    if (fs::exists(dir / "dataset_metadata.json")) {
      metas.push_back(read_part_json(dir / "dataset_metadata.json"));
      continue;
    }
    bool staged = false;
    for (const auto& entry : fs::directory_iterator(parts)) {
      staged = staged || entry.path().filename().string().starts_with("." + std::to_string(i) + ".tmp-");
    }
    missing += (missing.empty() ? " task " : "; task ") + std::to_string(i) + " " +
               (staged ? "unfinished (its staging directory is in " + parts.string() + "): run it again with --resume"
                       : "missing (no " + dir.string() + "): run it");
  }
  if (!missing.empty()) {
    throw Error(ErrorKind::config, "cannot merge '" + out.string() + "': not every one of its " +
                                       std::to_string(count) + " tasks has finished:" + missing);  // one line
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    const ordered_json& part = metas[i].at("part");
    if (part.at("task").get<std::uint32_t>() != i || part.at("num_tasks").get<std::uint32_t>() != count ||
        part.at("job_key") != job.at("job_key")) {
      throw Error(ErrorKind::format, "'" + (parts / std::to_string(i) / "dataset_metadata.json").string() +
                                         "' is not task " + std::to_string(i) + " of the " + std::to_string(count) +
                                         " recorded in '" + (parts / "job.json").string() + "'");
    }
  }
  return metas;
}

void link_file(const fs::path& from, const fs::path& to) {
  if (::link(from.c_str(), to.c_str()) != 0) {
    const int error = errno;
    throw Error(ErrorKind::io, "cannot link '" + from.string() + "' to '" + to.string() + "': " + std::strerror(error) +
                                   " (the merge moves shards by hard link, never copying)");
  }
}

// Links the shards of every part's `split` into `staging`/split under new numbers, in task
// order, and returns the split's content_sha256 entries and its shard count.
std::uint64_t link_split(const fs::path& out, const fs::path& staging, const std::vector<ordered_json>& metas,
                         const char* split, CorpusFormat format, ordered_json& sums) {
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const fs::path part = out / "parts" / std::to_string(i);
    const auto shards = metas[i].at("splits").at(split).at("shards").get<std::uint64_t>();
    for (std::uint64_t j = 0; j < shards; ++j, ++next) {
      const std::vector<std::string> from = corpus_shard_files(format, j);
      const std::vector<std::string> to = corpus_shard_files(format, next);
      if (format == CorpusFormat::episodes) fs::create_directories(staging / split / shard_name(next));
      for (std::size_t f = 0; f < from.size(); ++f) {
        const fs::path source(from[f]), target(to[f]);
        const bool nested = source.has_parent_path();
        const std::string key_from = nested ? std::string(split) + "/" + source.parent_path().string() : split;
        const std::string key_to = nested ? std::string(split) + "/" + target.parent_path().string() : split;
        const auto& hex = metas[i].at("content_sha256").at(key_from).at(source.filename().string());
        link_file(part / split / source, staging / split / target);
        sums[key_to][target.filename().string()] = hex;
      }
    }
  }
  return next;
}

// The parts' metadata made one: part 0's, with the counts summed and the parts' records gone.
ordered_json merged_metadata(const std::vector<ordered_json>& metas) {
  ordered_json meta = metas.front();
  for (const char* split : kSplits) {
    for (const char* field : {"documents", "tokens", "empty_documents", "skipped_lines"}) {
      std::uint64_t sum = 0;
      for (const ordered_json& m : metas) sum += m.at("splits").at(split).at(field).get<std::uint64_t>();
      meta["splits"][split][field] = sum;
    }
  }
  for (auto& [reason, count] : meta.at("skipped").items()) {
    std::uint64_t sum = 0;
    for (const ordered_json& m : metas) sum += m.at("skipped").at(reason).get<std::uint64_t>();
    count = sum;
  }
  std::uint64_t blank = 0;
  for (const ordered_json& m : metas) blank += m.at("documents").at("blank_lines").get<std::uint64_t>();
  meta["documents"]["blank_lines"] = blank;
  // An input's SHA-256 (--resume-check content) from a part that read it.
  ordered_json& inputs = meta["source"]["inputs"];
  for (std::size_t f = 0; f < inputs.size(); ++f) {
    for (const ordered_json& m : metas) {
      const ordered_json& theirs = m.at("source").at("inputs").at(f);
      if (!inputs[f].contains("sha256") && theirs.contains("sha256")) inputs[f]["sha256"] = theirs.at("sha256");
    }
  }
  meta.erase("part");
  return meta;
}

PrepareTextSummary summary_of(const ordered_json& meta, std::size_t parts) {
  PrepareTextSummary s;
  for (const char* split : kSplits) {
    const ordered_json& c = meta.at("splits").at(split);
    CorpusSplitSummary& out = std::string(split) == "val" ? s.val : s.train;
    out.documents = c.at("documents").get<std::uint64_t>();
    out.tokens = c.at("tokens").get<std::uint64_t>();
    out.empty_documents = c.at("empty_documents").get<std::uint64_t>();
    out.skipped_lines = c.at("skipped_lines").get<std::uint64_t>();
    out.shards = c.at("shards").get<std::uint64_t>();
  }
  for (const auto& [reason, count] : meta.at("skipped").items()) {
    if (count.get<std::uint64_t>() > 0) s.skipped[reason] = SkippedLines{count.get<std::uint64_t>(), 0, ""};
  }
  s.blank_lines = meta.at("documents").at("blank_lines").get<std::uint64_t>();
  s.input_files = meta.at("source").at("files").get<std::uint64_t>();
  s.input_bytes = meta.at("source").at("bytes").get<std::uint64_t>();
  s.token_dtype = parse_token_dtype(meta.at("token_dtype").get<std::string>()).value_or(TokenDtype::uint32);
  s.vocab_size = meta.at("vocab_size").get<std::uint64_t>();
  if (!meta.at("eos_token_id").is_null()) s.eos_id = meta.at("eos_token_id").get<std::uint32_t>();
  if (!meta.at("bos_token_id").is_null()) s.bos_id = meta.at("bos_token_id").get<std::uint32_t>();
  s.shards_reused = parts;
  return s;
}

PrepareTextSummary merge(const fs::path& output_dir) {
  const fs::path out = normalized_output(output_dir);
  std::vector<ordered_json> metas;
  try {
    metas = read_parts(out);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::format, "cannot merge '" + out.string() + "': a part's record is damaged: " + e.what());
  }
  ordered_json meta = merged_metadata(metas);
  const CorpusFormat format = meta.at("corpus_format") == "episodes" ? CorpusFormat::episodes : CorpusFormat::tokens;
  if (meta["splits"]["train"]["documents"].get<std::uint64_t>() == 0) {
    throw Error(ErrorKind::format, "no document landed in train in any of the " + std::to_string(metas.size()) +
                                       " parts: the train split needs at least one");
  }
  PrepareTextSummary summary;
  summary.removed_stale_dirs = remove_stale_staging_dirs(out);
  StagingDir staging(out);
  ordered_json sums = ordered_json::object();
  for (const char* split : kSplits) {
    if (meta["splits"][split]["documents"].get<std::uint64_t>() == 0) continue;
    fs::create_directories(staging.path() / split);
    meta["splits"][split]["shards"] = link_split(out, staging.path(), metas, split, format, sums);
  }
  meta["content_sha256"] = sums;
  write_metadata_document(staging.path(), meta);
  const fs::path replaced = staging.commit_exchanging();
  std::error_code ec;
  fs::remove_all(replaced, ec);
  if (ec) throw Error(ErrorKind::io, "merged, but cannot remove '" + replaced.string() + "': " + ec.message());
  const std::vector<fs::path> removed = summary.removed_stale_dirs;
  summary = summary_of(meta, metas.size());
  summary.removed_stale_dirs = removed;
  summary.written = out;
  return summary;
}

}  // namespace

PrepareTextSummary merge_text_parts(const fs::path& output_dir) {
  return filesystem_errors_as_io([&] { return merge(output_dir); });
}

}  // namespace tokenfeed
