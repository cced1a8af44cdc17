// Bit-for-bit reimplementations of the numpy draws tokenfeed's sampling order relies on,
// so that a Python user can reconstruct any epoch's order with numpy alone:
//
//   np.random.RandomState(seed).permutation(n)
//
// numpy's legacy RandomState seeds MT19937 with init_genrand(seed) (as std::mt19937 does)
// and shuffles with Fisher-Yates from the end, drawing each index with a masked rejection
// sampler ("random_interval"), 32-bit draws for bounds below 2^32 and 64-bit draws
// (two 32-bit outputs, high word first) above. Verified against fixtures made with numpy.
#pragma once

#include <cstdint>
#include <vector>

#include "util/id_list.hpp"

namespace tokenfeed {

// np.random.RandomState(seed).permutation(n). REQUIRES: seed < 2^32.
std::vector<std::uint64_t> numpy_permutation(std::uint32_t seed, std::uint64_t n);
// The same permutation as an IdList: 4 bytes an entry when n <= 2^32.
IdList numpy_permutation_ids(std::uint32_t seed, std::uint64_t n);

// A counter-based generator for random-mode sampling: draw(key, counter) is a pure
// function, so batch k needs no generator state (resume and parallel decode are free).
class CounterRng {
 public:
  explicit CounterRng(std::uint64_t key) noexcept : key_(key) {}
  // A uniform integer in [0, bound) for stream position `counter`, unbiased (Lemire's
  // multiply-shift with rejection; rejected draws move to the next sub-counter).
  // REQUIRES: bound > 0.
  std::uint64_t uniform(std::uint64_t counter, std::uint64_t bound) const noexcept;

 private:
  std::uint64_t key_;
};

}  // namespace tokenfeed
