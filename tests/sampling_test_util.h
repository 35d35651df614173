// The sampling spec of src/sample/sampling.h computed a second way, for the sampling tests:
// the vocabulary sorted once, the filters walked in double, the filtered distribution made
// explicit. Also reports how close the float-summed twins come to a cut (their margins), so
// the CUDA-vs-CPU test only compares rows whose answer rounding cannot change.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "sample/sampling.h"

namespace hydragen::sample::reference {

struct FilteredDistribution {
  std::vector<double> probabilities;  // the kept tokens' p, renormalised; 0 for the others
  int kept = 0;                       // tokens with probability > 0
  // Distance from top_p * Z_a to the nearest cumulative mass at a value boundary, / Z_a
  // (infinity when top-p is off).
  double top_p_margin = std::numeric_limits<double>::infinity();
  // No scaled logit lies within one float step of the min-p cut (true when min-p is off).
  bool min_p_clear = true;
};

inline FilteredDistribution filtered_distribution(std::span<const float> raw, const SamplingParams& params) {
  const std::size_t n = raw.size();
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = scaled_logit(raw[i], params.temperature);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] > x[b]; });
  const float m = x[order[0]];
  const auto p = [&](std::size_t i) { return std::exp(static_cast<double>(x[i]) - m); };

  FilteredDistribution d;
  float tau = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n) tau = x[order[params.top_k - 1]];
  if (params.min_p > 0.f) {
    const float cut = min_p_threshold(m, params.min_p);
    const float below = std::nextafter(cut, -INFINITY), above = std::nextafter(cut, INFINITY);
    for (const float v : x) d.min_p_clear &= !(v >= below && v <= above);
    tau = std::max(tau, cut);
  }
  if (params.top_p < 1.f) {
    double kept_mass = 0.0;
    for (const std::size_t i : order) {
      if (x[i] >= tau) kept_mass += p(i);
    }
    const double target = static_cast<double>(params.top_p) * kept_mass;
    double mass = 0.0;  // cumulative mass over whole groups of equal values, largest first
    for (std::size_t k = 0; k < n && x[order[k]] >= tau;) {
      const float value = x[order[k]];
      const double before = mass;
      for (; k < n && x[order[k]] == value; ++k) mass += p(order[k]);
      if (mass >= target) {
        d.top_p_margin = std::min(target - before, mass - target) / kept_mass;
        tau = value;
        break;
      }
    }
  }
  d.probabilities.assign(n, 0.0);
  double z = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] >= tau) z += p(i);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] >= tau && p(i) > 0.0) {
      d.probabilities[i] = p(i) / z;
      ++d.kept;
    }
  }
  return d;
}

// The token the spec draws from `probabilities` with uniform u (the first index whose running
// sum exceeds u), and the distance from u to the nearest end of that token's interval.
struct ReferenceDraw {
  std::int32_t token = -1;
  double margin = 0.0;
};
inline ReferenceDraw reference_draw(const std::vector<double>& probabilities, double u) {
  double running = 0.0;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0.0) continue;
    const double next = running + probabilities[i];
    if (next > u) return {static_cast<std::int32_t>(i), std::min(u - running, next - u)};
    running = next;
  }
  return {};
}

// log_softmax(raw)[token] in double.
inline double log_softmax64(std::span<const float> raw, std::int32_t token) {
  const double max = *std::max_element(raw.begin(), raw.end());
  double sum = 0.0;
  for (const float l : raw) sum += std::exp(l - max);
  return raw[static_cast<std::size_t>(token)] - max - std::log(sum);
}

}  // namespace hydragen::sample::reference
