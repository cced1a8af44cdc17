#include "python_program.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {

namespace {

// Which interpreter, and why it was chosen (for the messages).
struct ChosenPython {
  std::string python = "python3";
  std::string chosen = "python3 on PATH";
};

ChosenPython chosen_python() {
  const auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  ChosenPython c;
  if (const char* v = set("TOKENFEED_PYTHON")) {
    c.python = v;
    c.chosen = "TOKENFEED_PYTHON";
  } else if (const char* p = set("TOKENFEED_COMMAND_PYTHON")) {
    c.python = p;
    c.chosen = "the Python this command was installed with";
  }
  return c;
}

}  // namespace

std::string python_cannot_import(const std::string& modules) {
  const ChosenPython c = chosen_python();
  std::string python = c.python;
  std::string flag = "-c";
  std::string code = "import " + modules;
  char* argv[] = {python.data(), flag.data(), code.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return "'" + python + "' (" + c.chosen + ") cannot be started: " + std::strerror(err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "'" + python + "' (" + c.chosen + ") cannot import " + modules;
}

void exec_python_program(const std::string& module, const std::vector<std::string>& args, const std::string& what) {
  const ChosenPython c = chosen_python();
  const std::string& python = c.python;
  const std::string& chosen = c.chosen;
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
