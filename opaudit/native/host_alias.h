// A device tensor over host memory seen as a CPU tensor: the same memory, sizes, strides and offset, and the same
// conjugate and negative bits (a lazy conj() view stays one: torch.fft.ifft of a real input returns one). Shared by
// opaudit's two devices over host memory (opaudit/standin/cuda.cpp, opaudit/fallback/device.cpp).
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

}  // namespace opaudit_host
