// The doctest runner. Logging is silenced: tests that check log lines install their own
// handler.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tokenfeed/log.hpp"

int main(int argc, char** argv) {
  tokenfeed::set_log_handler(nullptr);
  doctest::Context context(argc, argv);
  return context.run();
}
