// The CPUs a process may really use (affinity, cgroup quota, the job's ranks on the node)
// and the defaults taken from them: decode_threads and the memory budget.
#include "launch/cpu_share.hpp"

#include <doctest/doctest.h>

#include <sched.h>

#include <mutex>

#include "launch/launcher_ranks.hpp"
#include "splits/resolved_options.hpp"
#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

const std::vector<std::string> kLocalSizeVariables = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                      "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};

CpuBudget budget(std::int64_t affinity, std::optional<double> quota, std::int64_t ranks,
                 std::string ranks_source = "LOCAL_WORLD_SIZE") {
  CpuBudget b;
  b.affinity_cpus = affinity;
  b.quota_cpus = quota;
  b.quota_source = "/sys/fs/cgroup/cpu.max";
  b.local_ranks = {ranks, ranks > 1 ? std::move(ranks_source) : std::string("no launcher variable")};
  return b;
}

}  // namespace

TEST_CASE("cpu share: cgroup v2 cpu.max is a quota in CPUs, max is none") {
  CHECK_FALSE(parse_cpu_max("max 100000\n").has_value());
  CHECK(parse_cpu_max("150000 100000\n").value() == doctest::Approx(1.5));
  CHECK(parse_cpu_max("400000 100000").value() == doctest::Approx(4.0));
  CHECK_FALSE(parse_cpu_max("").has_value());
  CHECK_FALSE(parse_cpu_max("x y").has_value());
  CHECK_FALSE(parse_cpu_max("100000 0").has_value());
}

