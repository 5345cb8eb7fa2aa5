#include "lab/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/printable.h"
#include "io/atomic_file.h"

extern char** environ;

namespace tally {

namespace {

// A gnuplot string literal. Titles and labels are the lab's own text, but a
// newline in one would still end the command: control characters become spaces.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  }
  return out + "\"";
}

// A private directory for gnuplot's script, image and log; removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tally-plot-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) fail("--plot: cannot create a temporary directory: {}", std::strerror(errno));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const char* name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `gnuplot plot.gp` inside `dir` without a shell (found on PATH by
// posix_spawnp), its output in dir/gnuplot.log. Returns its exit status.
int run_gnuplot(const ScratchDir& dir) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, dir.path().c_str());
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char prog[] = "gnuplot", script[] = "plot.gp";
  char* argv[] = {prog, script, nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, prog, &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT) fail("--plot needs gnuplot (apt-get install gnuplot-nox, done by scripts/setup.sh)");
  if (rc != 0) fail("--plot: cannot start gnuplot: {}", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("--plot: waiting for gnuplot failed: {}", std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

void write_plot_png(const std::string& path, const PlotSpec& spec) {
  resolve_write_target(path, "plot");  // refused before gnuplot runs
  // gnuplot writes to a fixed name in a private directory and the image is
  // copied to `path` here: the path never reaches gnuplot, whose `set output`
  // would run a command for a path starting with '|'.
  const ScratchDir dir;
  std::string script = "set terminal pngcairo size 900,560 font 'sans,11'\nset output \"plot.png\"\n";
  script += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\nset grid\nset key top left\n", quoted(spec.title),
                        quoted(spec.xlabel), quoted(spec.ylabel));
  if (spec.log_y) script += "set logscale y\n";
  for (size_t i = 0; i < spec.series.size(); ++i) {
    script += fmt::format("$S{} << EOD\n", i);
    const auto& s = spec.series[i];
    for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) script += fmt::format("{} {}\n", s.x[k], s.y[k]);
    script += "EOD\n";
  }
  if (spec.marker_x >= 0)
    script += fmt::format("set arrow from {0}, graph 0 to {0}, graph 1 nohead dt 2 lw 2 lc rgb '#aa3333'\n"
                          "set label {1} at {0}, graph 0.95 offset 1,0 tc rgb '#aa3333'\n",
                          spec.marker_x, quoted(spec.marker_label));
  script += "plot ";
  for (size_t i = 0; i < spec.series.size(); ++i)
    script += fmt::format("{}$S{} using 1:2 with linespoints lw 2 pt 7 title {}", i ? ", " : "", i,
                          quoted(spec.series[i].name));
  script += "\n";
  {
    std::ofstream out(dir / "plot.gp", std::ios::binary);
    out << script;
    if (!out.flush()) fail("--plot: cannot write the gnuplot script in {}", dir.path().string());
  }
  if (const int rc = run_gnuplot(dir); rc != 0) {
    std::ifstream log(dir / "gnuplot.log", std::ios::binary);
    std::ostringstream text;
    text << log.rdbuf();
    fail("gnuplot failed (exit {}) drawing the plot for {}: {}", rc, path, excerpt(text.str(), 300));
  }
  std::ifstream png(dir / "plot.png", std::ios::binary);
  std::ostringstream bytes;
  bytes << png.rdbuf();
  if (!png || bytes.str().empty()) fail("gnuplot wrote no image for {}", path);
  write_file_atomically(path, "plot", bytes.str());
}

}  // namespace tally
