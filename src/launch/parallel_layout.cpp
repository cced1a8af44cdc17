#include "launch/parallel_layout.hpp"

#include <algorithm>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

constexpr std::int64_t kMaxParallelSize = std::int64_t{1} << 20;
constexpr const char* kDimensions[] = {"tp", "cp", "dp", "pp"};

[[noreturn]] void layout_error(const std::string& message) { throw Error(ErrorKind::config, message); }

std::string sizes_text(const Config& c) {
  return "tensor_parallel_size x context_parallel_size x pipeline_parallel_size = " +
         std::to_string(c.tensor_parallel_size) + " x " + std::to_string(c.context_parallel_size) + " x " +
         std::to_string(c.pipeline_parallel_size);
}

// A rank's coordinates in the layout: each dimension's digit in the mixed radix of the
// order (the first fastest-varying). REQUIRES: world_size a multiple of tp·cp·pp.
struct Coordinates {
  std::int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  std::int64_t leader = 0;  // the rank with the same dp and every other coordinate 0
};

Coordinates coordinates_of(std::int64_t rank, const Config& c, const std::array<std::string, 4>& dims) {
  const std::int64_t dp_size =
      c.world_size / (c.tensor_parallel_size * c.context_parallel_size * c.pipeline_parallel_size);
  Coordinates out;
  std::int64_t stride = 1;
  for (const std::string& dim : dims) {
    const bool tp = dim == "tp", cp = dim == "cp", pp = dim == "pp";
    const std::int64_t size = tp   ? c.tensor_parallel_size
                              : cp ? c.context_parallel_size
                              : pp ? c.pipeline_parallel_size
                                   : dp_size;
    const std::int64_t digit = (rank / stride) % size;
    (tp ? out.tp : cp ? out.cp : pp ? out.pp : out.dp) = digit;
    if (!tp && !cp && !pp) out.leader = digit * stride;
    stride *= size;
  }
  return out;
}

}  // namespace

std::array<std::string, 4> parse_parallel_order(std::string_view order) {
  std::array<std::string, 4> dims;
  std::size_t count = 0;
  std::string_view rest = order;
  bool bad = order.empty();
  while (!bad) {
    const std::size_t dash = rest.find('-');
    const std::string_view dim = rest.substr(0, dash);
    const bool known = std::find(std::begin(kDimensions), std::end(kDimensions), dim) != std::end(kDimensions);
    if (!known || count == dims.size() || std::find(dims.begin(), dims.begin() + count, dim) != dims.begin() + count) {
      bad = true;
      break;
    }
    dims[count++] = std::string(dim);
    if (dash == std::string_view::npos) break;
    rest.remove_prefix(dash + 1);
  }
  if (bad || count != dims.size()) {
    layout_error("config key 'parallel_order' is '" + std::string(order) +
                 "': it must name each of tp, cp, dp and pp exactly once, fastest-varying first, joined by '-' "
                 "(the default is tp-cp-dp-pp)");
  }
  return dims;
}

void validate_parallel_layout_keys(const Config& c) {
  parse_parallel_order(c.parallel_order);
  for (const auto& [key, value] : {std::pair{"tensor_parallel_size", c.tensor_parallel_size},
                                   std::pair{"context_parallel_size", c.context_parallel_size},
                                   std::pair{"pipeline_parallel_size", c.pipeline_parallel_size}}) {
    if (value < 1 || value > kMaxParallelSize) {
      layout_error("config key '" + std::string(key) + "' must be in [1, 2^20], got " + std::to_string(value));
    }
  }
  if (c.data_parallel_rank.has_value() != c.data_parallel_size.has_value()) {
    layout_error(std::string("config key '") + (c.data_parallel_rank ? "data_parallel_rank" : "data_parallel_size") +
                 "' is set but '" + (c.data_parallel_rank ? "data_parallel_size" : "data_parallel_rank") +
                 "' is not: give both data-parallel coordinates, or neither (then they are derived from rank, "
                 "world_size and the parallel sizes)");
  }
  if (c.data_parallel_size && (*c.data_parallel_size < 1 || *c.data_parallel_size > kMaxParallelSize)) {
    layout_error("config key 'data_parallel_size' must be in [1, 2^20], got " + std::to_string(*c.data_parallel_size));
  }
  if (c.data_parallel_rank && *c.data_parallel_rank >= *c.data_parallel_size) {
    layout_error("config key 'data_parallel_rank' must be in [0, data_parallel_size-1] = [0, " +
                 std::to_string(*c.data_parallel_size - 1) + "], got " + std::to_string(*c.data_parallel_rank));
  }
  if (c.context_parallel_rank && *c.context_parallel_rank >= c.context_parallel_size) {
    layout_error("config key 'context_parallel_rank' must be in [0, context_parallel_size-1] = [0, " +
                 std::to_string(c.context_parallel_size - 1) + "], got " + std::to_string(*c.context_parallel_rank));
  }
}

