// bench_rank_balance: how even balance_ranks=attention makes the data-parallel ranks'
// attention costs (Σ len² of their rows' episodes) on a packed dataset, against the plain
// slicing of each global batch (docs/packing.md, "Balancing ranks by attention cost").
//
// It runs rank 0 of --world ranks with the balance on and its audit log in a temporary
// directory, takes --batches batches, and reads back each step's rows_balanced event: the
// largest rank cost sliced and balanced, and the mean. Per step, max / mean is how much
// longer the slowest rank works than an even split; the table gives its median, mean and
// worst over the steps, sliced and balanced.
//
//   bench_rank_balance --config packed.xml [--world 8] [--batches 1000]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include "bench_common.hpp"
#include "tokenfeed/audit.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;

struct Ratios {
  std::vector<double> sliced, balanced;
};

// Every rows_balanced event of the audit logs in `dir`: max / mean, sliced and balanced.
Ratios read_ratios(const std::filesystem::path& dir) {
  Ratios r;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    for (const AuditEvent& e : read_audit_log(entry.path()).events) {
      if (e.action != "rows_balanced") continue;
      const double mean = std::stod(std::string(*e.field("cost_mean")));
      if (mean <= 0) continue;
      r.sliced.push_back(std::stod(std::string(*e.field("cost_max_sliced"))) / mean);
      r.balanced.push_back(std::stod(std::string(*e.field("cost_max_balanced"))) / mean);
    }
  }
  return r;
}

void print_row(const char* name, std::vector<double> v) {
  double sum = 0;
  for (const double x : v) sum += x;
  std::printf("%-9s %8.3f %8.3f %8.3f\n", name, perf::median(v), sum / static_cast<double>(v.size()),
              *std::max_element(v.begin(), v.end()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  long world = 8, batches = 1000;
  CLI::App app("How even balance_ranks=attention makes the ranks' attention costs (sft_packed)");
  app.add_option("--config", config_path, "An sft_packed config")->required();
  app.add_option("--world", world, "Data-parallel ranks")->check(CLI::Range(2, 4096));
  app.add_option("--batches", batches, "Batches (steps) to read")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  set_log_handler(nullptr);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bench_rank_balance_" + std::to_string(::getpid()));
  Config c = load_config_file(config_path);
  c.world_size = world;
  c.rank = 0;
  c.balance_ranks = RankBalance::attention;
  c.audit_log_dir = dir;
  {
    Loader loader(c);
    for (long i = 0; i < batches; ++i) loader.get_batch();
  }
  const Ratios r = read_ratios(dir);
  std::filesystem::remove_all(dir);
  if (r.sliced.empty()) {
    std::fprintf(stderr, "bench_rank_balance: no rows_balanced event in the audit log\n");
    return 1;
  }
  std::printf("%zu steps of %lld x %ld rows; the slowest rank's attention cost over the ranks' mean, per step:\n",
              r.sliced.size(), static_cast<long long>(c.batch_size), world);
  std::printf("%-9s %8s %8s %8s\n", "", "median", "mean", "worst");
  print_row("sliced", r.sliced);
  print_row("balanced", r.balanced);
  return 0;
}
