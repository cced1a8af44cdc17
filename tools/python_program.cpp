#include "python_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {

void exec_python_program(const char* bootstrap, const std::vector<std::string>& args, const std::string& what) {
  const char* env_python = std::getenv("TOKENFEED_PYTHON");
  const std::string python = env_python != nullptr && *env_python != '\0' ? env_python : "python3";
  std::vector<std::string> argv = {python, "-c", bootstrap};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  ::execvp(python.c_str(), c_argv.data());
  const int err = errno;
  throw Error(ErrorKind::config, what + " runs the tokenfeed Python package, but '" + python + "' cannot be started (" +
                                     std::strerror(err) +
                                     "); install Python 3 with pip install 'tokenfeed[hf]', or set TOKENFEED_PYTHON");
}

std::string exact_double(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace tokenfeed::cli
