// The demo's loss-curve plot: a self-contained SVG (no plotting dependency). Top panel: loss on
// a log axis; bottom panel (when the FP32 reference has losses): each recipe's loss relative to
// FP32 in percent, where curves that coincide on the log axis separate. Every curve has its own
// color, dash pattern and marker, so none hides under another.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "demo_model.h"
#include "tessera/core/status.h"

namespace tessera::cli::demo {
namespace {

constexpr double kWidth = 960, kLeft = 80, kRight = 210, kTop = 50;
constexpr double kLossHeight = 330, kGap = 60, kRelHeight = 200, kBottom = 50;
constexpr const char* kColors[] = {"#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
constexpr const char* kDashes[] = {"", "7,3", "2,3", "10,3,2,3", "4,4", "1,2", "12,4",
                                   "6,2,2,2,2,2", "3,6", "9,2"};
constexpr int kMarkers = 5;  // circle, square, triangle, diamond, cross

// Step 1, 2, 5 × 10^k closest above range / max_ticks.
double nice_step(double range, int max_ticks) {
  const double raw = range / max_ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::vector<double> linear_ticks(double lo, double hi, int max_ticks, bool integers) {
  double step = nice_step(hi - lo, max_ticks);
  if (integers) step = std::max(1.0, std::round(step));
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step; v += step) {
    t.push_back(std::abs(v) < 1e-12 * step ? 0.0 : v);
  }
  return t;
}

// Ticks of a log axis over [lo, hi] (values, lo > 0): decades, then 1-2-5, then 1..9 per
// decade as the range shrinks; a range narrower than that gets linear ticks.
std::vector<double> log_ticks(double lo, double hi) {
  const double decades = std::log10(hi / lo);
  std::vector<double> mantissas;
  if (decades >= 4) mantissas = {1};
  else if (decades >= 1) mantissas = {1, 2, 5};
  else if (decades >= 0.6) mantissas = {1, 2, 3, 5};
  else if (decades >= 0.3) mantissas = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> t;
  for (int k = int(std::floor(std::log10(lo))); k <= int(std::ceil(std::log10(hi))); ++k) {
    for (double m : mantissas) {
      const double v = m * std::pow(10.0, k);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  }
  if (t.size() < 4) t = linear_ticks(lo, hi, 7, false);
  return t;
}

struct Axis {
  double lo, hi, px0, px1;  // data range → pixel range (px0 at lo)
  bool log = false;
  double map(double v) const {
    const double f = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                         : (v - lo) / (hi - lo);
    return px0 + f * (px1 - px0);
  }
};

std::string label(double v, bool percent) {
  char s[32];
  std::snprintf(s, sizeof s, percent ? "%+.3g%%" : "%.3g", v);
  return s;
}

void write_frame(std::ostream& os, const Axis& x, const Axis& y, const std::vector<double>& ticks,
                 const std::string& ylabel, bool percent) {
  os << "<rect x='" << x.px0 << "' y='" << y.px1 << "' width='" << x.px1 - x.px0 << "' height='"
     << y.px0 - y.px1 << "' fill='none' stroke='#444'/>\n";
  for (double v : ticks) {
    const double py = y.map(v);
    os << "<line x1='" << x.px0 << "' y1='" << py << "' x2='" << x.px1 << "' y2='" << py
       << "' stroke='" << (percent && v == 0 ? "#888" : "#e4e4e4") << "'/><text x='"
       << x.px0 - 6 << "' y='" << py + 4 << "' text-anchor='end' font-size='12'>"
       << label(v, percent) << "</text>\n";
  }
  for (double s : linear_ticks(x.lo, x.hi, 8, true)) {
    os << "<line x1='" << x.map(s) << "' y1='" << y.px0 << "' x2='" << x.map(s) << "' y2='"
       << y.px0 + 5 << "' stroke='#444'/><text x='" << x.map(s) << "' y='" << y.px0 + 19
       << "' text-anchor='middle' font-size='12'>" << label(s, false) << "</text>\n";
  }
  const double mid = (y.px0 + y.px1) / 2;
  os << "<text x='18' y='" << mid << "' font-size='13' transform='rotate(-90 18 " << mid
     << ")' text-anchor='middle'>" << ylabel << "</text>\n";
}

void write_marker(std::ostream& os, int kind, double px, double py, const char* color) {
  constexpr double r = 3.5;
  os << "<path fill='" << (kind % 2 ? "white" : color) << "' stroke='" << color << "' d='";
  switch (kind % kMarkers) {
    case 0: os << "M" << px - r << ',' << py << " a" << r << ',' << r << " 0 1,0 " << 2 * r
               << ",0 a" << r << ',' << r << " 0 1,0 " << -2 * r << ",0"; break;
    case 1: os << "M" << px - r << ',' << py - r << " h" << 2 * r << " v" << 2 * r << " h"
               << -2 * r << 'z'; break;
    case 2: os << "M" << px << ',' << py - r << " L" << px + r << ',' << py + r << ' ' << px - r
               << ',' << py + r << 'z'; break;
    case 3: os << "M" << px << ',' << py - r << " L" << px + r << ',' << py << ' ' << px << ','
               << py + r << ' ' << px - r << ',' << py << 'z'; break;
    default: os << "M" << px - r << ',' << py - r << " L" << px + r << ',' << py + r << " M"
                << px + r << ',' << py - r << " L" << px - r << ',' << py + r; break;
  }
  os << "'/>\n";
}

// One curve: points (step s + 1, values[s]) where finite (and > 0 on a log axis), markers on
// every `every`-th point, offset by the curve index so coinciding curves show all markers.
void write_curve(std::ostream& os, size_t i, const std::vector<double>& values, const Axis& x,
                 const Axis& y) {
  const char* color = kColors[i % std::size(kColors)];
  const char* dash = kDashes[i % std::size(kDashes)];
  const size_t every = std::max<size_t>(1, values.size() / 8);
  os << "<polyline fill='none' stroke='" << color << "' stroke-width='1.6'"
     << (*dash ? std::string(" stroke-dasharray='") + dash + "'" : "") << " points='";
  for (size_t s = 0; s < values.size(); ++s) {
    if (std::isfinite(values[s]) && (!y.log || values[s] > 0)) {
      os << x.map(double(s + 1)) << ',' << y.map(values[s]) << ' ';
    }
  }
  os << "'/>\n";
  for (size_t s = (i * every / 3) % every; s < values.size(); s += every) {
    if (std::isfinite(values[s]) && (!y.log || values[s] > 0)) {
      write_marker(os, int(i), x.map(double(s + 1)), y.map(values[s]), color);
    }
  }
}

void write_legend(std::ostream& os, const std::vector<RecipeRun>& runs) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    const char* dash = kDashes[i % std::size(kDashes)];
    const double ly = kTop + 10 + 22.0 * double(i), lx = kWidth - kRight + 15;
    os << "<line x1='" << lx << "' y1='" << ly << "' x2='" << lx + 36 << "' y2='" << ly
       << "' stroke='" << color << "' stroke-width='2'"
       << (*dash ? std::string(" stroke-dasharray='") + dash + "'" : "") << "/>\n";
    write_marker(os, int(i), lx + 18, ly, color);
    os << "<text x='" << lx + 44 << "' y='" << ly + 4 << "' font-size='13'>" << runs[i].name
       << "</text>\n";
  }
}

// [lo, hi] of the finite (positive when `positive`) values of every curve.
std::pair<double, double> data_range(const std::vector<std::vector<double>>& curves,
                                     bool positive) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& c : curves) {
    for (double v : c) {
      if (!std::isfinite(v) || (positive && !(v > 0))) continue;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  return {lo, hi};
}

}  // namespace

void write_loss_svg(const std::string& path, const std::vector<RecipeRun>& runs,
                    size_t reference, const std::string& title) {
  std::vector<std::vector<double>> losses, relative;
  size_t steps = 2;
  for (const RecipeRun& r : runs) {
    losses.push_back(r.losses);
    steps = std::max(steps, r.losses.size());
  }
  const std::vector<double>* ref = reference < runs.size() ? &runs[reference].losses : nullptr;
  const bool rel_panel = ref != nullptr && !ref->empty();
  for (const RecipeRun& r : runs) {
    std::vector<double> rel;
    for (size_t s = 0; rel_panel && s < std::min(r.losses.size(), ref->size()); ++s) {
      rel.push_back(100.0 * (r.losses[s] / (*ref)[s] - 1.0));
    }
    relative.push_back(rel);
  }
  const double height = kTop + kLossHeight + (rel_panel ? kGap + kRelHeight : 0) + kBottom;
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << height
     << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  os << "<text x='" << (kLeft + kWidth - kRight) / 2 << "' y='28' text-anchor='middle' "
     << "font-size='16'>" << title << "</text>\n";
  const Axis x{1, double(steps), kLeft, kWidth - kRight};
  auto [lo, hi] = data_range(losses, true);
  if (!std::isfinite(lo)) lo = 0.1, hi = 1;
  if (hi <= lo * 1.02) lo /= 1.05, hi *= 1.05;
  const double pad = std::pow(hi / lo, 0.04);
  const Axis y{lo / pad, hi * pad, kTop + kLossHeight, kTop, true};
  write_frame(os, x, y, log_ticks(y.lo, y.hi), "training loss (MSE, log scale)", false);
  for (size_t i = 0; i < runs.size(); ++i) write_curve(os, i, losses[i], x, y);
  double bottom = kTop + kLossHeight;
  if (rel_panel) {
    auto [rlo, rhi] = data_range(relative, false);
    if (!std::isfinite(rlo)) rlo = -1, rhi = 1;
    rlo = std::min(rlo, 0.0), rhi = std::max(rhi, 0.0);
    if (rhi - rlo < 0.02) rlo -= 0.01, rhi += 0.01;
    const double rpad = 0.06 * (rhi - rlo);
    const double top = kTop + kLossHeight + kGap;
    const Axis yr{rlo - rpad, rhi + rpad, top + kRelHeight, top, false};
    write_frame(os, x, yr, linear_ticks(yr.lo, yr.hi, 6, false),
                "loss vs " + runs[reference].name + " (%)", true);
    for (size_t i = 0; i < runs.size(); ++i) write_curve(os, i, relative[i], x, yr);
    bottom = top + kRelHeight;
  }
  os << "<text x='" << (kLeft + kWidth - kRight) / 2 << "' y='" << bottom + 40
     << "' text-anchor='middle' font-size='13'>step</text>\n";
  write_legend(os, runs);
  os << "</svg>\n";
  std::ofstream f(path);
  TESSERA_CHECK(f.good(), "cannot write the plot to '", path, "'");
  f << os.str();
  TESSERA_CHECK(f.good(), "writing '", path, "' failed");
}

}  // namespace tessera::cli::demo
