#include "model/config_limits.h"

#include <cmath>

#include "core/error.h"

namespace specdec::model {

void check_int_range(const std::string& source, const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  SD_CHECK(v >= lo && v <= hi, source, ": ", key, " = ", v, " is outside [", lo, ", ", hi, "]");
}

namespace {
void check_positive_finite(const std::string& source, const std::string& key, double v) {
  SD_CHECK(std::isfinite(v) && v > 0, source, ": ", key, " = ", v, " must be finite and > 0");
}
}  // namespace

void check_config_limits(const ModelConfig& c, const std::string& source, const ConfigKeys& k) {
  check_int_range(source, k.n_layers, c.n_layers, 1, k_max_layers);
  check_int_range(source, k.d_model, c.d_model, 1, k_max_d_model);
  check_int_range(source, k.n_heads, c.n_heads, 1, k_max_heads);
  check_int_range(source, k.n_kv_heads, c.n_kv_heads, 1, c.n_heads);
  check_int_range(source, k.head_dim, c.head_dim, 1, k_max_head_dim);
  check_int_range(source, k.d_ff, c.d_ff, 1, k_max_d_ff);
  check_int_range(source, k.n_vocab, c.n_vocab, 1, k_max_vocab);
  check_int_range(source, k.n_ctx, c.n_ctx, 0, k_max_ctx);
  // A NaN or negative epsilon loads and then generates junk; an epsilon of 1 or more swamps
  // the normalisation (real models use 1e-6 .. 1e-5).
  check_positive_finite(source, k.norm_eps, c.norm_eps);
  SD_CHECK(c.norm_eps < 1, source, ": ", k.norm_eps, " = ", c.norm_eps, " must be < 1");
  if (c.arch != "gpt2") check_positive_finite(source, k.rope_theta, c.rope_theta);
  check_positive_finite(source, k.rope_scaling_factor, c.rope_scaling_factor);
}

}  // namespace specdec::model
