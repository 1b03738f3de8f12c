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
//   else the unfold-based thnn kernels) where the CPU takes oneDNN;
// - sparse COO tensors on SparseCUDA, run the same way by SparseCPU's kernels (host_sparse.h, shared with the
//   rehearsal's device).
// No cuDNN, no CUDA generator (RNG ops run on the CPU generator), no CUDA DispatchStubs (a composite
// that calls one with a CUDA device fails: copy_ is registered here for that reason).
#include "torch_compat.h"

#include "dtype_bridge.h"
#include "host_device.h"
#include "host_sparse.h"

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

void count_bytes(int64_t n) {
  const int64_t now = live_bytes += n;
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {}
}

struct Cuda {
  static constexpr c10::DeviceType type = kDev;
  static constexpr c10::DispatchKey key = c10::DispatchKey::CUDA;
  static constexpr c10::DispatchKey sparse_key = c10::DispatchKey::SparseCUDA;
  static constexpr const char* name = "cuda_stand_in";
  static at::Allocator* allocator();
  static c10::DeviceIndex current() { return cur_dev; }
  static bool valid(c10::DeviceIndex i) { return i >= 0 && i < device_count; }
  static void select(c10::DeviceIndex i) {
    TORCH_CHECK(valid(i), "cuda_stand_in: invalid device ordinal ", int(i));
    cur_dev = i;
  }
  static c10::DeviceIndex count() { return device_count; }
  static void allocated(c10::DeviceIndex, int64_t n) { count_bytes(n); }
  static void freed(c10::DeviceIndex, int64_t n) { live_bytes -= n; }
};
opaudit_host::HostAllocator<Cuda> host_allocator;
at::Allocator* Cuda::allocator() { return &host_allocator; }
const bool alloc_registered [[maybe_unused]] = [] {
  c10::SetAllocator(kDev, &host_allocator, 255);
  return true;
}();

using Host = opaudit_host::HostDevice<Cuda>;
using Guard = opaudit_host::Guard<Cuda>;
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

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  Host::as_cpu(self).copy_(Host::as_cpu(src), non_blocking);
  return self;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(Host::as_cpu(self));
}

using Sparse = opaudit_host::HostSparse<Cuda>;

void boxed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  ++fallback_calls;
  if (Sparse::wanted(op.schema(), *stack)) {  // a sparse CUDA tensor (host_sparse.h)
    Sparse::run(op, stack);
    return;
  }
  auto call = Host::host_arguments(op, stack);
  opaudit_bridge::run_cpu(op, stack, c10::DispatchKeySet(c10::DispatchKey::CPU));
  Sparse::results(op.schema(), stack, call);  // (a dense op's sparse result: embedding's sparse gradient)
  Host::device_results(op, stack, call);
}

TORCH_LIBRARY_IMPL(_, CUDA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed>()); }

// Sparse COO tensors on CUDA (SparseCUDA, which only a CUDA build registers): every op reaches the boxed fallback;
// the ops that make a sparse tensor, give its parts or change them in place run SparseCPU's kernel on the CUDA
// tensor itself (those kernels work on any device's SparseTensorImpl).
void sparse_structural(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseCPU), stack);
}

TORCH_LIBRARY_IMPL(_, SparseCUDA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed>()); }

TORCH_LIBRARY_IMPL(aten, SparseCUDA, m) {
  for (const char* name : opaudit_host::kSparseStructural)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&sparse_structural>());
}

TORCH_LIBRARY_IMPL(aten, CUDA, m) {
  m.impl("empty.memory_format", Host::empty_memory_format);
  m.impl("empty_strided", Host::empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", Host::resize);
  m.impl("_copy_from", Host::copy_from);
  m.impl("_copy_from_and_resize", Host::copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("copy_", copy_);
  m.impl("set_.source_Storage", static_cast<at::Tensor& (*)(at::Tensor&, at::Storage)>(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", Host::set_storage);
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
