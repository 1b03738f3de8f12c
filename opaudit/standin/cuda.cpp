// opaudit's stand-in for CUDA: a CUDA device for the CPU-only PyTorch build, which `opaudit trace` and
// `opaudit scan` run CUDA code on (built and loaded by opaudit/standin/__init__.py).
//
// Tensors on it are real CUDA tensors (DeviceType::CUDA, DispatchKey::CUDA: is_cuda, device.type ==
// 'cuda', the AutocastCUDA and AutogradCUDA keys) whose storage is host memory from the allocator
// below. What a CUDA build's libtorch_cuda registers and the CPU build lacks is registered here:
// - the allocator of DeviceType::CUDA (64-byte aligned host memory);
// - a DeviceGuardImpl for CUDA (one device, default streams only, no-op events: all synchronous);
// - the CUDA hooks (at::detail::getCUDAHooks: hasCUDA, device count, the accelerator): torch calls
//   them once, while `import torch` runs, so the library must be loaded before that (ctypes, with
//   RTLD_GLOBAL; opaudit/standin/__init__.py _preload) or torch keeps its "no CUDA" stub;
// - a timer for DDP's reducer on CUDA;
// - kernels on the CUDA key: the infrastructure (factories, views, resize_, copies, item, set_), and
//   one boxed fallback for every other op that runs the op's CPU kernel on CPU aliases of the device
//   memory (the scheme of tests/fixtures/plugins/testdev's enable_native). convolution and
//   convolution_backward get it directly: their composite kernels would pick CUDA backends (cuDNN,
//   else the unfold-based thnn kernels) where the CPU takes oneDNN.
// No cuDNN, no CUDA generator (RNG ops run on the CPU generator), no CUDA DispatchStubs (a composite
// that calls one with a CUDA device fails: copy_ is registered here for that reason).
#include <torch/extension.h>

#include "torch_compat.h"

#include "dtype_bridge.h"
#include "host_alias.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::CUDA;
c10::DeviceIndex device_count = 1;
thread_local c10::DeviceIndex cur_dev = 0;
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<int64_t> fallback_calls{0};

struct HostAllocator final : at::Allocator {
  static void deleter(void* ctx) {
    if (!ctx) return;
    auto* header = static_cast<int64_t*>(ctx) - 8;
    live_bytes -= header[0];
    std::free(header);
  }
  at::DataPtr allocate(size_t nbytes) OPAUDIT_ALLOCATE_CONST override {
    c10::Device dev(kDev, cur_dev);
    if (nbytes == 0) return {nullptr, nullptr, &deleter, dev};
    void* raw = nullptr;
    TORCH_CHECK(posix_memalign(&raw, 64, nbytes + 64) == 0, "cuda_stand_in: out of memory");
    static_cast<int64_t*>(raw)[0] = static_cast<int64_t>(nbytes);
    const int64_t now = live_bytes += static_cast<int64_t>(nbytes);
    int64_t peak = peak_bytes.load();
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {}
    void* data = static_cast<char*>(raw) + 64;
    return {data, data, &deleter, dev};
  }
  at::DeleterFnPtr raw_deleter() const override { return &deleter; }
#ifdef OPAUDIT_TORCH_2_3
  void copy_data(void* dst, const void* src, std::size_t n) const override { default_copy_data(dst, src, n); }
#endif
};
HostAllocator host_allocator;
const bool alloc_registered [[maybe_unused]] = [] {
  c10::SetAllocator(kDev, &host_allocator, 255);
  return true;
}();

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override { auto old = getDevice(); setDevice(d); return old; }
  c10::Device getDevice() const override { return {kDev, cur_dev}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDev, "cuda_stand_in: not a CUDA device: ", d);
    if (d.index() < 0) return;
    TORCH_CHECK(d.index() < device_count, "cuda_stand_in: invalid device ordinal ", int(d.index()));
    cur_dev = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count) cur_dev = d.index();
  }
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const OPAUDIT_OVERRIDE_2_4 { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const OPAUDIT_OVERRIDE_2_4 {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  double elapsedTime(void*, void*, const c10::DeviceIndex) const OPAUDIT_OVERRIDE_2_4 { return 0.0; }
};
C10_REGISTER_GUARD_IMPL(CUDA, Guard);

struct FakeCudaHooks final : at::CUDAHooksInterface {
  explicit FakeCudaHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasCUDART() const override { return false; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count; }
  int getNumGPUs() const override { return device_count; }
  c10::DeviceIndex current_device() const override { return cur_dev; }
  c10::DeviceIndex getCurrentDevice() const override { return cur_dev; }
  void setCurrentDevice(c10::DeviceIndex i) const override { cur_dev = i; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex i) const override {
    auto old = cur_dev; if (i >= 0) cur_dev = i; return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex i) const override { return exchangeDevice(i); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  at::Allocator* getCUDADeviceAllocator() const override { return &host_allocator; }
  at::Device getDeviceFromPtr(void*) const override { return {kDev, cur_dev}; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  // torch.Generator(device="cuda"): a host generator with CUDA's default seed (random ops run their CPU kernels,
  // which draw from one; its .device says cpu)
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::make_generator<at::CPUGeneratorImpl>();
  }
  void deviceSynchronize(c10::DeviceIndex) const override {}
};
}  // namespace
namespace at {
C10_REGISTER_CLASS(CUDAHooksRegistry, CUDAHooks, FakeCudaHooks);
}  // namespace at
namespace {

// DDP's reducer asks for a timer of its device type (libtorch_cuda registers CUDA's): host-timed here
struct HostTimer final : c10d::Timer {
  explicit HostTimer(c10::Device) {}
  c10::optional<int64_t> measureDifference(Event start, Event end) override {
    auto a = getTimestamp(start), b = getTimestamp(end);
    if (!a || !b || *b < *a) return c10::nullopt;
    return *b - *a;
  }
};
}  // namespace
namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kCUDA, HostTimer);
}  // namespace c10d
namespace {

at::Tensor as_cpu(const at::Tensor& t, bool resizable = false) { return opaudit_host::alias(t, kDev, resizable); }

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size, c10::optional<at::MemoryFormat> fmt) {
  c10::DeviceGuard g(self.device());
  return at::native::resize_(self, size, fmt);
}

