// Data-parallel rank and world size from the launcher: one loader per rank, each told by
// its launcher (torchrun, Open MPI, an MPI with PMI) which rank it is.
//
// A config's rank and world_size may each be a number (it wins) or kFromLauncher (the key
// "env", and the default). Those taken from the launcher come from the first family of
// environment variables present: RANK / WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK /
// OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK / PMI_SIZE (MPICH, Intel MPI, Slurm); with none
// present, rank 0 and world size 1.
//
// Thread-safety: reads the environment; do not call while another thread changes it.
#pragma once

#include <cstdint>
#include <string>

#include "tokenfeed/config.hpp"

namespace tokenfeed {

struct LauncherRanks {
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  // Where they came from, for the open log line: "config", "RANK/WORLD_SIZE",
  // "no launcher variables: rank 0 of 1", or "rank from config, world_size from ...".
  std::string source;
};

// Resolves config.rank and config.world_size. Throws Error(config) naming the variable for
// a launcher variable that is not a number, a family with only one of its two variables,
// and a rank outside [0, world_size) (naming where each came from).
LauncherRanks resolve_ranks(const Config& config);

// How many of the job's processes run on this node, each with a loader of its own, so that
// the per-process defaults (decode threads, the memory budget) take a fair share of it:
// LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), MPI_LOCALNRANKS
// (MPICH's Hydra), SLURM_NTASKS_PER_NODE (Slurm), the first one set; 1 when none is.
struct LocalRanks {
  std::int64_t count = 1;
  std::string source;  // the variable, or "no launcher variable"
};

// Throws Error(config) naming the variable for a value that is not an integer in [1, 2^20].
LocalRanks resolve_local_ranks();

}  // namespace tokenfeed
