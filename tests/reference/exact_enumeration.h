#pragma once
// Exact enumeration of a randomised procedure (tests only; std only).
//
// The procedure is ordinary straight-line code that asks an Enumerator for its random choices
// (choose(weights)). Enumerator::for_each_path runs it once per path of choices, depth first:
// each run replays the choices of the previous one up to its last open branch point, takes the
// next option there and explores fresh branch points from option 0. The procedure must be
// deterministic given its choices. Each path comes with its probability, the product of
// weight / total of the options taken; options of weight 0 are not explored.
//
// EnumerationSource turns it into a randomness source for the reference verifier
// (reference_verifier.h): accept(j, prob) branches (accept: prob, reject: 1 - prob) and
// sample(j, w) branches over the tokens (w / total). Those branch probabilities are the exact
// law of the uniform-driven UniformSource only when every uniform u[j] is consumed at most
// once on every path (a reused uniform is not independent of the earlier decision). The source
// counts violations in Enumerator::uniform_reuses, which the tests require to be zero.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

#include "tests/reference/reference_verifier.h"

namespace specdec::reference {

class Enumerator {
 public:
  // Calls sink(path_fn(*this), probability) for every path; returns the number of paths.
  template <class PathFn, class Sink>
  int64_t for_each_path(PathFn&& path_fn, Sink&& sink) {
    trail_.clear();
    int64_t n_paths = 0;
    for (;;) {
      depth_ = 0;
      prob_ = 1.0;
      auto result = path_fn(*this);
      assert(depth_ == trail_.size());  // a replay must revisit every recorded branch point
      sink(result, prob_);
      ++n_paths;
      while (!trail_.empty() && trail_.back().taken + 1 == trail_.back().values.size()) trail_.pop_back();
      if (trail_.empty()) return n_paths;
      ++trail_.back().taken;
    }
  }

  // A branch point: option k with probability weights[k] / total (total > 0 required).
  int choose(const Row& weights) {
    if (depth_ == trail_.size()) trail_.push_back(branch_point(weights));
    Choice& c = trail_[depth_++];
    prob_ *= c.probs[c.taken];
    return c.values[c.taken];
  }

  int64_t uniform_reuses = 0;  // see EnumerationSource

 private:
  struct Choice {
    std::vector<int> values;    // the options of positive weight
    std::vector<double> probs;  // their probabilities
    size_t taken = 0;           // the option the current path takes
  };

  static Choice branch_point(const Row& weights) {
    const double total = row_total(weights);
    assert(total > 0.0);
    Choice c;
    for (size_t k = 0; k < weights.size(); ++k)
      if (weights[k] > 0.0) c.values.push_back(static_cast<int>(k)), c.probs.push_back(weights[k] / total);
    return c;
  }

  std::vector<Choice> trail_;
  size_t depth_ = 0;
  double prob_ = 1.0;
};

// One per path (construct it inside the path function): it remembers the uniforms this path
// consumed.
class EnumerationSource {
 public:
  explicit EnumerationSource(Enumerator& e) : e_(e) {}

  bool accept(int j, double prob) {
    consume(j);
    prob = std::min(1.0, std::max(0.0, prob));
    return e_.choose(Row{1.0 - prob, prob}) == 1;
  }

  int sample(int j, const Row& weights) {
    consume(j);
    return row_total(weights) > 0.0 ? e_.choose(weights) : -1;
  }

 private:
  void consume(int j) {
    if (std::find(used_.begin(), used_.end(), j) != used_.end()) ++e_.uniform_reuses;
    used_.push_back(j);
  }

  Enumerator& e_;
  std::vector<int> used_;
};

}  // namespace specdec::reference
