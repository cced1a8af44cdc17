// write_file_atomically: a state file is replaced whole or not at all, and leaves no
// temporary file behind.
#include <doctest/doctest.h>

#include "io/regular_file.hpp"
#include "test_support.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

TEST_CASE("atomic write: replaces the file whole and leaves no temporary file") {
  TempDir dir;
  const auto path = dir / "state.json";
  write_file_atomically(path, "first", "state file");
  CHECK(read_regular_file(path, "state file") == "first");
  write_file_atomically(path, "second, longer", "state file");
  CHECK(read_regular_file(path, "state file") == "second, longer");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);
  // A failure (here: the target is a directory) leaves what was there and no temporary file.
  std::filesystem::create_directories(dir / "taken");
  CHECK(error_of([&] { write_file_atomically(dir / "taken", "x", "state file"); }, ErrorKind::io).find("state file") !=
        std::string::npos);
  CHECK(std::filesystem::is_directory(dir / "taken"));
  entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 2);
}
