// What opaudit's two devices over host memory share: the CUDA device that traces (cuda.cpp, on DeviceType::CUDA)
// and the target device that rehearses (device.cpp, on PrivateUse1). Each is a device whose tensors are real
// device tensors over host memory, and runs an op by running its CPU kernel over CPU aliases of that memory:
//
// - the kernels a backend provides for tensors to exist at all: allocation, resize_, set_, the copies;
// - the device guard (up to kMaxDevices devices, default streams only, no-op events: all synchronous);
// - the redirect: an op's device arguments become CPU aliases (host_alias.h), the CPU kernel runs on them
//   (dtype_bridge.h), what the kernel resized is synchronised back, and each result becomes a device tensor: an
//   argument's alias becomes its device tensor again, a view of one a view of it, a fresh result is adopted
//   without a copy (its storage then belongs to the device, and the device's memory counters see it).
//
// A device is a traits struct D, defined by the part that includes this header:
//   static constexpr c10::DeviceType type;  static constexpr c10::DispatchKey key;
//   static at::Allocator* allocator();       the device's allocator (its memory counters see what it allocates)
//   static c10::DeviceIndex current();       the index selected on this thread
//   static void select(c10::DeviceIndex);    select a valid index;  static bool valid(c10::DeviceIndex);
//   static c10::DeviceIndex count();         how many devices there are
//   static void allocated(c10::DeviceIndex, int64_t bytes), freed(...): device memory was allocated (by
//                                            HostAllocator, or a fresh CPU result adopted), and was freed
//   static const char* name;                 for messages
#pragma once

#include "host_alias.h"
#include "torch_compat.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <vector>

namespace opaudit_host {
// internal linkage: each C++ part (one translation unit) keeps its own statics (host_alias.h)
namespace {

constexpr int kMaxDevices = 16;

// A device argument of an op and its CPU alias; `data`: where the alias's memory was when the kernel ran.
struct Arg {
  at::Tensor dev, cpu;
  const void* data;
};

// The device's allocator: 64-byte aligned host memory, each block's size and device index kept in front of it, counted
// by D::allocated and D::freed as an adopted result is.
template <class D>
struct HostAllocator final : at::Allocator {
  static void deleter(void* ctx) {
    if (!ctx) return;
    auto* header = static_cast<int64_t*>(ctx) - 8;
    D::freed(static_cast<c10::DeviceIndex>(header[1]), header[0]);
    std::free(header);
  }
  at::DataPtr allocate(size_t nbytes) OPAUDIT_ALLOCATE_CONST override {
    const c10::DeviceIndex index = D::current();
    c10::Device dev(D::type, index);
    if (nbytes == 0) return {nullptr, nullptr, &deleter, dev};
    void* raw = nullptr;
    TORCH_CHECK(posix_memalign(&raw, 64, nbytes + 64) == 0, D::name, ": out of memory");
    auto* header = static_cast<int64_t*>(raw);
    header[0] = static_cast<int64_t>(nbytes);
    header[1] = index;
    D::allocated(index, static_cast<int64_t>(nbytes));
    void* data = static_cast<char*>(raw) + 64;
    return {data, data, &deleter, dev};
  }
  at::DeleterFnPtr raw_deleter() const override { return &deleter; }
#ifdef OPAUDIT_TORCH_2_3
  void copy_data(void* dst, const void* src, std::size_t n) const override { default_copy_data(dst, src, n); }
#endif
};

// An op's call with its device arguments replaced by CPU aliases.
struct HostCall {
  std::vector<Arg> args;
  c10::Device device;  // the device its device arguments are on (else the current one)
  bool to_host = false;  // a copy to the host (a `cpu` device argument): its results stay there
};

template <class D>
struct HostDevice {
  static c10::DispatchKeySet keys() { return c10::DispatchKeySet(D::key); }

  static at::Tensor as_cpu(const at::Tensor& t, bool resizable = false) { return alias(t, D::type, resizable); }

  static at::Tensor empty_memory_format(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                                        c10::optional<at::Layout>, c10::optional<at::Device> device,
                                        c10::optional<bool>, c10::optional<at::MemoryFormat> fmt) {
    c10::DeviceGuard g(device.value_or(c10::Device(D::type)));
    return at::detail::empty_generic(size, D::allocator(), keys(), c10::dtype_or_default(dtype), fmt);
  }

