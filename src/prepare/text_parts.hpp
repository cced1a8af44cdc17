// prepare-text as N tasks (tokenfeed/prepare_text.hpp, PrepareTextTask): which part of the
// inputs a task reads, the output directory's record of the tasks (OUT/parts/job.json), and
// the merge of the finished parts into one dataset.
//
// A task's share: the inputs in order are cut into units (a whole file, or one of the
// ceil(size / max_part_bytes) equal byte ranges of an uncompressed file of lines larger than
// max_part_bytes); unit u, starting at byte s of the inputs taken as one stream of T bytes and
// L bytes long, goes to task min(N - 1, floor((s + L / 2) * N / T)): contiguous runs in
// input order, so that the parts in task order hold the documents in the order of a
// one-process run. Documents are never cut: a line belongs to the range its first byte is in.
//
// Thread-safety: free functions; concurrent tasks of one OUT (processes, hosts) agree through
// the file system alone (job.json is created once, by link(2), and only read after).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenfeed/prepare_text.hpp"

namespace tokenfeed {

struct TextTaskPlan {
  std::vector<TextInputFile> inputs;   // the task's files and byte ranges, in input order
  std::uint64_t max_part_bytes = 0;    // as resolved
  nlohmann::ordered_json description;  // task, num_tasks, max_part_bytes, ranges (file, begin, end)
};

// Task `task.index`'s share of `all` (expand_text_inputs's list). REQUIRES: index < count.
TextTaskPlan plan_text_task(const std::vector<TextInputFile>& all, const TextReadOptions& read,
                            const PrepareTextTask& task);

// A JSON record of the tasks (job.json, a part's metadata). Throws Error(io) when it cannot be
// read, Error(format) naming it when it is no JSON.
nlohmann::ordered_json read_part_json(const std::filesystem::path& path);

// The bytes of `f` a run reads: its size, or its byte range's.
std::uint64_t text_input_read_bytes(const TextInputFile& f) noexcept;

// Sets up `out` for a task: OUT holds nothing but parts/; OUT/parts/job.json (created by the
// first task) records the number of tasks, max_part_bytes and `job_key` (the inputs and
// options of the whole preparation), and this task's must equal them. Returns the task's
// part directory OUT/parts/INDEX. Throws Error(config) naming what differs, or when the part
// is finished already.
std::filesystem::path claim_text_task(const std::filesystem::path& out, const PrepareTextTask& task,
                                      std::uint64_t max_part_bytes, const std::string& job_key);

}  // namespace tokenfeed