ParallelLayout resolve_parallel_layout(const Config& c) {
  ParallelLayout out;
  out.rank = c.rank;
  out.world_size = c.world_size;
  out.tensor_parallel_size = c.tensor_parallel_size;
  out.context_parallel_size = c.context_parallel_size;
  out.pipeline_parallel_size = c.pipeline_parallel_size;
  out.order = c.parallel_order;
  const std::int64_t model = c.tensor_parallel_size * c.context_parallel_size * c.pipeline_parallel_size;
  const bool direct = c.data_parallel_rank.has_value();
  if (c.world_size % model != 0) {
    if (!direct) {
      layout_error("world_size " + std::to_string(c.world_size) + " is not a multiple of " + sizes_text(c) + " = " +
                   std::to_string(model) +
                   ": each data-parallel group holds one rank per tensor, context and pipeline position; fix the "
                   "sizes, or give data_parallel_rank and data_parallel_size directly");
    }
  } else {
    const Coordinates at = coordinates_of(c.rank, c, parse_parallel_order(c.parallel_order));
    out.tensor_parallel_rank = at.tp;
    out.context_parallel_rank = at.cp;
    out.pipeline_parallel_rank = at.pp;
    out.data_parallel_rank = at.dp;
    out.data_parallel_size = c.world_size / model;
    out.leader_rank = at.leader;
  }
  if (direct) {
    // The leader follows from the layout only where the layout gives these coordinates.
    if (out.data_parallel_rank != *c.data_parallel_rank || out.data_parallel_size != *c.data_parallel_size) {
      out.leader_rank = -1;
    }
    out.data_parallel_rank = *c.data_parallel_rank;
    out.data_parallel_size = *c.data_parallel_size;
    out.source = "data_parallel_rank/data_parallel_size from the config";
  } else {
    out.source = "derived";
  }
  if (c.context_parallel_rank) out.context_parallel_rank = *c.context_parallel_rank;
  if (c.context_parallel_size == 1) out.context_parallel_rank = 0;
  if (c.data_loading == DataLoading::group_leader && out.leader_rank < 0) {
    layout_error(
        "data_loading=group_leader needs each group's leader (its lowest global rank), which follows from "
        "the layout only when world_size " +
        std::to_string(c.world_size) + " is a multiple of " + sizes_text(c) +
        " and the data-parallel coordinates are those it derives; use data_loading=every_rank with these data-parallel "
        "coordinates");
  }
  out.data_leader = out.leader_rank == c.rank;
  return out;
}

std::vector<std::vector<std::int64_t>> data_parallel_groups(const Config& c) {
  const std::int64_t model = c.tensor_parallel_size * c.context_parallel_size * c.pipeline_parallel_size;
  if (c.world_size < 1 || c.world_size % model != 0) return {};
  const std::array<std::string, 4> dims = parse_parallel_order(c.parallel_order);
  std::vector<std::vector<std::int64_t>> groups(static_cast<std::size_t>(c.world_size / model));
  for (std::int64_t rank = 0; rank < c.world_size; ++rank) {
    groups[static_cast<std::size_t>(coordinates_of(rank, c, dims).dp)].push_back(rank);
  }
  return groups;
}

std::string ranks_text(const ParallelLayout& l, const std::string& rank_source, DataLoading loading) {
  std::string text =
      "rank=" + std::to_string(l.rank) + " of " + std::to_string(l.world_size) + " (" + rank_source + ")";
  const bool pure_data_parallel = l.source == "derived" && l.tensor_parallel_size == 1 &&
                                  l.context_parallel_size == 1 && l.pipeline_parallel_size == 1;
  if (!pure_data_parallel) {
    text += " -> dp " + std::to_string(l.data_parallel_rank) + " of " + std::to_string(l.data_parallel_size) + " (tp " +
            std::to_string(l.tensor_parallel_size) + ", cp " + std::to_string(l.context_parallel_size) + ", pp " +
            std::to_string(l.pipeline_parallel_size) + "; " + l.order;
    if (l.source != "derived") text += "; " + l.source;
    text += ")";
  }
  if (loading == DataLoading::group_leader) {
    text += l.data_leader ? " data_loading=group_leader (this rank decodes)"
                          : " data_loading=group_leader (rank " + std::to_string(l.leader_rank) + " decodes)";
  }
  return text;
}

}  // namespace tokenfeed