TEST_CASE("cpu share: the tightest quota over the process's cgroup and its ancestors (v2, hybrid, v1)") {
  TempDir dir;
  std::string source;
  SUBCASE("v2 at the root: the parent's quota is tighter than the leaf's") {
    write_text(dir.path() / "cgroup.controllers", "cpu memory\n");
    std::filesystem::create_directories(dir.path() / "job" / "rank");
    write_text(dir.path() / "job" / "cpu.max", "150000 100000\n");
    write_text(dir.path() / "job" / "rank" / "cpu.max", "400000 100000\n");
    CHECK(cgroup_cpu_quota(dir.path(), "0::/job/rank\n", source).value() == doctest::Approx(1.5));
    CHECK(source == (dir.path() / "job" / "cpu.max").string());
  }
  SUBCASE("v2 without a limit anywhere") {
    write_text(dir.path() / "cgroup.controllers", "cpu\n");
    std::filesystem::create_directories(dir.path() / "job");
    write_text(dir.path() / "job" / "cpu.max", "max 100000\n");
    CHECK_FALSE(cgroup_cpu_quota(dir.path(), "0::/job\n", source).has_value());
  }
  SUBCASE("hybrid: the unified hierarchy under unified/") {
    std::filesystem::create_directories(dir.path() / "unified" / "pod");
    write_text(dir.path() / "unified" / "cgroup.controllers", "cpu\n");
    write_text(dir.path() / "unified" / "pod" / "cpu.max", "200000 100000\n");
    CHECK(cgroup_cpu_quota(dir.path(), "1:name=systemd:/\n0::/pod\n", source).value() == doctest::Approx(2.0));
  }
  SUBCASE("v1: cpu.cfs_quota_us over cpu.cfs_period_us, -1 being none") {
    std::filesystem::create_directories(dir.path() / "cpu,cpuacct" / "docker" / "c1");
    write_text(dir.path() / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n");
    write_text(dir.path() / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n");
    write_text(dir.path() / "cpu,cpuacct" / "docker" / "c1" / "cpu.cfs_quota_us", "300000\n");
    write_text(dir.path() / "cpu,cpuacct" / "docker" / "c1" / "cpu.cfs_period_us", "100000\n");
    const char* proc = "4:memory:/docker/c1\n3:cpu,cpuacct:/docker/c1\n0::/\n";
    CHECK(cgroup_cpu_quota(dir.path(), proc, source).value() == doctest::Approx(3.0));
    CHECK(source.find("cpu.cfs_quota_us") != std::string::npos);
  }
  SUBCASE("nothing mounted, or no cpu controller: no quota") {
    CHECK_FALSE(cgroup_cpu_quota(dir.path(), "0::/\n", source).has_value());
    CHECK_FALSE(cgroup_cpu_quota(dir.path() / "absent", "3:cpu:/x\n", source).has_value());
    CHECK_FALSE(cgroup_cpu_quota(dir.path(), "garbage\n", source).has_value());
  }
}

TEST_CASE("cpu share: default decode threads are the process's share of its CPUs minus the trainer's") {
  // Eight ranks on a 64-core node: 64 / 8 - 1, not 63 each.
  DecodeThreadsDefault d = default_decode_threads(budget(64, std::nullopt, 8));
  CHECK(d.threads == 7);
  CHECK(d.source == "64 CPUs (affinity) / 8 local ranks (LOCAL_WORLD_SIZE) - 1 for the trainer");
  CHECK(default_decode_threads(budget(8, std::nullopt, 1)).threads == 7);
  CHECK(default_decode_threads(budget(8, std::nullopt, 1)).source == "8 CPUs (affinity) - 1 for the trainer");
  // A quota below the affinity bounds it, rounded up: 1.5 CPUs are 2.
  d = default_decode_threads(budget(16, 1.5, 1));
  CHECK(d.threads == 1);
  CHECK(d.source.find("cgroup quota 1.5 CPUs") != std::string::npos);
  CHECK(default_decode_threads(budget(16, 4.0, 1)).threads == 3);
  CHECK(default_decode_threads(budget(16, 4.0, 2)).threads == 1);
  // A quota above the affinity changes nothing.
  CHECK(default_decode_threads(budget(2, 8.0, 1)).threads == 1);
  CHECK(default_decode_threads(budget(2, 8.0, 1)).source == "2 CPUs (affinity) - 1 for the trainer");
  // Never below one thread: more ranks than CPUs, one CPU, a tiny quota.
  CHECK(default_decode_threads(budget(2, std::nullopt, 8)).threads == 1);
  CHECK(default_decode_threads(budget(1, std::nullopt, 1)).threads == 1);
  CHECK(default_decode_threads(budget(4, 0.1, 1)).threads == 1);
}

TEST_CASE("cpu share: the trainer spins only with a CPU of the share beside the decode threads") {
  // The share: the CPUs the decoders and the trainer may use together.
  CHECK(default_decode_threads(budget(64, std::nullopt, 8)).share == 8);
  CHECK(default_decode_threads(budget(16, 1.5, 1)).share == 2);
  CHECK(default_decode_threads(budget(2, std::nullopt, 2)).share == 1);
  CHECK(default_decode_threads(budget(4, 0.1, 1)).share == 1);
  // What resolve_options settles from it, beside the decode threads (defaults, or set).
  const auto may_spin = [](const char* local_ranks, std::int64_t decode_threads) {
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", local_ranks}});
    Config c;
    c.decode_threads = decode_threads;
    ResolvedOptions r;
    settle_decode_threads(c, r);
    return r.trainer_may_spin;
  };
  const std::int64_t cpus = read_cpu_budget(LocalRanks{}).affinity_cpus;
  // As many ranks as CPUs: each rank's share is one CPU, its decode thread's.
  CHECK_FALSE(may_spin(std::to_string(cpus).c_str(), 0));
  // A thread per CPU set by hand leaves none for the trainer.
  CHECK_FALSE(may_spin("1", cpus));
  if (cpus >= 2) CHECK(may_spin("1", 0));  // one rank: the share minus its decode threads
}

TEST_CASE("cpu share: the local ranks come from the launcher's variables, in order, and are checked") {
  {
    const ScopedEnv env(kLocalSizeVariables, {});
    const LocalRanks none = resolve_local_ranks();
    CHECK(none.count == 1);
    CHECK(none.source == "no launcher variable");
  }
  {
    const ScopedEnv env(kLocalSizeVariables, {{"SLURM_NTASKS_PER_NODE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const LocalRanks ranks = resolve_local_ranks();
    CHECK(ranks.count == 2);
    CHECK(ranks.source == "OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  for (const char* bad : {"two", "", "0", "-3", "99999999999"}) {
    CAPTURE(bad);
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", bad}});
    CHECK(error_of([] { (void)resolve_local_ranks(); }).find("LOCAL_WORLD_SIZE") != std::string::npos);
  }
}

TEST_CASE("cpu share: the loader's defaults follow the local ranks (decode threads, memory budget)") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(16, {5, 9}));
  Config config = make_config(dir.path(), 2, 8);
  config.decode_threads = 0;  // the default
  const std::int64_t cpus = default_decode_threads(read_cpu_budget(resolve_local_ranks())).threads;
  {
    const ScopedEnv env(kLocalSizeVariables, {});
    const ResolvedOptions alone = resolve_options(config);
    CHECK(alone.config.decode_threads == cpus);
    CHECK(alone.decode_threads_source.find("- 1 for the trainer") != std::string::npos);
  }
  const std::uint64_t whole = [] {
    const ScopedEnv env(kLocalSizeVariables, {});
    return effective_max_memory_mb(Config{});
  }();
  {
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", "4096"}});
    const ResolvedOptions crowded = resolve_options(config);
    CHECK(crowded.config.decode_threads == 1);
    CHECK(crowded.decode_threads_source.find("4096 local ranks (LOCAL_WORLD_SIZE)") != std::string::npos);
    CHECK(effective_max_memory_mb(Config{}) == std::max<std::uint64_t>(1, whole / 4096));
  }
  {
    Config explicit_threads = config;
    explicit_threads.decode_threads = 3;
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", "4096"}});
    const ResolvedOptions r = resolve_options(explicit_threads);
    CHECK(r.config.decode_threads == 3);
    CHECK(r.decode_threads_source == "config");
  }
  {
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", "many"}});
    CHECK(error_of([&] { (void)resolve_options(config); }).find("LOCAL_WORLD_SIZE='many'") != std::string::npos);
  }
}

TEST_CASE("cpu share: this process's affinity mask bounds the default (taskset)") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  if (CPU_COUNT(&saved) < 2) return;  // one CPU: nothing to narrow
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const CpuBudget narrowed = read_cpu_budget(resolve_local_ranks());
  REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
  CHECK(narrowed.affinity_cpus == 1);
  CHECK(read_cpu_budget(resolve_local_ranks()).affinity_cpus == CPU_COUNT(&saved));
}

TEST_CASE("cpu share: the open line says the decode threads and where they came from, the memory refusal its share") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(16, {5, 9}));
  Config config = make_config(dir.path(), 2, 8);
  config.decode_threads = 0;
  std::mutex mutex;
  std::string opened;
  const LogHandler previous = set_log_handler([&](LogLevel, std::string_view line) {
    const std::lock_guard lock(mutex);
    if (line.find("[tokenfeed] opened ") != std::string_view::npos) opened = line;
  });
  {
    const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", "4096"}});
    const Loader loader(config);
  }
  set_log_handler(previous);
  CHECK(opened.find(" decode_threads=1 (") != std::string::npos);
  CHECK(opened.find("/ 4096 local ranks (LOCAL_WORLD_SIZE) - 1 for the trainer)") != std::string::npos);

  // Half the memory over 2^20 ranks is a few MiB at most: 8 x 65536 positions do not fit.
  Config big = make_config(dir.path(), 8, 65536);
  const ScopedEnv env(kLocalSizeVariables, {{"LOCAL_WORLD_SIZE", "1048576"}});
  const std::string message = error_of([&] { const Loader loader(big); });
  CAPTURE(message);
  CHECK(message.find("max_memory_mb=") != std::string::npos);
  CHECK(message.find("divided by 1048576 local ranks (LOCAL_WORLD_SIZE)") != std::string::npos);
}
