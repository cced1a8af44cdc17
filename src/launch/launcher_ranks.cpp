#include "launch/launcher_ranks.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

struct Family {
  const char* rank;
  const char* size;
};
constexpr Family kFamilies[] = {
    {"RANK", "WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
};

std::optional<std::string_view> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

// `why` says what the variable is used for, for the message of a value that is no integer.
std::int64_t env_int(const char* name, std::string_view text,
                     std::string_view why =
                         "rank/world_size are taken from the launcher; set them in the config "
                         "to override") {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Error(ErrorKind::config, "environment variable " + std::string(name) + "='" + std::string(text) +
                                       "' is not an integer (" + std::string(why) + ")");
  }
  return value;
}

constexpr const char* kLocalSizeVariables[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                               "SLURM_NTASKS_PER_NODE"};
constexpr std::int64_t kMaxLocalRanks = std::int64_t{1} << 20;

}  // namespace

LauncherRanks resolve_ranks(const Config& config) {
  const bool rank_given = config.rank != kFromLauncher;
  const bool size_given = config.world_size != kFromLauncher;
  LauncherRanks out;
  std::string rank_from = "config", size_from = "config";
  if (!rank_given || !size_given) {
    const Family* found = nullptr;
    for (const Family& f : kFamilies) {
      if (env(f.rank) || env(f.size)) {
        found = &f;
        break;
      }
    }
    if (found != nullptr) {
      const auto rank_text = env(found->rank);
      const auto size_text = env(found->size);
      if (!rank_text || !size_text) {
        throw Error(ErrorKind::config,
                    std::string("environment variable ") + (rank_text ? found->size : found->rank) +
                        " is not set but " + (rank_text ? found->rank : found->size) +
                        " is: a launcher sets both; set rank and world_size in the config otherwise");
      }
      if (!rank_given) {
        out.rank = env_int(found->rank, *rank_text);
        rank_from = found->rank;
      }
      if (!size_given) {
        out.world_size = env_int(found->size, *size_text);
        size_from = found->size;
      }
    } else {
      if (!rank_given) rank_from = "default";
      if (!size_given) size_from = "default";
    }
  }
  if (rank_given) out.rank = config.rank;
  if (size_given) out.world_size = config.world_size;
  if (rank_from == "config" && size_from == "config") {
    out.source = "config";
  } else if (rank_from == "default" && size_from == "default") {
    out.source = "no launcher variables: rank 0 of 1";
  } else if (rank_from != "config" && size_from != "config") {
    out.source = rank_from + "/" + size_from;
  } else {
    out.source = "rank from " + rank_from + ", world_size from " + size_from;
  }
  if (out.world_size < 1) {
    throw Error(ErrorKind::config,
                "world_size must be >= 1, got " + std::to_string(out.world_size) + " (from " + size_from + ")");
  }
  if (out.rank < 0 || out.rank >= out.world_size) {
    throw Error(ErrorKind::config, "rank " + std::to_string(out.rank) + " (from " + rank_from +
                                       ") is outside [0, world_size) = [0, " + std::to_string(out.world_size) +
                                       ") (world_size from " + size_from + ")");
  }
  return out;
}

LocalRanks resolve_local_ranks() {
  for (const char* name : kLocalSizeVariables) {
    const auto text = env(name);
    if (!text) continue;
    const std::int64_t count =
        env_int(name, *text,
                "the job's processes on this node, over which the default decode_threads and max_memory_mb are "
                "shared; unset it or give a count");
    if (count < 1 || count > kMaxLocalRanks) {
      throw Error(ErrorKind::config, "environment variable " + std::string(name) + "=" + std::to_string(count) +
                                         " must be in [1, " + std::to_string(kMaxLocalRanks) +
                                         "] (the processes of the job on this node)");
    }
    return {count, name};
  }
  return {1, "no launcher variable"};
}

}  // namespace tokenfeed
