#include "dataset/mask_values.hpp"

#include <cmath>
#include <cstring>

namespace tokenfeed {
namespace {

void note(MaskValueCount& c, std::uint64_t offset, float value) noexcept {
  if (c.count++ == 0) {
    c.first_offset = offset;
    c.first_value = value;
  }
}

}  // namespace

MaskValueScan scan_mask_values(std::span<const std::byte> bytes, MaskDtype dtype) noexcept {
  MaskValueScan scan;
  if (dtype == MaskDtype::uint8) {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const auto v = static_cast<std::uint8_t>(bytes[i]);
      if (v > 1) note(scan.not_binary, i, static_cast<float>(v));
    }
    return scan;
  }
  const std::size_t n = bytes.size() / sizeof(float);
  for (std::size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v)) {
      note(scan.not_finite, i, v);
    } else if (v < 0.0f) {
      note(scan.negative, i, v);
    }
  }
  return scan;
}

}  // namespace tokenfeed