void sync_back(const at::Tensor& dev, const at::Tensor& alias, const void* orig_data) {
  if (alias.storage().data() == orig_data) {
    if (alias.sizes() != dev.sizes() || alias.strides() != dev.strides() ||
        alias.storage_offset() != dev.storage_offset())
      dev.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    return;
  }
  resize_(dev, alias.sizes(), c10::nullopt);
  as_cpu(dev).copy_(alias);
}

at::Tensor empty_memory_format(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout>, c10::optional<at::Device> device,
                               c10::optional<bool>, c10::optional<at::MemoryFormat> fmt) {
  c10::DeviceGuard g(device.value_or(c10::Device(kDev)));
  return at::detail::empty_generic(size, &host_allocator, c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                   c10::dtype_or_default(dtype), fmt);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                         c10::optional<at::Layout>, c10::optional<at::Device> device, c10::optional<bool>) {
  c10::DeviceGuard g(device.value_or(c10::Device(kDev)));
  return at::detail::empty_strided_generic(size, stride, &host_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::CUDA), c10::dtype_or_default(dtype));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  as_cpu(dst).copy_(as_cpu(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  as_cpu(self).copy_(as_cpu(src), non_blocking);
  return self;
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return at::native::_local_scalar_dense_cpu(as_cpu(self)); }

at::Tensor& set_storage_(at::Tensor& self, at::Storage src, int64_t offset, at::IntArrayRef size,
                         at::IntArrayRef stride) {
  c10::DeviceGuard g(self.device());
  return at::native::set_storage_cpu_(self, std::move(src), offset, size, stride);
}

struct Arg { at::Tensor dev, cpu; const void* data; };

// A fresh CPU result that nothing else holds: its memory becomes the device tensor's (no copy). The
// buffer keeps the CPU allocator's deleter, wrapped so that the device's byte count sees it.
struct Adopted {
  void* ctx;
  c10::DeleterFnPtr deleter;
  int64_t nbytes;
  static void free(void* p) {
    auto* a = static_cast<Adopted*>(p);
    live_bytes -= a->nbytes;
    if (a->deleter) a->deleter(a->ctx);
    delete a;
  }
};

at::Tensor adopt(const at::Tensor& t, c10::Device device) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  const int64_t nbytes = static_cast<int64_t>(impl->nbytes());
  at::DataPtr cpu = impl->set_data_ptr(at::DataPtr(nullptr, c10::Device(at::kCPU)));
  void* data = cpu.get();
  auto* owner = new Adopted{cpu.release_context(), cpu.get_deleter(), nbytes};
  const int64_t now = live_bytes += nbytes;
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {}
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, at::DataPtr(data, owner, &Adopted::free, device),
                       &host_allocator, /*resizable=*/true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                                      t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

at::Tensor to_device(const at::Tensor& t, const std::vector<Arg>& args, c10::Device device) {
  if (!t.defined() || !t.is_cpu()) return t;
  for (const auto& a : args)
    if (t.unsafeGetTensorImpl() == a.cpu.unsafeGetTensorImpl()) return a.dev;
  for (const auto& a : args)
    if (t.storage().is_alias_of(a.cpu.storage()) && t.storage().data() == a.data && t.dtype() == a.dev.dtype())
      return at::native::as_strided_tensorimpl(a.dev, t.sizes(), t.strides(), t.storage_offset());
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (t.storage().use_count() == 1 && impl->data_ptr().device().is_cpu() && impl->data_ptr().get() != nullptr)
    return adopt(t, device);
  c10::DeviceGuard g(device);
  auto out = t.is_non_overlapping_and_dense()
      ? empty_strided(t.sizes(), t.strides(), t.scalar_type(), c10::nullopt, device, c10::nullopt)
      : empty_memory_format(t.sizes(), t.scalar_type(), c10::nullopt, device, c10::nullopt, c10::nullopt);
  as_cpu(out).copy_(t);
  return out;
}

void boxed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  ++fallback_calls;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size(), base = stack->size() - nargs;
  std::vector<Arg> args;
  c10::Device device(kDev, cur_dev);
  bool have_device = false;
  auto convert = [&](const at::Tensor& t, bool write) -> at::Tensor {
    if (!t.defined() || t.device().type() != kDev) return t;
    if (!have_device) { device = t.device(); have_device = true; }
    auto c = as_cpu(t, write);
    args.push_back({t, c, c.storage().data()});
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
    } else if (v.isDevice() && v.toDevice().type() == kDev) {
      if (!have_device) { device = v.toDevice(); have_device = true; }
      v = c10::Device(at::kCPU);
    }
  }
  opaudit_bridge::run_cpu(op, stack, c10::DispatchKeySet(c10::DispatchKey::CPU));
  for (const auto& a : args)
    if (a.cpu.unsafeGetTensorImpl()->storage().resizable()) sync_back(a.dev, a.cpu, a.data);
  opaudit_host::map_results(stack, schema.returns().size(),
                            [&](const at::Tensor& t, size_t) { return to_device(t, args, device); });
}