  static at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                                  c10::optional<at::Layout>, c10::optional<at::Device> device, c10::optional<bool>) {
    c10::DeviceGuard g(device.value_or(c10::Device(D::type)));
    return at::detail::empty_strided_generic(size, stride, D::allocator(), keys(), c10::dtype_or_default(dtype));
  }

  static const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size,
                                  c10::optional<at::MemoryFormat> fmt) {
    c10::DeviceGuard g(self.device());
    return at::native::resize_(self, size, fmt);
  }

  static at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
    TORCH_CHECK(self.device().type() == D::type || self.is_cpu(), "cannot copy from ", self.device());
    TORCH_CHECK(dst.device().type() == D::type || dst.is_cpu(), "cannot copy to ", dst.device());
    as_cpu(dst).copy_(as_cpu(self));
    return dst;
  }

  static at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
    at::native::resize_output(dst, self.sizes());
    return copy_from(self, dst, false);
  }

  static at::Tensor& set_storage(at::Tensor& self, at::Storage src, int64_t offset, at::IntArrayRef size,
                                 at::IntArrayRef stride) {
    c10::DeviceGuard g(self.device());
    return at::native::set_storage_cpu_(self, std::move(src), offset, size, stride);
  }

  // What the kernel did to an argument's alias, done to the argument: new sizes and strides over the same memory,
  // or memory of the CPU's allocator (an out= argument it resized) copied into the device tensor, resized.
  static void sync_back(const at::Tensor& dev, const at::Tensor& alias, const void* orig_data) {
    if (alias.storage().data() == orig_data) {
      if (alias.sizes() != dev.sizes() || alias.strides() != dev.strides() ||
          alias.storage_offset() != dev.storage_offset())
        dev.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
      return;
    }
    resize(dev, alias.sizes(), c10::nullopt);
    as_cpu(dev).copy_(alias);
  }

  // A CPU kernel's fresh result adopted as device memory, without a copy: the device storage holds the CPU storage
  // (a copy into the device's own allocation cost as much as an elementwise op again: ResNet-50's forward pass ran
  // 1.13 to 1.18x eager, a copy per op result), and the device's counters see its bytes.
  struct Adopted {
    c10::Storage keep;
    int64_t nbytes;
    c10::DeviceIndex index;
    static void release(void* ctx) {
      auto* a = static_cast<Adopted*>(ctx);
      D::freed(a->index, a->nbytes);
      delete a;
    }
  };

  static at::Tensor adopt(const at::Tensor& t, c10::Device device) {
    const auto& st = t.storage();
    const auto n = static_cast<int64_t>(st.nbytes());
    const auto index = device.has_index() ? device.index() : D::current();
    auto* ctx = new Adopted{st, n, index};
    D::allocated(index, n);
    at::DataPtr ptr(const_cast<void*>(st.data()), ctx, &Adopted::release, c10::Device(D::type, index));
    auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), n, std::move(ptr),
                                                      D::allocator(), /*resizable=*/true);
    auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(impl)), keys(), t.dtype());
    out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return out;
  }

  // A result of the CPU kernel on the device (scheme above); a tensor not on the host as it is.
  static at::Tensor to_device(const at::Tensor& t, const std::vector<Arg>& args, c10::Device device) {
    if (!t.defined() || !t.is_cpu()) return t;
    for (const auto& a : args)
      if (t.unsafeGetTensorImpl() == a.cpu.unsafeGetTensorImpl()) return a.dev;
    for (const auto& a : args)
      if (t.storage().is_alias_of(a.cpu.storage()) && t.storage().data() == a.data && t.dtype() == a.dev.dtype())
        return at::native::as_strided_tensorimpl(a.dev, t.sizes(), t.strides(), t.storage_offset());
    // a result that owns its memory alone (not a view of a host argument): adopted as it is
    if (t.layout() == at::kStrided && !t.is_quantized() && t.has_storage() && t.storage().use_count() == 1 &&
        t.storage().data() != nullptr)
      return adopt(t, device);
    c10::DeviceGuard g(device);
    if (t.numel() == 0)  // (batch norm's saved statistics in eval): nothing to copy
      return empty_strided(t.sizes(), t.strides(), t.scalar_type(), c10::nullopt, device, c10::nullopt);
    auto out = t.is_non_overlapping_and_dense()
        ? empty_strided(t.sizes(), t.strides(), t.scalar_type(), c10::nullopt, device, c10::nullopt)
        : empty_memory_format(t.sizes(), t.scalar_type(), c10::nullopt, device, c10::nullopt, c10::nullopt);
    as_cpu(out).copy_(t);
    return out;
  }

  // Replace the op's device arguments on the stack by CPU aliases (written ones resizable) and a device argument
  // by `cpu`. Tensors on two devices fail as on a GPU.
  static HostCall host_arguments(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t nargs = schema.arguments().size(), base = stack->size() - nargs;
    HostCall call{{}, c10::Device(D::type, D::current())};
    bool have_device = false;
    auto convert = [&](const at::Tensor& t, bool write) -> at::Tensor {
      if (!t.defined() || t.device().type() != D::type) return t;
      if (!have_device) { call.device = t.device(); have_device = true; }
      TORCH_CHECK(t.device() == call.device, "Expected all tensors to be on the same device, but found at least "
                  "two devices, ", call.device, " and ", t.device(), "! (", op.operator_name().name, ")");
      auto c = as_cpu(t, write);
      call.args.push_back({t, c, c.storage().data()});
      return c;
    };
    for (size_t i = 0; i < nargs; ++i) {
      auto& v = (*stack)[base + i];
      const auto* ai = schema.arguments()[i].alias_info();
      const bool write = ai && ai->isWrite();
      if (v.isTensor()) {
        v = convert(v.toTensor(), write);
      } else if (v.isTensorList()) {
        auto list = v.toTensorList();
        for (size_t j = 0; j < list.size(); ++j) list.set(j, convert(list.get(j), write));
        v = list;
      } else if (v.isOptionalTensorList()) {
        auto list = v.toOptionalTensorList();
        for (size_t j = 0; j < list.size(); ++j) {
          c10::optional<at::Tensor> t = list.get(j);
          if (t) list.set(j, convert(*t, write));
        }
        v = list;
      } else if (v.isDevice()) {
        if (v.toDevice().type() == D::type) {
          if (!have_device) {
            call.device = v.toDevice().has_index() ? v.toDevice() : c10::Device(D::type, D::current());
            have_device = true;
          }
          v = c10::Device(at::kCPU);
        } else if (v.toDevice().is_cpu()) {
          call.to_host = true;
        }
      }
    }
    return call;
  }

  // After the CPU kernel ran: what it did to the aliases done to the arguments, and its results on the device
  // (save those whose bit is set in `host_results`: made on the host, they stay there).
  static void device_results(const c10::OperatorHandle& op, torch::jit::Stack* stack, const HostCall& call,
                             uint32_t host_results = 0) {
    for (const auto& a : call.args)
      if (a.cpu.unsafeGetTensorImpl()->storage().resizable()) sync_back(a.dev, a.cpu, a.data);
    if (call.to_host) return;
    map_results(stack, op.schema().returns().size(), [&](const at::Tensor& t, size_t r) {
      return host_results & (1u << r) ? t : to_device(t, call.args, call.device);
    });
  }

  // The kernels without which no tensor exists on the device (each part registers them on its key, where the
  // rehearsal's device counts their calls).
  static at::Tensor strided_view(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                                 c10::optional<int64_t> offset) {
    return at::native::as_strided_tensorimpl(self, size, stride, offset);
  }
};

// The device guard: one stream per device (the default), events that are always complete.
template <class D>
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return D::type; }
  c10::Device exchangeDevice(c10::Device d) const override { auto old = getDevice(); setDevice(d); return old; }
  c10::Device getDevice() const override { return {D::type, D::current()}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == D::type, D::name, ": not its device: ", d);
    if (d.index() >= 0) D::select(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (D::valid(d.index())) D::select(d.index());
  }
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const OPAUDIT_OVERRIDE_2_4 { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return D::count(); }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const OPAUDIT_OVERRIDE_2_4 {}
  void synchronizeDevice(const c10::DeviceIndex) const OPAUDIT_OVERRIDE_2_6 {}
  double elapsedTime(void*, void*, const c10::DeviceIndex) const OPAUDIT_OVERRIDE_2_4 { return 0.0; }
};

}  // namespace
}  // namespace opaudit_host
