// <tokenfeed/tokenfeed.hpp> alone is enough for what the README's C++ snippet uses.
#include <doctest/doctest.h>

#include <string>

#include <tokenfeed/tokenfeed.hpp>

TEST_CASE("umbrella header: the loader, the config and the version from one include") {
  CHECK(std::string(tokenfeed::version()).find('.') != std::string::npos);
  tokenfeed::Config config;
  CHECK(config.max_held_batches == static_cast<std::int64_t>(tokenfeed::Loader::kMaxHeldBatches));
  CHECK(tokenfeed::parse_chat_role("developer") == tokenfeed::ChatRole::system);
}
