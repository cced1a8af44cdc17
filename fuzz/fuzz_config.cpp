// The XML config: parse_config_xml on the bytes, and load_config_file on a chain of files in
// a scratch directory (the input is cut at "\n--FILE--\n" into main.xml, base.xml, more.xml),
// so that `inherits` chains, cycles and bad targets are explored. Error is the only
// acceptable failure.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  const auto& dir = fuzz::scratch_dir();
  try {
    Config c = parse_config_xml(std::string_view(reinterpret_cast<const char*>(data), size), dir);
    validate_config(c);
    (void)config_entries(c);
  } catch (const Error&) {
  }
  const auto parts = fuzz::split_parts(data, size, "\n--FILE--\n", 3);
  fuzz::write_file(dir / "main.xml", parts[0]);
  fuzz::write_file(dir / "base.xml", parts[1]);
  fuzz::write_file(dir / "more.xml", parts[2]);
  try {
    Config c = load_config_file(dir / "main.xml");
    validate_config(c);
  } catch (const Error&) {
  }
  return 0;
}