TORCH_LIBRARY_IMPL(_, CUDA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed>()); }

TORCH_LIBRARY_IMPL(aten, CUDA, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", resize_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("copy_", copy_);
  m.impl("set_.source_Storage", static_cast<at::Tensor& (*)(at::Tensor&, at::Storage)>(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", set_storage_);
  // composites that pick a backend per device (cuDNN, thnn) run as their CPU selves
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&boxed>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&boxed>());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fallback_calls", [] { return fallback_calls.load(); }, "Ops run by the boxed CPU kernel.");
  m.def("set_kernel_ops", &opaudit_bridge::set_kernel_ops,
        "The ops whose CPU kernel refuses a CUDA call in words of its own (cuda_dtypes.toml [[kernel]]).");
  m.def("set_wide_ops", &opaudit_bridge::set_wide_ops,
        "The ops whose float16 calls run in float32, rounded back (cuda_dtypes.toml [[wide]]).");
  m.def("bridged", &opaudit_bridge::bridged_counts,
        "(op, dtype, calls) of the calls whose dtype the CPU kernel refused, run wide and cast back (dtype_bridge.h).");
  m.def("memory_allocated", [] { return live_bytes.load(); });
  m.def("max_memory_allocated", [] { return peak_bytes.load(); });
  m.def("reset_peak", [] { peak_bytes = live_bytes.load(); });
  m.def("device_bytes", [](int64_t nbytes) {
    return at::Tensor(at::detail::empty_generic({nbytes}, &host_allocator, c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                                at::kByte, c10::nullopt));
  }, "A uint8 tensor of nbytes on the current device, made without the dispatcher (no op to record), whose "
     "storage stands for torch.UntypedStorage(nbytes, device='cuda'), which the CPU build cannot make.");
  m.def("current_device", [] { return int(cur_dev); });
  m.def("set_device", [](int i) { TORCH_CHECK(i >= 0 && i < device_count); cur_dev = i; });
  m.def("device_count", [] { return int(device_count); });
  m.def("hooks_installed", [] { return at::detail::getCUDAHooks().hasCUDA(); },
        "Whether torch took this library's CUDA hooks (it was loaded before `import torch`).");
}
