#pragma once
// Preallocated, position-indexed KV cache (DESIGN principle 9).
// Per layer: K and V of shape [B, n_kv_heads, max_seq, head_dim]. Each sequence b has
// a length: positions [0, length(b)) are valid. Rolling back a rejected suffix is O(1):
// only the length moves. Compaction (tree acceptance, beam reorder) copies entries.
// The tensors live on the device given at construction (the model's device()).
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace specdec::model {

class KVCache {
 public:
  KVCache() = default;
  KVCache(int64_t n_layers, int64_t batch, int64_t n_kv_heads, int64_t max_seq, int64_t head_dim,
          at::ScalarType dtype = at::kFloat, at::Device device = at::kCPU);

  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t batch() const { return batch_; }
  int64_t max_seq() const { return max_seq_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }

  at::Tensor& k(int64_t layer) { return k_[layer]; }  // [B, n_kv_heads, max_seq, head_dim]
  at::Tensor& v(int64_t layer) { return v_[layer]; }  // [B, n_kv_heads, max_seq, head_dim]

  int64_t length(int64_t seq) const { return lengths_.at(seq); }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  void set_length(int64_t seq, int64_t n);  // used by forward after writing positions

  // O(1) rollback: keep positions [0, n) of sequence `seq`. Requires n <= length(seq).
  void truncate(int64_t seq, int64_t n);
  // Beam search: new sequence b becomes old sequence indices[b] (indices.size() == batch).
  void reorder(const std::vector<int64_t>& indices);
  // Tree acceptance: positions keep[i] (ascending, >= start) of `seq` move to start + i,
  // and the length becomes start + keep.size(). Uses kernels::kv_compact.
  void compact(int64_t seq, int64_t start, const std::vector<int64_t>& keep);

  int64_t memory_bytes() const;  // bytes held by all K and V tensors

 private:
  std::vector<at::Tensor> k_, v_;
  std::vector<int64_t> lengths_;
  int64_t batch_ = 0, max_seq_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace specdec::model
