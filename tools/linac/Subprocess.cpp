#include "Subprocess.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <limits.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace linac::cli {
namespace {

volatile sig_atomic_t gStopSignal = 0;
volatile pid_t gChild = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

void forwardToChild(int sig) {
  gStopSignal = sig;
  if (gChild > 0) ::kill(gChild, sig);
}

/// Installs forwardToChild for the signals a user or scheduler sends, for the lifetime of a child.
class ForwardSignals {
public:
  ForwardSignals() {
    struct sigaction sa {};
    sa.sa_handler = forwardToChild;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &previous_[i]);
  }
  ~ForwardSignals() {
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &previous_[i], nullptr);
  }

private:
  struct sigaction previous_[std::size(kForwarded)] {};
};

}  // namespace

int stopRequested() { return gStopSignal; }

std::string selfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error(std::string("cannot find the linac executable (/proc/self/exe): ") +
                                       std::strerror(errno));
  return std::string(buf, size_t(n));
}

ChildExit runLogged(const std::vector<std::string>& argv, const std::string& logPath) {
  const int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + logPath + ": " + std::strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  ForwardSignals forwarding;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw std::runtime_error(std::string("cannot start ") + argv[0] + ": " + std::strerror(errno));
  }
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(args[0], args.data());
    const char msg[] = "linac sweep: exec failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log);
  gChild = pid;
  if (gStopSignal) ::kill(pid, gStopSignal);  // a signal that came before the child existed
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      gChild = 0;
      throw std::runtime_error(std::string("waiting for ") + argv[0] + ": " + std::strerror(errno));
    }
  }
  gChild = 0;
  ChildExit out;
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  out.stopSignal = gStopSignal;
  return out;
}

}  // namespace linac::cli
