#include "lab/plot.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace tally {

namespace {
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

void write_plot_png(const std::string& path, const PlotSpec& spec) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    fail("--plot needs gnuplot (apt-get install gnuplot-nox, done by scripts/setup.sh)");
  std::string script = fmt::format("set terminal pngcairo size 900,560 font 'sans,11'\nset output {}\n", quoted(path));
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
  FILE* p = popen("gnuplot 2>&1", "w");
  if (!p) fail("cannot start gnuplot");
  std::fwrite(script.data(), 1, script.size(), p);
  const int rc = pclose(p);
  if (rc != 0) fail("gnuplot failed (exit {}) writing {}", rc, path);
}

}  // namespace tally
