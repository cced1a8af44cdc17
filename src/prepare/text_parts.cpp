#include "prepare/text_parts.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>
#include <system_error>

#include "util/bounded_json.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kJobName = "job.json";

// Products of a byte count and a task count or piece index, which may pass 64 bits.
__extension__ typedef unsigned __int128 Wide;

bool has_suffix(const fs::path& p, std::string_view suffix) { return p.filename().string().ends_with(suffix); }

// A file read line by line that is not compressed (by name, then by its first bytes).
bool splittable(const TextInputFile& f, const TextReadOptions& read) {
  const bool lines =
      f.format == TextInputFormat::jsonl || (f.format == TextInputFormat::text && read.doc_per == DocPer::line);
  if (!lines || has_suffix(f.path, ".gz") || has_suffix(f.path, ".zst")) return false;
  std::ifstream in(f.path, std::ios::binary);
  unsigned char magic[4] = {};
  in.read(reinterpret_cast<char*>(magic), sizeof magic);
  const std::streamsize n = in.gcount();
  if (!in && n == 0) return false;  // unreadable: the reader says so, for the whole file
  const bool zstd = n >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd;
  const bool gzip = n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  return !zstd && !gzip;
}

std::uint32_t task_of(std::uint64_t start, std::uint64_t length, std::uint64_t total, std::uint32_t count) {
  if (total == 0) return 0;
  const Wide middle = static_cast<Wide>(start) * 2 + length;
  const auto task = static_cast<std::uint64_t>(middle * count / (static_cast<Wide>(total) * 2));
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(task, count - 1));
}

// Writes `doc` to `path` unless the file exists (link(2) of a complete temporary file:
// concurrent tasks see one of them, whole).
void create_once(const fs::path& path, const ordered_json& doc) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(2) << '\n';
    out.close();
    if (!out) throw Error(ErrorKind::io, "cannot write '" + tmp.string() + "'");
  }
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int error = errno;
  std::error_code ec;
  fs::remove(tmp, ec);
  if (rc != 0 && error != EEXIST) {
    throw Error(ErrorKind::io, "cannot create '" + path.string() + "': " + std::strerror(error));
  }
}

// The value of environment variable `name` as a task number; nullopt when unset.
std::optional<std::uint64_t> env_number(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  const std::string_view text(value);
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      n > std::numeric_limits<std::uint32_t>::max()) {
    throw Error(ErrorKind::config,
                std::string("--task auto: ") + name + "='" + std::string(text) + "' is not a task number");
  }
  return n;
}

}  // namespace

ordered_json read_part_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot read '" + path.string() + "'");
  try {
    return parse_bounded_json(in);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::format, "'" + path.string() + "' is not valid JSON: " + e.what());
  }
}

std::uint64_t text_input_read_bytes(const TextInputFile& f) noexcept {
  if (f.whole()) return f.bytes;
  const std::uint64_t end = std::min(f.end, f.bytes);
  return end > f.begin ? end - f.begin : 0;
}

TextTaskPlan plan_text_task(const std::vector<TextInputFile>& all, const TextReadOptions& read,
                            const PrepareTextTask& task) {
  std::uint64_t total = 0;
  for (const TextInputFile& f : all) total += f.bytes;
  TextTaskPlan plan;
  plan.max_part_bytes =
      task.max_part_bytes > 0 ? task.max_part_bytes : std::max<std::uint64_t>(1, (total + task.count - 1) / task.count);
  ordered_json ranges = ordered_json::array();
  std::uint64_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const TextInputFile& f = all[i];
    const std::uint64_t pieces = f.bytes > plan.max_part_bytes && splittable(f, read)
                                     ? (f.bytes + plan.max_part_bytes - 1) / plan.max_part_bytes
                                     : 1;
    for (std::uint64_t j = 0; j < pieces; ++j) {
      const auto at = [&](std::uint64_t k) {
        return static_cast<std::uint64_t>(static_cast<Wide>(f.bytes) * k / pieces);
      };
      const std::uint64_t begin = at(j), end = at(j + 1);
      if (task_of(start + begin, end - begin, total, task.count) != task.index) continue;
      TextInputFile part = f;
      if (pieces > 1) {
        part.begin = begin;
        part.end = end;
      }
      plan.inputs.push_back(part);
      ranges.push_back({{"file", i}, {"begin", begin}, {"end", end}});
    }
    start += f.bytes;
  }
  plan.description = {
      {"task", task.index}, {"num_tasks", task.count}, {"max_part_bytes", plan.max_part_bytes}, {"ranges", ranges}};
  return plan;
}

