// MaskValues: the values of a mask.bin that no mask should hold. A uint8 mask means 0 or 1
// (the loader reads any non-zero byte as 1, so a flipped bit trains silently); a float32
// mask holds loss weights, which must be finite and non-negative.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

struct MaskValueCount {
  std::uint64_t count = 0;
  std::uint64_t first_offset = 0;  // value index in the file; meaningful when count > 0
  float first_value = 0;           // as a float (uint8 values widened)
};

struct MaskValueScan {
  MaskValueCount not_binary;  // uint8: values other than 0 and 1
  MaskValueCount not_finite;  // float32: NaN, +inf, -inf
  MaskValueCount negative;    // float32: finite values below 0
};

// Scans the whole of `bytes` as values of `dtype` (a trailing partial value is ignored).
MaskValueScan scan_mask_values(std::span<const std::byte> bytes, MaskDtype dtype) noexcept;

}  // namespace tokenfeed
