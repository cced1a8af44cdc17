// Weights from dataset sizes (sampling/mixture_weights) against a reference written here
// from docs/mixtures.md's rule: temperature shares, UniMax caps with the excess
// redistributed, and the largest-remainder rounding to exact 6-decimal texts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "sampling/mixture_weights.hpp"
#include "tokenfeed/error.hpp"

using namespace tokenfeed;

namespace {

// The rule, written independently of the unit: caps applied one source at a time (the one
// furthest above its cap first; with proportional redistribution the capped set is the
// same as capping all at once), shares in long double, then rounded: capped shares down,
// the rest by largest remainder among the uncapped sources with tokens.
std::vector<std::uint64_t> reference_units(const std::vector<SizedSource>& sources, long double alpha,
                                           std::optional<std::uint64_t> planned_rows) {
  const std::size_t n = sources.size();
  std::vector<long double> raw(n, 0), cap(n, std::numeric_limits<long double>::infinity());
  for (std::size_t i = 0; i < n; ++i) {
    if (sources[i].tokens > 0) raw[i] = std::pow(static_cast<long double>(sources[i].tokens), alpha);
    if (sources[i].max_epochs && planned_rows) {
      cap[i] = static_cast<long double>(*sources[i].max_epochs) * sources[i].rows_per_epoch / *planned_rows;
    }
  }
  std::vector<bool> capped(n, false);
  for (;;) {
    long double left = 1, free_raw = 0;
    for (std::size_t i = 0; i < n; ++i) capped[i] ? left -= cap[i] : free_raw += raw[i];
    std::optional<std::size_t> worst;
    long double worst_ratio = 1;
    for (std::size_t i = 0; i < n; ++i) {
      if (capped[i] || free_raw == 0) continue;
      const long double ratio = left * raw[i] / free_raw / cap[i];
      if (ratio > worst_ratio) worst = i, worst_ratio = ratio;
    }
    if (!worst) break;
    capped[*worst] = true;
  }
  std::vector<std::uint64_t> units(n, 0);
  std::int64_t left = 1'000'000;
  long double free_raw = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (capped[i]) {
      units[i] = static_cast<std::uint64_t>(std::floor(cap[i] * 1e6L));
      left -= static_cast<std::int64_t>(units[i]);
    } else {
      free_raw += raw[i];
    }
  }
  std::vector<std::pair<long double, std::size_t>> remainders;
  std::int64_t given = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (capped[i] || raw[i] == 0) continue;
    const long double exact = left * raw[i] / free_raw;
    units[i] = static_cast<std::uint64_t>(std::floor(exact));
    given += static_cast<std::int64_t>(units[i]);
    remainders.emplace_back(-(exact - std::floor(exact)), i);  // largest first, then earlier
  }
  std::sort(remainders.begin(), remainders.end());
  for (std::size_t k = 0; given < left; ++k, ++given) ++units[remainders[k % remainders.size()].second];
  return units;
}

std::vector<std::uint64_t> units_of(const std::vector<WeightFromSize>& weights) {
  std::vector<std::uint64_t> out;
  for (const WeightFromSize& w : weights) out.push_back(w.millionths);
  return out;
}

SizedSource sized(std::string name, std::uint64_t tokens, std::uint64_t rows = 0,
                  std::optional<double> max_epochs = std::nullopt) {
  return SizedSource{std::move(name), tokens, rows, max_epochs};
}

}  // namespace

