// A device tensor over host memory seen as a CPU tensor: the same memory, sizes, strides and offset, and the same
// conjugate and negative bits (a lazy conj() view stays one: torch.fft.ifft of a real input returns one). Shared by
// opaudit's two devices over host memory (opaudit/native/cuda.cpp, opaudit/native/device.cpp), with the mapping
// of an op's results they and the dtype bridge share.
#pragma once

#include "torch_compat.h"

#include <c10/core/CPUAllocator.h>

namespace opaudit_host {
// internal linkage: each C++ part (one translation unit) keeps its own statics, never another part's loaded
// in the same process (inline functions' statics would be merged across them)
namespace {

// `resizable`: the alias may grow (an out= argument resized by the kernel) into memory of the CPU's allocator.
inline at::Tensor alias(const at::Tensor& t, c10::DeviceType device, bool resizable = false) {
  if (!t.defined() || t.device().type() != device) return t;
  const auto& st = t.storage();
  // the whole storage, as the device tensor has it (not at::for_blob, whose storage ends where this view ends, and
  // before torch 2.5 leaves the offset out of it: a later view of the alias, as a transposed key in attention, then
  // reaches past its storage), without owning it
  c10::Storage storage(c10::Storage::use_byte_size_t(), st.nbytes(),
                       c10::DataPtr(const_cast<void*>(st.data()), c10::Device(c10::kCPU)),
                       resizable ? c10::GetCPUAllocator() : nullptr, resizable);
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                      t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  out.unsafeGetTensorImpl()->set_storage_offset(t.storage_offset());
  if (t.is_conj()) out._set_conj(true);
  if (t.is_neg()) out._set_neg(true);
  return out;
}

// Replace each tensor result of an op on the stack (the last `nrets` values; a tensor list element by element) by
// f(tensor, index of the result).
template <typename F>
inline void map_results(torch::jit::Stack* stack, size_t nrets, F&& f) {
  for (size_t i = stack->size() - nrets, r = 0; i < stack->size(); ++i, ++r) {
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      v = f(v.toTensor(), r);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, f(list.get(j), r));
      v = list;
    }
  }
}

}  // namespace
}  // namespace opaudit_host
