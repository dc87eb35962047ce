#include "model/checks.h"

#include <sstream>

#include "core/error.h"

namespace specdec::model {

std::string shape_str(at::IntArrayRef shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

void check_forward_inputs(const std::string& who, const ModelConfig& cfg, int64_t cache_heads,
                          int64_t max_positions, const at::Tensor& tokens,
                          const std::vector<int64_t>& start_pos, const KVCache& cache) {
  SD_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) > 0, who,
           ": tokens must be [B, T] with T >= 1, got ",
           tokens.defined() ? shape_str(tokens.sizes()) : std::string("undefined"));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  SD_CHECK(static_cast<int64_t>(start_pos.size()) == B, who, ": ", start_pos.size(),
           " start positions for a batch of ", B);
  SD_CHECK(cache.batch() == B && cache.n_layers() == cfg.n_layers && cache.n_kv_heads() == cache_heads &&
               cache.head_dim() == cfg.head_dim,
           who, ": cache [layers ", cache.n_layers(), ", batch ", cache.batch(), ", kv heads ",
           cache.n_kv_heads(), ", head_dim ", cache.head_dim(), "] does not fit this model/batch (batch ", B, ")");
  for (int64_t b = 0; b < B; ++b) {
    SD_CHECK(start_pos[b] >= 0 && start_pos[b] <= cache.length(b), who, ": start_pos[", b, "] = ", start_pos[b],
             " but the cache holds ", cache.length(b), " positions");
    SD_CHECK(start_pos[b] + T <= cache.max_seq(), who, ": sequence ", b, " would reach ", start_pos[b] + T,
             " positions, cache max_seq is ", cache.max_seq());
    SD_CHECK(max_positions <= 0 || start_pos[b] + T <= max_positions, who, ": sequence ", b, " would reach ",
             start_pos[b] + T, " positions, beyond the learned position table n_ctx = ", max_positions);
  }
  const at::Tensor ids = tokens.to(at::kLong).contiguous();
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < B * T; ++i)
    SD_CHECK(p[i] >= 0 && p[i] < cfg.n_vocab, who, ": token id ", p[i], " at [", i / T, ", ", i % T,
             "] out of range [0, ", cfg.n_vocab, ")");
}

}  // namespace specdec::model
