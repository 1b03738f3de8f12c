// A device tensor over host memory seen as a CPU tensor: the same memory, sizes, strides and offset, and the same
// conjugate and negative bits (a lazy conj() view stays one: torch.fft.ifft of a real input returns one). Shared by
// opaudit's two devices over host memory (opaudit/standin/cuda.cpp, opaudit/fallback/device.cpp), with the mapping
// of an op's results they and the dtype bridge share.
#pragma once

#include <torch/extension.h>

#include <c10/core/CPUAllocator.h>

namespace opaudit_host {

// `resizable`: the alias may grow (an out= argument resized by the kernel) into memory of the CPU's allocator.
inline at::Tensor alias(const at::Tensor& t, c10::DeviceType device, bool resizable = false) {
  if (!t.defined() || t.device().type() != device) return t;
  const auto& st = t.storage();
  auto maker = at::for_blob(const_cast<void*>(st.data()), t.sizes());
  maker.strides(t.strides()).storage_offset(t.storage_offset()).options(t.options().device(at::kCPU));
  if (resizable) maker.resizeable_storage().allocator(c10::GetCPUAllocator());
  auto out = maker.make_tensor();
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

}  // namespace opaudit_host
