#include "sampling/mixture_weights.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

// "0.412300" for 412300 millionths.
std::string share_text(std::uint64_t units) {
  std::string fraction = std::to_string(units % kShareUnits);
  fraction.insert(0, static_cast<std::size_t>(kShareDecimals) - fraction.size(), '0');
  return std::to_string(units / kShareUnits) + "." + fraction;
}

std::string names_text(const std::vector<SizedSource>& sources) {
  std::string text;
  for (const SizedSource& s : sources) text += (text.empty() ? "'" : ", '") + s.name + "'";
  return text;
}

// The UniMax caps: which sources end capped. A source is capped when its share of what the
// capped sources leave, in proportion to raw among the uncapped, exceeds its cap; all such
// sources are capped at once and the shares recomputed, until no new one exceeds its cap.
// Each capped source's cap is below its share then, so what is left stays positive.
std::vector<bool> capped_sources(const std::vector<double>& raw, const std::vector<double>& cap) {
  const std::size_t n = raw.size();
  std::vector<bool> capped(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    double left = 1.0;
    double free_raw = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (capped[i]) {
        left -= cap[i];
      } else {
        free_raw += raw[i];
      }
    }
    if (free_raw == 0.0) break;
    std::vector<bool> next = capped;
    for (std::size_t i = 0; i < n; ++i) {
      if (!capped[i] && left * raw[i] / free_raw > cap[i]) next[i] = changed = true;
    }
    capped = std::move(next);
  }
  return capped;
}

// Millionths per source: a capped source's cap rounded down (so that the cap holds); the
// remaining units split among the uncapped sources in proportion to raw, each rounded down,
// and the units still missing given one each to the uncapped sources with raw > 0 in order
// of the largest fractional part (ties to the earlier declared), so that the sum is 10^6.
std::vector<std::uint64_t> rounded_units(const std::vector<double>& raw, const std::vector<double>& cap,
                                         const std::vector<bool>& capped) {
  const std::size_t n = raw.size();
  const auto units = static_cast<double>(kShareUnits);
  std::vector<std::uint64_t> out(n, 0);
  std::uint64_t left = kShareUnits;
  double free_raw = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!capped[i]) {
      free_raw += raw[i];
      continue;
    }
    out[i] = std::min(left, static_cast<std::uint64_t>(std::floor(cap[i] * units)));
    left -= out[i];
  }
  std::vector<double> fraction(n, -1.0);
  std::vector<std::size_t> order;
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (capped[i] || raw[i] == 0.0) continue;
    const double exact = static_cast<double>(left) * raw[i] / free_raw;
    out[i] = static_cast<std::uint64_t>(std::floor(exact));
    fraction[i] = exact - std::floor(exact);
    given += out[i];
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return fraction[a] > fraction[b]; });
  for (std::size_t k = 0; given < left; ++k, ++given) ++out[order[k % order.size()]];
  return out;
}

}  // namespace

std::vector<WeightFromSize> weights_from_sizes(const std::vector<SizedSource>& sources, double alpha,
                                               std::optional<std::uint64_t> planned_rows) {
  const std::size_t n = sources.size();
  std::vector<double> raw(n, 0.0);
  std::vector<double> cap(n, std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < n; ++i) {
    const SizedSource& s = sources[i];
    if (s.tokens > 0) raw[i] = std::pow(static_cast<double>(s.tokens), alpha);
    if (s.max_epochs && planned_rows) {
      cap[i] = *s.max_epochs * static_cast<double>(s.rows_per_epoch) / static_cast<double>(*planned_rows);
    }
  }
  if (std::accumulate(raw.begin(), raw.end(), 0.0) == 0.0) {
    throw Error(ErrorKind::config, "mixture weights from dataset sizes: no source has tokens in its train split (" +
                                       names_text(sources) + ")");
  }
  const std::vector<bool> capped = capped_sources(raw, cap);
  bool any_free = false;
  for (std::size_t i = 0; i < n; ++i) any_free = any_free || (!capped[i] && raw[i] > 0.0);
  if (!any_free) {
    std::string caps;
    for (std::size_t i = 0; i < n; ++i) {
      if (capped[i]) caps += (caps.empty() ? "" : ", ") + sources[i].name + " <= " + std::to_string(cap[i]);
    }
    throw Error(ErrorKind::config,
                "mixture weights from dataset sizes: max_epochs caps every source with tokens (" + caps +
                    " of the rows over planned_steps), which leaves a share no source may take; raise max_epochs, "
                    "lower planned_steps, or add a source without max_epochs");
  }
  const std::vector<std::uint64_t> units = rounded_units(raw, cap, capped);
  std::vector<WeightFromSize> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].text = share_text(units[i]);
    out[i].millionths = units[i];
    out[i].capped = capped[i];
    if (planned_rows && sources[i].rows_per_epoch > 0) {
      out[i].planned_epochs = static_cast<double>(*planned_rows) * static_cast<double>(units[i]) /
                              static_cast<double>(kShareUnits) / static_cast<double>(sources[i].rows_per_epoch);
    }
  }
  return out;
}

}  // namespace tokenfeed
