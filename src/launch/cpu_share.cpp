#include "launch/cpu_share.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_small_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  return text;
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// cgroup v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
std::optional<double> v1_quota(const fs::path& dir) {
  const auto quota = read_small_file(dir / "cpu.cfs_quota_us");
  const auto period = read_small_file(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  const auto q = parse_number(*quota);
  const auto p = parse_number(*period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return *q / *p;
}

// One cgroup hierarchy: the quota of every directory from the process's cgroup up to the
// mount point, the tightest kept.
void tightest_on_path(const fs::path& mount, std::string_view cgroup_path, bool v2, std::optional<double>& best,
                      std::string& source) {
  fs::path relative = fs::path(std::string(cgroup_path)).relative_path();
  for (fs::path dir = mount / relative;; dir = dir.parent_path()) {
    std::optional<double> quota;
    if (v2) {
      if (const auto text = read_small_file(dir / "cpu.max")) quota = parse_cpu_max(*text);
    } else {
      quota = v1_quota(dir);
    }
    if (quota && (!best || *quota < *best)) {
      best = quota;
      source = (dir / (v2 ? "cpu.max" : "cpu.cfs_quota_us")).string();
    }
    if (relative.empty() || dir == mount) break;
    relative = relative.parent_path();
  }
}

std::int64_t affinity_cpu_count() {
  // Masks for up to 4096 CPUs; a larger machine is counted by hardware_concurrency.
  constexpr std::size_t kCpus = 4096;
  cpu_set_t* set = CPU_ALLOC(kCpus);
  if (set == nullptr) return std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  const std::size_t size = CPU_ALLOC_SIZE(kCpus);
  CPU_ZERO_S(size, set);
  std::int64_t count = 0;
  if (::sched_getaffinity(0, size, set) == 0) count = CPU_COUNT_S(size, set);
  CPU_FREE(set);
  if (count <= 0) count = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  return std::max<std::int64_t>(1, count);
}

std::string plural(std::int64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

std::optional<double> parse_cpu_max(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view quota = text.substr(0, space);
  if (quota == "max") return std::nullopt;
  const auto q = parse_number(quota);
  const auto p = parse_number(text.substr(space + 1));
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return *q / *p;
}

std::optional<double> cgroup_cpu_quota(const fs::path& root, std::string_view proc_cgroup, std::string& source) {
  std::optional<double> best;
  std::istringstream lines{std::string(proc_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      // Unified hierarchy: at the root on a v2 system, under unified/ on a hybrid one.
      for (const fs::path& mount : {root, root / "unified"}) {
        std::error_code ec;
        if (fs::exists(mount / "cgroup.controllers", ec)) {
          tightest_on_path(mount, path, true, best, source);
          break;
        }
      }
      continue;
    }
    std::vector<std::string> names;
    std::istringstream split(controllers);
    for (std::string name; std::getline(split, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    for (const fs::path& mount : {root / "cpu", root / controllers}) {
      std::error_code ec;
      if (fs::is_directory(mount, ec)) {
        tightest_on_path(mount, path, false, best, source);
        break;
      }
    }
  }
  return best;
}

DecodeThreadsDefault default_decode_threads(const CpuBudget& budget) {
  std::int64_t cpus = std::max<std::int64_t>(1, budget.affinity_cpus);
  std::string source = plural(cpus, "CPU") + " (affinity)";
  if (budget.quota_cpus) {
    const auto quota = static_cast<std::int64_t>(std::ceil(std::max(*budget.quota_cpus, 1.0) - 1e-9));
    if (quota < cpus) {
      cpus = quota;
      std::ostringstream text;
      text << plural(cpus, "CPU") << " (cgroup quota " << *budget.quota_cpus << " CPUs, " << budget.quota_source << ")";
      source = text.str();
    }
  }
  const std::int64_t ranks = std::max<std::int64_t>(1, budget.local_ranks.count);
  const std::int64_t share = std::max<std::int64_t>(1, cpus / ranks);
  if (ranks > 1) source += " / " + plural(ranks, "local rank") + " (" + budget.local_ranks.source + ")";
  source += " - 1 for the trainer";
  return {std::max<std::int64_t>(1, share - 1), source, share};
}

CpuBudget read_cpu_budget(LocalRanks local_ranks) {
  CpuBudget budget;
  budget.local_ranks = std::move(local_ranks);
  budget.affinity_cpus = affinity_cpu_count();
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  budget.quota_cpus = cgroup_cpu_quota("/sys/fs/cgroup", text.str(), budget.quota_source);
  return budget;
}

}  // namespace tokenfeed
