#include "splits/fingerprint.hpp"

#include <cstdio>
#include <vector>

#include "util/hash.hpp"

namespace tokenfeed {

std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::string fingerprint_of(std::string_view formula, std::span<const FingerprintPart> parts) {
  Hasher h;
  h.add(formula);
  for (const FingerprintPart& part : parts) std::visit([&h](auto value) { h.add(value); }, part);
  return hex64(h.digest());
}

std::string fingerprint_of(std::string_view formula, const OrderFields& fields) {
  std::vector<FingerprintPart> parts;
  parts.reserve(2 * fields.size());
  for (const auto& [key, value] : fields) {
    parts.emplace_back(std::string_view(key));
    parts.emplace_back(std::string_view(value));
  }
  return fingerprint_of(formula, parts);
}

}  // namespace tokenfeed
