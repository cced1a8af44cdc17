// The CPUs this process may really use, and the default decode_threads taken from them.
//
// std::thread::hardware_concurrency() counts the machine's CPUs. A process may run on fewer:
// its affinity mask (taskset, Slurm and Kubernetes cpusets), a container's CPU quota
// (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us, on its own cgroup and
// every ancestor), and the other ranks of the job on the same node share what is left.
// The default decode threads are that share minus the trainer's thread, at least 1:
//   max(1, max(1, min(affinity CPUs, ceil(quota)) / local ranks) - 1)
//
// Thread-safety: reads /proc and /sys and the environment; pure functions otherwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "launch/launcher_ranks.hpp"

namespace tokenfeed {

// What the process may use, each figure with where it came from.
struct CpuBudget {
  std::int64_t affinity_cpus = 1;    // CPUs in the affinity mask (sched_getaffinity)
  std::optional<double> quota_cpus;  // the tightest cgroup CPU quota, in CPUs; none: unlimited
  std::string quota_source;          // the file that set it
  LocalRanks local_ranks;
};

// cgroup v2's cpu.max ("max 100000", "150000 100000"): the quota in CPUs, nothing for
// "max" or text that is not one (a file the kernel wrote is trusted to be one).
std::optional<double> parse_cpu_max(std::string_view text);

// The tightest CPU quota over the process's cgroup and its ancestors: `proc_cgroup` is
// /proc/self/cgroup's text, `root` where the cgroup file systems are mounted
// (/sys/fs/cgroup; v2 unified, or v1 with a cpu controller directory). `source` receives
// the file of the quota found.
std::optional<double> cgroup_cpu_quota(const std::filesystem::path& root, std::string_view proc_cgroup,
                                       std::string& source);

// The default decode threads for a budget, and the open line's account of it, e.g.
// "2 CPUs (affinity) / 2 local ranks (LOCAL_WORLD_SIZE) - 1 for the trainer".
struct DecodeThreadsDefault {
  std::int64_t threads = 1;
  std::string source;
  std::int64_t share = 1;  // the CPUs this process may use: threads + 1 for the trainer, or 1
};
DecodeThreadsDefault default_decode_threads(const CpuBudget& budget);

// The budget of this process: its affinity and its cgroups' quotas, shared by `local_ranks`
// (resolve_local_ranks, which the caller has already read).
CpuBudget read_cpu_budget(LocalRanks local_ranks);

}  // namespace tokenfeed