fs::path claim_text_task(const fs::path& out, const PrepareTextTask& task, std::uint64_t max_part_bytes,
                         const std::string& job_key) {
  const fs::path parts = out / "parts";
  std::error_code ec;
  fs::create_directories(parts, ec);
  if (ec) throw Error(ErrorKind::io, "cannot create '" + parts.string() + "': " + ec.message());
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.path().filename() != "parts") {
      throw Error(ErrorKind::config, "'" + out.string() + "' holds '" + entry.path().filename().string() +
                                         "': the tasks of prepare-text --task write only its parts/ (is it a "
                                         "finished dataset?)");
    }
  }
  create_once(parts / kJobName, {{"num_tasks", task.count}, {"max_part_bytes", max_part_bytes}, {"job_key", job_key}});
  const ordered_json job = read_part_json(parts / kJobName);
  try {
    const auto count = job.at("num_tasks").get<std::uint64_t>();
    if (count != task.count) {
      throw Error(ErrorKind::config, "'" + out.string() + "' is being prepared as " + std::to_string(count) +
                                         " tasks (" + (parts / kJobName).string() + "), not " +
                                         std::to_string(task.count) +
                                         ": every task of one output directory gives the same --num-tasks");
    }
    if (job.at("max_part_bytes").get<std::uint64_t>() != max_part_bytes) {
      throw Error(ErrorKind::config, "'" + out.string() + "': its other tasks cut the inputs at --max-part-bytes " +
                                         std::to_string(job.at("max_part_bytes").get<std::uint64_t>()) + ", not " +
                                         std::to_string(max_part_bytes));
    }
    if (job.at("job_key").get<std::string>() != job_key) {
      throw Error(ErrorKind::config, "'" + out.string() +
                                         "': the inputs or options of this task differ from its "
                                         "other tasks' (" +
                                         (parts / kJobName).string() + ")");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::format, "'" + (parts / kJobName).string() + "' is damaged: " + e.what());
  }
  const fs::path part = parts / std::to_string(task.index);
  if (fs::exists(part / "dataset_metadata.json", ec)) {
    throw Error(ErrorKind::config, "task " + std::to_string(task.index) + " of '" + out.string() +
                                       "' is finished already (" + part.string() +
                                       "): run the tasks that are not, then prepare-text --merge");
  }
  return part;
}

PrepareTextTask text_task_from_environment(std::optional<std::uint32_t> count) {
  PrepareTextTask task;
  if (const std::optional<std::uint64_t> id = env_number("SLURM_ARRAY_TASK_ID")) {
    const std::optional<std::uint64_t> n = env_number("SLURM_ARRAY_TASK_COUNT");
    const std::uint64_t min = env_number("SLURM_ARRAY_TASK_MIN").value_or(0);
    if (!n) throw Error(ErrorKind::config, "--task auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not");
    if (count && *count != *n) {
      throw Error(ErrorKind::config, "--task auto: --num-tasks " + std::to_string(*count) +
                                         " but the Slurm array has " + std::to_string(*n) +
                                         " tasks (SLURM_ARRAY_TASK_COUNT)");
    }
    if (*id < min || *id - min >= *n) {
      throw Error(ErrorKind::config, "--task auto: SLURM_ARRAY_TASK_ID " + std::to_string(*id) +
                                         " is not one of the array's " + std::to_string(*n) + " tasks from " +
                                         std::to_string(min) + " (give the array as --array=0-" +
                                         std::to_string(*n - 1) + ")");
    }
    task.index = static_cast<std::uint32_t>(*id - min);
    task.count = static_cast<std::uint32_t>(*n);
  } else if (const std::optional<std::uint64_t> index = env_number("JOB_COMPLETION_INDEX")) {
    if (!count) {
      throw Error(ErrorKind::config,
                  "--task auto: JOB_COMPLETION_INDEX (a Kubernetes indexed Job) gives the index "
                  "only: give --num-tasks (the Job's completions)");
    }
    if (*index >= *count) {
      throw Error(ErrorKind::config, "--task auto: JOB_COMPLETION_INDEX " + std::to_string(*index) +
                                         " is not below --num-tasks " + std::to_string(*count));
    }
    task.index = static_cast<std::uint32_t>(*index);
    task.count = *count;
  } else {
    throw Error(ErrorKind::config,
                "--task auto: neither SLURM_ARRAY_TASK_ID (a Slurm array) nor "
                "JOB_COMPLETION_INDEX (a Kubernetes indexed Job) is set: give --task I");
  }
  if (task.count == 0) throw Error(ErrorKind::config, "--task auto: the number of tasks is 0");
  return task;
}

}  // namespace tokenfeed
