// Fingerprints: the hash that says what an order depends on, written (16 hex digits) into
// resume states and the audit log and compared on restore. One formula for every front: the
// loader's datasets, mixtures and RL prompts each name their version of it ("formula") and
// the parts they hash; the parts' values decide the hash, never the front.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace tokenfeed {

// What an order depends on, by name: hashed as key, value, key, value in key order, and
// carried by the resume state so that a refusal can name the field that differs.
using OrderFields = std::map<std::string, std::string>;

// One hashed part: a text or a 64-bit word (Hasher's two inputs).
using FingerprintPart = std::variant<std::string_view, std::uint64_t>;

// `v` as 16 lower-case hex digits.
std::string hex64(std::uint64_t v);

// The hash of `formula` then `parts`, in order, as hex64.
std::string fingerprint_of(std::string_view formula, std::span<const FingerprintPart> parts);

// The hash of `formula` then each field's key and value, as hex64.
std::string fingerprint_of(std::string_view formula, const OrderFields& fields);

}  // namespace tokenfeed
