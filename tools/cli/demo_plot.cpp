// The demo's loss-curve plot: a self-contained SVG (no plotting dependency), log-scale loss on
// the y axis, one polyline per recipe, axis ticks and a legend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "demo_model.h"
#include "tessera/core/status.h"

namespace tessera::cli::demo {
namespace {

constexpr double kWidth = 900, kHeight = 520;
constexpr double kLeft = 80, kRight = 200, kTop = 50, kBottom = 60;
constexpr const char* kColors[] = {"#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};

struct Axes {
  double x_max, log_lo, log_hi;
  double x(double step) const { return kLeft + step / x_max * (kWidth - kLeft - kRight); }
  double y(double loss) const {
    const double l = std::log10(std::max(loss, 1e-30));
    return kTop + (log_hi - l) / (log_hi - log_lo) * (kHeight - kTop - kBottom);
  }
};

Axes make_axes(const std::vector<RecipeRun>& runs) {
  double lo = INFINITY, hi = -INFINITY;
  size_t steps = 1;
  for (const RecipeRun& r : runs) {
    steps = std::max(steps, r.losses.size());
    for (double l : r.losses) {
      if (!(l > 0) || !std::isfinite(l)) continue;
      lo = std::min(lo, std::log10(l));
      hi = std::max(hi, std::log10(l));
    }
  }
  if (!std::isfinite(lo)) lo = -1, hi = 0;
  lo = std::floor(lo * 4) / 4;
  hi = std::ceil(hi * 4) / 4;
  if (hi - lo < 0.25) hi = lo + 0.25;
  return {double(std::max<size_t>(steps - 1, 1)), lo, hi};
}

void write_axes(std::ostream& os, const Axes& a, const std::string& title) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop, y1 = kHeight - kBottom;
  os << "<rect x='" << x0 << "' y='" << y0 << "' width='" << x1 - x0 << "' height='" << y1 - y0
     << "' fill='none' stroke='#444'/>\n";
  os << "<text x='" << (x0 + x1) / 2 << "' y='28' text-anchor='middle' font-size='16'>" << title
     << "</text>\n";
  for (int i = 0; i <= 5; ++i) {
    const double step = a.x_max * i / 5.0;
    os << "<line x1='" << a.x(step) << "' y1='" << y1 << "' x2='" << a.x(step) << "' y2='"
       << y1 + 5 << "' stroke='#444'/><text x='" << a.x(step) << "' y='" << y1 + 20
       << "' text-anchor='middle' font-size='12'>" << std::lround(step) << "</text>\n";
  }
  for (double l = a.log_lo; l <= a.log_hi + 1e-9; l += 0.25) {
    const double y = a.y(std::pow(10.0, l));
    char label[32];
    std::snprintf(label, sizeof label, "%.3g", std::pow(10.0, l));
    os << "<line x1='" << x0 << "' y1='" << y << "' x2='" << x1 << "' y2='" << y
       << "' stroke='#ddd'/><text x='" << x0 - 6 << "' y='" << y + 4
       << "' text-anchor='end' font-size='12'>" << label << "</text>\n";
  }
  os << "<text x='" << (x0 + x1) / 2 << "' y='" << kHeight - 15
     << "' text-anchor='middle' font-size='13'>step</text>\n";
  os << "<text x='20' y='" << (y0 + y1) / 2 << "' font-size='13' transform='rotate(-90 20 "
     << (y0 + y1) / 2 << ")' text-anchor='middle'>training loss (MSE, log scale)</text>\n";
}

}  // namespace

void write_loss_svg(const std::string& path, const std::vector<RecipeRun>& runs,
                    const std::string& title) {
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << kHeight
     << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  const Axes a = make_axes(runs);
  write_axes(os, a, title);
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    os << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    for (size_t s = 0; s < runs[i].losses.size(); ++s) {
      const double l = runs[i].losses[s];
      if (l > 0 && std::isfinite(l)) os << a.x(double(s)) << ',' << a.y(l) << ' ';
    }
    os << "'/>\n";
    const double ly = kTop + 10 + 22.0 * double(i);
    os << "<line x1='" << kWidth - kRight + 15 << "' y1='" << ly << "' x2='"
       << kWidth - kRight + 45 << "' y2='" << ly << "' stroke='" << color
       << "' stroke-width='3'/><text x='" << kWidth - kRight + 52 << "' y='" << ly + 4
       << "' font-size='13'>" << runs[i].name << "</text>\n";
  }
  os << "</svg>\n";
  std::ofstream f(path);
  TESSERA_CHECK(f.good(), "demo: cannot write the plot to '", path, "'");
  f << os.str();
  TESSERA_CHECK(f.good(), "demo: writing '", path, "' failed");
}

}  // namespace tessera::cli::demo
