#include "python_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {

void exec_python_program(const std::string& module, const std::vector<std::string>& args, const std::string& what) {
  const char* env_python = std::getenv("TOKENFEED_PYTHON");
  const std::string python = env_python != nullptr && *env_python != '\0' ? env_python : "python3";
  const std::string bootstrap =
      "import sys\n"
      "try:\n"
      "    from tokenfeed import " +
      module +
      "\n"
      "except ImportError as e:\n"
      "    sys.stderr.write(\"tokenfeed: error: " +
      what +
      " runs the tokenfeed Python package, which %s cannot import (%s); install it with pip "
      "install 'tokenfeed[hf]', or set TOKENFEED_PYTHON to the Python that has it\\n\" % "
      "(sys.executable, e))\n"
      "    sys.exit(2)\n"
      "sys.exit(" +
      module + ".main(sys.argv[1:]))\n";
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
