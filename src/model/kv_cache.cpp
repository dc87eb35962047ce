// Preallocated KV cache: allocation, O(1) rollback, beam reorder and tree compaction.
#include "model/kv_cache.h"

#include <vector>

#include "core/error.h"
#include "model/device.h"

namespace specdec::model {

namespace {

// Compacts sequence `seq` of the float32 tensors `ts` (the cache's K and V, all [B, H, S, D]
// alike) through the kernel of their device (kernels/backend.h), in one backend call for the
// whole cache. The kernel works on whole batches; a single entry of a contiguous [B, H, S, D]
// tensor is itself a contiguous [1, H, S, D] tensor, so the other sequences are untouched.
void compact_f32(const std::vector<at::Tensor*>& ts, int64_t seq, int64_t start, const std::vector<int64_t>& keep) {
  if (keep.empty() || ts.empty()) return;
  std::vector<float*> layers;
  for (at::Tensor* t : ts) layers.push_back(t->select(0, seq).data_ptr<float>());  // [H, S, D] each
  const at::Tensor& t = *ts[0];
  int32_t n_keep = static_cast<int32_t>(keep.size());
  kernels::CompactArgs a;
  a.batch = 1;
  a.heads = t.size(1);
  a.max_seq = t.size(2);
  a.head_dim = t.size(3);
  a.src_pos = keep.data();
  a.n_keep = &n_keep;
  a.dst_start = &start;
  a.max_keep = static_cast<int64_t>(keep.size());
  backend_of(t.device())->kv_compact_layers(a, layers);
}

}  // namespace

KVCache::KVCache(int64_t n_layers, int64_t batch, int64_t n_kv_heads, int64_t max_seq,
                 int64_t head_dim, at::ScalarType dtype, at::Device device)
    : lengths_(batch > 0 ? batch : 0, 0),
      batch_(batch), max_seq_(max_seq), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {
  SD_CHECK(n_layers > 0 && batch > 0 && n_kv_heads > 0 && max_seq > 0 && head_dim > 0,
           "KVCache: all dimensions must be positive, got n_layers=", n_layers, " batch=", batch,
           " n_kv_heads=", n_kv_heads, " max_seq=", max_seq, " head_dim=", head_dim);
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  k_.reserve(n_layers);
  v_.reserve(n_layers);
  for (int64_t l = 0; l < n_layers; ++l) {
    // Zero-filled so that masked-out positions never hold NaN/Inf garbage (0 * NaN = NaN
    // would leak through the attention matmul even with a zero probability).
    k_.push_back(at::zeros({batch, n_kv_heads, max_seq, head_dim}, opts));
    v_.push_back(at::zeros({batch, n_kv_heads, max_seq, head_dim}, opts));
  }
}

void KVCache::set_length(int64_t seq, int64_t n) {
  SD_CHECK(seq >= 0 && seq < batch_, "KVCache::set_length: sequence ", seq,
           " out of range [0, ", batch_, ")");
  SD_CHECK(n >= 0 && n <= max_seq_, "KVCache::set_length: length ", n, " of sequence ", seq,
           " out of range [0, ", max_seq_, "]");
  lengths_[seq] = n;
}

void KVCache::truncate(int64_t seq, int64_t n) {
  SD_CHECK(seq >= 0 && seq < batch_, "KVCache::truncate: sequence ", seq, " out of range [0, ",
           batch_, ")");
  SD_CHECK(n >= 0 && n <= lengths_[seq], "KVCache::truncate: new length ", n, " of sequence ",
           seq, " must be in [0, ", lengths_[seq], "] (truncate never extends)");
  lengths_[seq] = n;
}

void KVCache::reorder(const std::vector<int64_t>& indices) {
  SD_CHECK(static_cast<int64_t>(indices.size()) == batch_, "KVCache::reorder: got ",
           indices.size(), " indices for a batch of ", batch_);
  for (size_t b = 0; b < indices.size(); ++b)
    SD_CHECK(indices[b] >= 0 && indices[b] < batch_, "KVCache::reorder: indices[", b, "] = ",
             indices[b], " out of range [0, ", batch_, ")");
  const int64_t row_elems = n_kv_heads_ * max_seq_ * head_dim_;
  for (auto* layers : {&k_, &v_}) {
    for (auto& t : *layers) {
      // Beam reorder duplicates rows, so it cannot be done in place: gather into a fresh
      // tensor and swap it in (the old buffer is freed).
      at::Tensor dst = at::empty_like(t);
      if (t.scalar_type() == at::kFloat) {
        backend_of(t.device())->kv_reorder(dst.data_ptr<float>(), t.data_ptr<float>(), indices.data(),
                                           batch_, row_elems);
      } else {
        at::Tensor idx = at::tensor(at::IntArrayRef(indices), at::kLong).to(t.device());
        at::index_select_out(dst, t, 0, idx);
      }
      t = dst;
    }
  }
  std::vector<int64_t> old = lengths_;
  for (int64_t b = 0; b < batch_; ++b) lengths_[b] = old[indices[b]];
}

void KVCache::compact(int64_t seq, int64_t start, const std::vector<int64_t>& keep) {
  SD_CHECK(seq >= 0 && seq < batch_, "KVCache::compact: sequence ", seq, " out of range [0, ",
           batch_, ")");
  const int64_t len = lengths_[seq];
  SD_CHECK(start >= 0 && start <= len, "KVCache::compact: start ", start,
           " out of range [0, ", len, "] of sequence ", seq);
  for (size_t i = 0; i < keep.size(); ++i) {
    SD_CHECK(keep[i] >= start && keep[i] < len, "KVCache::compact: keep[", i, "] = ", keep[i],
             " out of range [", start, ", ", len, ") of sequence ", seq);
    SD_CHECK(i == 0 || keep[i] > keep[i - 1], "KVCache::compact: keep must be strictly ",
             "ascending, but keep[", i, "] = ", keep[i], " after ", keep[i - 1]);
  }
  const int64_t n_keep = static_cast<int64_t>(keep.size());
  std::vector<at::Tensor*> f32;  // compacted together, by the kernels
  for (auto* layers : {&k_, &v_}) {
    for (auto& t : *layers) {
      if (t.scalar_type() == at::kFloat) {
        f32.push_back(&t);
      } else {
        // Ascending sources >= destinations: a forward copy never reads an overwritten row.
        at::Tensor s = t.select(0, seq);  // [H, S, D]
        for (int64_t i = 0; i < n_keep; ++i)
          if (keep[i] != start + i) s.select(1, start + i).copy_(s.select(1, keep[i]));
      }
    }
  }
  compact_f32(f32, seq, start, keep);
  lengths_[seq] = start + n_keep;
}

int64_t KVCache::memory_bytes() const {
  int64_t n = 0;
  for (const auto& t : k_) n += t.numel() * static_cast<int64_t>(t.element_size());
  for (const auto& t : v_) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

}  // namespace specdec::model