TEST_CASE("mixture weights: temperature 0, 0.3 and 1 against the reference, exact texts summing to 1") {
  const std::vector<SizedSource> sources = {sized("en", 9'000'000'000), sized("de", 700'000'000),
                                            sized("sw", 3'000'000), sized("yo", 41'000), sized("empty", 0)};
  for (const double alpha : {0.0, 0.3, 1.0}) {
    CAPTURE(alpha);
    const auto weights = weights_from_sizes(sources, alpha, std::nullopt);
    REQUIRE(weights.size() == sources.size());
    CHECK(units_of(weights) == reference_units(sources, alpha, std::nullopt));
    std::uint64_t sum = 0;
    for (const WeightFromSize& w : weights) {
      sum += w.millionths;
      CHECK(w.text == std::to_string(w.millionths / 1'000'000) + "." +
                          std::string(6 - std::to_string(w.millionths % 1'000'000).size(), '0') +
                          std::to_string(w.millionths % 1'000'000));
      CHECK_FALSE(w.capped);
      CHECK_FALSE(w.planned_epochs);
    }
    CHECK(sum == 1'000'000);
    CHECK(weights[4].millionths == 0);  // no tokens, no rows, whatever alpha
  }
  // alpha 0 is uniform over the sources with tokens: 10^6 / 4, exactly.
  const auto uniform = weights_from_sizes(sources, 0.0, std::nullopt);
  for (std::size_t i = 0; i < 4; ++i) CHECK(uniform[i].text == "0.250000");
  // alpha 1 is proportional; the unit left by rounding thirds down goes to the first declared.
  const auto thirds = weights_from_sizes({sized("a", 5), sized("b", 5), sized("c", 5)}, 1.0, std::nullopt);
  CHECK(thirds[0].text == "0.333334");
  CHECK(thirds[1].text == "0.333333");
  CHECK(thirds[2].text == "0.333333");
  const auto halves = weights_from_sizes({sized("a", 1), sized("b", 3)}, 1.0, std::nullopt);
  CHECK(halves[0].text == "0.250000");
  CHECK(halves[1].text == "0.750000");
}

TEST_CASE("mixture weights: max_epochs caps a source and the excess goes to the others by weight") {
  // 1,000,000 planned rows. Uniform shares would be 1/3 each; 'small' (10,000 rows an epoch,
  // at most 4 epochs) is capped at 0.04, 'mid' (100,000 rows, 3 epochs) at 0.3 once the
  // excess raises it, and 'big' takes the rest.
  const std::vector<SizedSource> sources = {sized("small", 10'000'000, 10'000, 4.0),
                                            sized("mid", 100'000'000, 100'000, 3.0),
                                            sized("big", 1'000'000'000, 1'000'000)};
  const std::uint64_t planned = 1'000'000;
  const auto weights = weights_from_sizes(sources, 0.0, planned);
  CHECK(units_of(weights) == reference_units(sources, 0.0, planned));
  CHECK(weights[0].text == "0.040000");
  CHECK(weights[1].text == "0.300000");
  CHECK(weights[2].text == "0.660000");
  CHECK(weights[0].capped);
  CHECK(weights[1].capped);
  CHECK_FALSE(weights[2].capped);
  REQUIRE(weights[0].planned_epochs);
  CHECK(*weights[0].planned_epochs == doctest::Approx(4.0));
  CHECK(*weights[2].planned_epochs == doctest::Approx(0.66));
  // At alpha 0.3 too, with a cap that is not a whole number of units (rounded down).
  const std::vector<SizedSource> odd = {sized("a", 3'000'000, 7'777, 2.5), sized("b", 50'000'000, 90'000),
                                        sized("c", 900'000'000, 2'000'000, 1.0), sized("d", 12'345'678, 33'333)};
  for (const std::uint64_t rows : {std::uint64_t{100'000}, std::uint64_t{3'000'000}, std::uint64_t{77'777'777}}) {
    CAPTURE(rows);
    const auto w = weights_from_sizes(odd, 0.3, rows);
    CHECK(units_of(w) == reference_units(odd, 0.3L, rows));
    for (std::size_t i = 0; i < odd.size(); ++i) {
      if (w[i].capped) CHECK(*w[i].planned_epochs <= *odd[i].max_epochs);
    }
  }
  // The caps bind at the large plan (a is capped), not at the small one.
  CHECK(weights_from_sizes(odd, 0.3, 77'777'777)[0].capped);
  CHECK_FALSE(weights_from_sizes(odd, 0.3, 100'000)[0].capped);
}

TEST_CASE("mixture weights: every source capped, or no tokens at all, is an error naming the sources") {
  const std::vector<SizedSource> all_capped = {sized("a", 100, 10, 1.0), sized("b", 100, 10, 2.0)};
  CHECK_THROWS_WITH_AS(weights_from_sizes(all_capped, 0.3, 1000),
                       doctest::Contains("max_epochs caps every source with tokens (a <= 0.010000, b <= 0.020000"),
                       Error);
  CHECK_NOTHROW(weights_from_sizes(all_capped, 0.3, 10));  // at 10 rows neither cap binds
  const std::vector<SizedSource> empty = {sized("x", 0), sized("y", 0)};
  CHECK_THROWS_WITH_AS(weights_from_sizes(empty, 1.0, std::nullopt), doctest::Contains("no source has tokens"), Error);
  CHECK_THROWS_WITH_AS(weights_from_sizes(empty, 1.0, std::nullopt), doctest::Contains("'x', 'y'"), Error);
}
