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
  const auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  // Which interpreter, and why it was chosen (for the messages).
  std::string python = "python3";
  std::string chosen = "python3 on PATH";
  if (const char* v = set("TOKENFEED_PYTHON")) {
    python = v;
    chosen = "TOKENFEED_PYTHON";
  } else if (const char* c = set("TOKENFEED_COMMAND_PYTHON")) {
    python = c;
    chosen = "the Python this command was installed with";
  }
  const std::string bootstrap =
      "import sys\n"
      "try:\n"
      "    from tokenfeed import " +
      module +
      "\n"
      "except ImportError as e:\n"
      "    sys.stderr.write(\"tokenfeed: error: " +
      what + " runs the tokenfeed Python package in %s (" + chosen +
      "), which cannot import it (%s); install it there with %s -m pip install 'tokenfeed[hf]', or set "
      "TOKENFEED_PYTHON to the Python that has it\\n\" % (sys.executable, e, sys.executable))\n"
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
  throw Error(ErrorKind::config, what + " runs the tokenfeed Python package, but '" + python + "' (" + chosen +
                                     ") cannot be started: " + std::strerror(err) +
                                     "; install Python 3 and pip install 'tokenfeed[hf]', or set TOKENFEED_PYTHON");
}

std::string exact_double(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace tokenfeed::cli
