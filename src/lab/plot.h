#pragma once
// Line plots as PNG through gnuplot (Debian's gnuplot-nox): the lab commands
// hand it their measured series; nothing is drawn by hand.
#include <string>
#include <vector>

namespace tally {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;
};

struct PlotSpec {
  std::string title, xlabel, ylabel;
  std::vector<PlotSeries> series;
  double marker_x = -1;  // a vertical line (e.g. the crossover context) when >= 0
  std::string marker_label;
  bool log_y = false;
};

// Runs gnuplot without a shell on a script that never holds `path` (the
// image is drawn in a private directory, then copied to `path`).
// Throws tally::Error if gnuplot is missing or fails, or `path` cannot be written.
void write_plot_png(const std::string& path, const PlotSpec& spec);

}  // namespace tally
