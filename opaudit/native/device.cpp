// The rehearsal's device in C++ (opaudit/rehearsal/native.py builds and loads it): a PrivateUse1 device
// whose tensors are real device tensors over host memory, and whose ops the target runs natively cost no
// Python on their way.
//
// What a vendor plugin registers for its device is registered here: an allocator (64-byte aligned host
// memory, counted per device index), a device guard (up to 16 devices, default streams, no-op events:
// all synchronous) and the PrivateUse1 hooks. Kernels:
// - allocation, views, resize_, set_ and the copies a backend provides (_copy_from, ...): C++ kernels,
//   each call counted by op;
// - every other op reaches `dispatch`: the fallback of the PrivateUse1 key, and the kernel registered on
//   it for each op whose CompositeExplicitAutograd kernel would otherwise run on the device (so the ops
//   the rehearsal judges are those the Python key sees, the ops a backend receives: see the tests).
//   Its first call of an op asks the rehearsal's planner (Python) how the target runs it. The answer is
//   kept: NATIVE runs the op's CPU kernel over CPU aliases of the device memory and counts the call;
//   PYTHON hands each call to the rehearsal's handler (fallbacks, CPU round trips, detours, errors).
//   A NATIVE call that mixes a host tensor of at least one dimension with device tensors goes to the
//   handler too, which raises the device's error on the user's line.
// Sparse COO tensors of the device (SparsePrivateUse1) take the same way (host_sparse.h), and an op of any namespace
// without an autograd kernel reaches it through the autograd key as on the CPU.
// set_policy() forgets the plans (a new rehearsal, another target).
#include "torch_compat.h"

#include "dtype_bridge.h"
#include "host_device.h"
#include "host_sparse.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;
using opaudit_host::kMaxDevices;
std::atomic<int> device_count{1};
thread_local c10::DeviceIndex cur_dev = 0;
// the memory counters of one device index, in bytes, as a caching allocator's (opaudit/rehearsal/memory.py's
// model: freed blocks stay reserved until empty_cache; CUDA's memory_stats names in the Python module)
struct Counts {
  int64_t allocated = 0, peak = 0, reserved = 0, peak_reserved = 0, allocations = 0, allocated_total = 0,
          freed_total = 0;
  void add(int64_t n) {
    allocated += n;
    allocated_total += n;
    ++allocations;
    if (allocated > peak) peak = allocated;
    if (allocated > reserved) {
      reserved = allocated;
      if (reserved > peak_reserved) peak_reserved = reserved;
    }
  }
  void take(int64_t n) {
    allocated -= n;
    freed_total += n;
    --allocations;
  }
};
std::mutex memory_mutex;
Counts memory[kMaxDevices];

void check_index(int i) {
  TORCH_CHECK(i >= 0 && i < device_count.load(), "invalid device ordinal ", i, " (", device_count.load(),
              " device(s))");
}

// ------------------------------------------------------------ the device (host_device.h)
struct Rehearsal {
  static constexpr c10::DeviceType type = kDev;
  static constexpr c10::DispatchKey key = c10::DispatchKey::PrivateUse1;
  static constexpr c10::DispatchKey sparse_key = c10::DispatchKey::SparsePrivateUse1;
  static constexpr const char* name = "the simulated device";
  static at::Allocator* allocator();
  static c10::DeviceIndex current() { return cur_dev; }
  static bool valid(c10::DeviceIndex i) { return i >= 0 && i < device_count.load(); }
  static void select(c10::DeviceIndex i) { check_index(i); cur_dev = i; }
  static c10::DeviceIndex count() { return static_cast<c10::DeviceIndex>(device_count.load()); }
  static void allocated(c10::DeviceIndex i, int64_t n) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    memory[i].add(n);
  }
  static void freed(c10::DeviceIndex i, int64_t n) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    memory[i].take(n);
  }
};
// ---------------------------------------------------------------- allocator
opaudit_host::HostAllocator<Rehearsal> host_allocator;
at::Allocator* Rehearsal::allocator() { return &host_allocator; }
const bool alloc_registered [[maybe_unused]] = [] {
  c10::SetAllocator(kDev, &host_allocator, 255);
  return true;
}();

using Host = opaudit_host::HostDevice<Rehearsal>;
using Guard = opaudit_host::Guard<Rehearsal>;
C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

// (the interface grew from torch 2.1 to 2.7: `override` only where the torch built against has the function,
// torch_compat.h; getDefaultGenerator was not const before 2.5: both are given)
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const OPAUDIT_OVERRIDE_2_7 { return true; }
  bool isAvailable() const OPAUDIT_OVERRIDE_2_7 { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const OPAUDIT_OVERRIDE_2_4 { return true; }
  void init() const OPAUDIT_OVERRIDE_2_6 {}
  c10::DeviceIndex deviceCount() const OPAUDIT_OVERRIDE_2_4 { return device_count.load(); }
  void setCurrentDevice(c10::DeviceIndex i) const OPAUDIT_OVERRIDE_2_4 { check_index(i); cur_dev = i; }
  c10::DeviceIndex getCurrentDevice() const OPAUDIT_OVERRIDE_2_4 { return cur_dev; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex i) const OPAUDIT_OVERRIDE_2_4 {
    auto old = cur_dev;
    if (i >= 0) setCurrentDevice(i);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex i) const OPAUDIT_OVERRIDE_2_4 { return exchangeDevice(i); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const OPAUDIT_OVERRIDE_2_5 {
    return at::detail::getDefaultCPUGenerator();  // random ops run on the host's generator, as their kernels do
  }
#ifndef OPAUDIT_TORCH_2_5
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) override { return at::detail::getDefaultCPUGenerator(); }
#endif
  at::Device getDeviceFromPtr(void*) const override { return {kDev, cur_dev}; }
  bool isPinnedPtr(const void*) const OPAUDIT_OVERRIDE_2_5 { return false; }
  at::Allocator* getPinnedMemoryAllocator() const OPAUDIT_OVERRIDE_2_4 { return c10::GetCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& s, size_t n) const OPAUDIT_OVERRIDE_2_4 {
    c10::DeviceGuard g(s.device());
    at::native::resize_bytes_cpu(s.unsafeGetStorageImpl(), n);
  }
};
const bool hooks_registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());  // leaked on purpose
  return true;
}();

// ------------------------------------------------------------------- plans
enum Kind : int { UNPLANNED = 0, NATIVE = 1, PYTHON = 2 };

struct Plan {
  int kind = UNPLANNED;
  bool check = true;            // a host tensor beside device tensors is the device's error
  uint32_t host_results = 0;    // results the device's kernel makes on the host (bit per result)
  bool composite = false;       // has a CompositeExplicitAutograd(NonFunctional) kernel
  c10::DispatchKey composite_key = c10::DispatchKey::Undefined;
  std::atomic<int64_t> calls{0};
  PyObject* op = nullptr;       // the OpOverload (a borrowed reference of torch's own cache)
};

std::mutex plans_mutex;
std::unordered_map<const void*, Plan*> plans;  // by OperatorDef (the OperatorHandle's identity)
PyObject* planner = nullptr;   // planner(op) -> (kind, check, host_results)
PyObject* handler = nullptr;   // handler(op, args, kwargs) -> result
std::atomic<int64_t> infra_calls[8];
const char* infra_names[8] = {"empty.memory_format", "empty_strided", "as_strided", "view", "_reshape_alias",
                              "resize_", "set_.source_Storage", "set_.source_Storage_storage_offset"};
std::atomic<bool> counting{false};  // infra kernels count only while a rehearsal runs

const void* identity(const c10::OperatorHandle& op) { return &op.schema(); }

// The op's entry (its composite kernel, if any), planned or not.
Plan* entry_of(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  auto& slot = plans[identity(op)];
  if (slot == nullptr) {
    slot = new Plan();  // never freed while the process runs: a call may be holding it
    if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      slot->composite = true;
      slot->composite_key = c10::DispatchKey::CompositeExplicitAutogradNonFunctional;
    } else if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
      slot->composite = true;
      slot->composite_key = c10::DispatchKey::CompositeExplicitAutograd;
    }
  }
  return slot;
}

// Ask the planner how the target runs the op (once per op and rehearsal).
void plan(const c10::OperatorHandle& op, Plan* p) {
  py::gil_scoped_acquire gil;
  if (p->kind != UNPLANNED) return;
  py::handle py_op = opaudit_compat::api_function(op);
  p->op = py_op.ptr();
  if (planner == nullptr) {  // no rehearsal running: every op runs as on the host
    p->check = false;
    p->host_results = 0;
    p->kind = NATIVE;
    return;
  }
  py::tuple answer = py::reinterpret_borrow<py::object>(planner)(py_op);
  p->check = answer[1].cast<bool>();
  p->host_results = answer[2].cast<uint32_t>();
  p->kind = answer[0].cast<int>();
}

// ---------------------------------------------------------------- NATIVE
bool is_host_tensor(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const auto& t = v.toTensor();
  return t.defined() && t.is_cpu() && t.dim() > 0;
}

bool is_device_tensor(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const auto& t = v.toTensor();
  return t.defined() && t.device().type() == kDev;
}

// (a device tensor among the arguments, a host tensor of >= 1 dimension among them)
std::pair<bool, bool> placement(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t base) {
  bool device = false, host = false;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& v = stack[base + i];
    if (v.isTensor()) {
      device |= is_device_tensor(v);
      host |= is_host_tensor(v);
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) {
        const at::Tensor& x = t;
        device |= x.defined() && x.device().type() == kDev;
        host |= x.defined() && x.is_cpu() && x.dim() > 0;
      }
    } else if (v.isOptionalTensorList()) {
      for (const auto& t : v.toOptionalTensorList()) {
        c10::optional<at::Tensor> x = t;
        device |= x && x->defined() && x->device().type() == kDev;
        host |= x && x->defined() && x->is_cpu() && x->dim() > 0;
      }
    }
  }
  return {device, host};
}

// ---------------------------------------------------------------- sparse COO
// Sparse COO tensors of the device (SparsePrivateUse1): host_sparse.h, shared with the CUDA stand-in.
using Sparse = opaudit_host::HostSparse<Rehearsal>;

void run_native(const c10::OperatorHandle& op, const Plan& plan, torch::jit::Stack* stack) {
  if (Sparse::wanted(op.schema(), *stack)) {
    Sparse::run(op, stack);
    return;
  }
  auto call = Host::host_arguments(op, stack);
  if (op.operator_name().name == "aten::convolution_overrideable") {
    static auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    conv.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  } else {
    opaudit_bridge::run_cpu(op, stack, c10::DispatchKeySet(c10::DispatchKey::CPU));
  }
  Sparse::results(op.schema(), stack, call, {}, plan.host_results);  // (a dense op's sparse result: a sparse grad)
  Host::device_results(op, stack, call, plan.host_results);
}

// ---------------------------------------------------------------- PYTHON
// An argument as the Python kernel receives it: a dtype, layout or memory format as torch's object (the stack
// holds them as ints), everything else as torch's Python binding converts it.
py::object to_python(const c10::Argument& a, const c10::IValue& v) {
  if (v.isInt()) {
    const c10::Type* type = a.real_type().get();
    if (type->kind() == c10::OptionalType::Kind) type = type->castRaw<c10::OptionalType>()->getElementType().get();
    switch (type->kind()) {
      case c10::ScalarTypeType::Kind:
        return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(v.toScalarType())));
      case c10::LayoutType::Kind:
        return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPLayout(v.toLayout())));
      case c10::MemoryFormatType::Kind:
        return py::reinterpret_borrow<py::object>(torch::utils::getTHPMemoryFormat(v.toMemoryFormat()));
      default:
        break;
    }
  }
  return torch::jit::toPyObject(v);
}

void run_python(const c10::OperatorHandle& op, const Plan& plan, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  py::gil_scoped_acquire gil;
  py::list positional;
  py::dict keywords;
  auto args = torch::jit::last(*stack, nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const auto& a = schema.arguments()[i];
    py::object value = to_python(a, args[i]);
    if (a.kwarg_only()) keywords[py::str(a.name())] = value;
    else positional.append(value);
  }
  torch::jit::drop(*stack, nargs);
  py::object out = py::reinterpret_borrow<py::object>(handler)(py::handle(plan.op), py::tuple(positional), keywords);
  const auto& returns = schema.returns();
  if (returns.empty()) return;
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].real_type()));
    return;
  }
  py::tuple results = py::cast<py::tuple>(out);
  TORCH_CHECK(results.size() == returns.size(), op.operator_name().name, ": the rehearsal returned ",
              results.size(), " results for ", returns.size());
  for (size_t i = 0; i < returns.size(); ++i)
    stack->push_back(torch::jit::toIValue(results[i], returns[i].real_type()));
}

// run(op, host_results, args, kwargs): the rehearsal's handler runs an op natively (the op's CPU kernel over the
// device memory, results on the device save those in `host_results`), from Python.
py::object run_from_python(py::object op, uint32_t host_results, py::tuple args, py::dict kwargs) {
  py::object schema = op.attr("_schema");
  auto name = schema.attr("name").cast<std::string>();
  auto overload = schema.attr("overload_name").cast<std::string>();
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  const auto& fs = handle.schema();
  torch::jit::Stack stack;
  const auto& params = fs.arguments();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& a = params[i];
    if (i < args.size() && !a.kwarg_only()) {
      stack.push_back(torch::jit::toIValue(args[i], a.real_type()));
    } else if (kwargs.contains(a.name().c_str())) {
      stack.push_back(torch::jit::toIValue(kwargs[a.name().c_str()], a.real_type()));
    } else {
      TORCH_CHECK(a.default_value().has_value(), name, ": missing argument ", a.name());
      stack.push_back(*a.default_value());
    }
  }
  Plan plan;
  plan.host_results = host_results;
  {
    py::gil_scoped_release nogil;
    run_native(handle, plan, &stack);
  }
  const size_t nrets = fs.returns().size();
  if (nrets == 0) return py::none();
  if (nrets == 1) return torch::jit::toPyObject(std::move(stack.back()));
  py::tuple out(nrets);
  for (size_t i = 0; i < nrets; ++i) out[i] = torch::jit::toPyObject(std::move(stack[stack.size() - nrets + i]));
  return out;
}

bool is_to_copy(const c10::OperatorHandle& op) {
  static const c10::OperatorName name("aten::_to_copy", "");
  return op.operator_name() == name;
}

// The dtypes the target cannot hold (MPS: float64, complex128), a bit per ScalarType (set_held_dtypes): a call
// that touches one, by a tensor or a dtype argument, goes to the rehearsal's handler, which judges it as the
// audit does (a strict rehearsal fails there, naming the op, the dtype and the line).
std::atomic<uint64_t> unheld{0};

bool touches_unheld(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t base) {
  const uint64_t mask = unheld.load(std::memory_order_relaxed);
  // a 0-dim host tensor (a Python number: float64) goes beside device tensors into any op, as on every device
  auto hit = [mask](const at::Tensor& t) {
    return t.defined() && !(t.is_cpu() && t.dim() == 0) && ((mask >> static_cast<int>(t.scalar_type())) & 1u);
  };
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& v = stack[base + i];
    if (v.isTensor()) {
      if (hit(v.toTensor())) return true;
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) if (hit(t)) return true;
    } else if (v.isInt() && opaudit_bridge::is_dtype_argument(schema.arguments()[i])) {
      if ((mask >> v.toInt()) & 1u) return true;
    }
  }
  return false;
}

void set_held_dtypes(const py::list& not_held) {  // torch.dtype objects
  uint64_t mask = 0;
  for (const auto& d : not_held) {
    TORCH_CHECK(THPDtype_Check(d.ptr()), "set_held_dtypes takes torch.dtype objects");
    mask |= uint64_t{1} << static_cast<int>(reinterpret_cast<THPDtype*>(d.ptr())->scalar_type);
  }
  unheld = mask;
}

void dispatch(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Plan* plan = entry_of(op);
  const auto& schema = op.schema();
  const size_t base = stack->size() - schema.arguments().size();
  auto [device, host] = placement(schema, *stack, base);
  if (!device && plan->composite && !is_to_copy(op)) {
    // a factory that reaches the device by its device argument: its composite kernel makes it of the ops
    // the device runs (empty, then the op's out= or in-place form on the new device tensor); a copy from the
    // host (_to_copy of a host tensor to the device) reaches it whole, as a device's own _to_copy kernel
    c10::Dispatcher::singleton().callBoxedForDispatchKey(op, plan->composite_key, stack);
    return;
  }
  if (plan->kind == UNPLANNED) ::plan(op, plan);
  if (plan->kind == NATIVE && !(plan->check && device && host) &&
      !(unheld.load(std::memory_order_relaxed) && touches_unheld(schema, *stack, base))) {
    ++plan->calls;
    run_native(op, *plan, stack);
    return;
  }
  run_python(op, *plan, stack);
}

// ------------------------------------------------------- counted infrastructure
at::Tensor view_(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }
at::Tensor reshape_alias_(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}
// set_(storage) whole, as a device's kernel (CUDA's set_) receives it: PyTorch's own calls set_ with an offset through
// the dispatcher, which would count that overload too, where a trace of the same code has only this one
at::Tensor& set_source_storage(at::Tensor& self, at::Storage src) {
  const auto n = static_cast<int64_t>(src.nbytes() / self.dtype().itemsize());
  return Host::set_storage(self, std::move(src), 0, {n}, {});
}

#define WRAP(I, NAME, FN, RET, PARAMS, ARGS) \
  RET NAME##_counted PARAMS { if (counting.load(std::memory_order_relaxed)) ++infra_calls[I]; return FN ARGS; }

WRAP(0, empty_memory_format, Host::empty_memory_format, at::Tensor,
     (at::IntArrayRef s, c10::optional<at::ScalarType> d, c10::optional<at::Layout> l, c10::optional<at::Device> v,
      c10::optional<bool> p, c10::optional<at::MemoryFormat> f), (s, d, l, v, p, f))
WRAP(1, empty_strided, Host::empty_strided, at::Tensor,
     (at::IntArrayRef s, at::IntArrayRef st, c10::optional<at::ScalarType> d, c10::optional<at::Layout> l,
      c10::optional<at::Device> v, c10::optional<bool> p), (s, st, d, l, v, p))
WRAP(2, strided_view, Host::strided_view, at::Tensor,
     (const at::Tensor& t, c10::IntArrayRef s, c10::IntArrayRef st, c10::optional<int64_t> o), (t, s, st, o))
WRAP(3, view_, view_, at::Tensor, (const at::Tensor& t, c10::IntArrayRef s), (t, s))
WRAP(4, reshape_alias_, reshape_alias_, at::Tensor, (const at::Tensor& t, c10::IntArrayRef s, c10::IntArrayRef st),
     (t, s, st))
WRAP(5, device_resize, Host::resize, const at::Tensor&,
     (const at::Tensor& t, at::IntArrayRef s, c10::optional<at::MemoryFormat> f), (t, s, f))
WRAP(6, set_source_storage, set_source_storage, at::Tensor&, (at::Tensor& t, at::Storage s), (t, std::move(s)))
WRAP(7, set_storage, Host::set_storage, at::Tensor&,
     (at::Tensor& t, at::Storage s, int64_t o, at::IntArrayRef sz, at::IntArrayRef st), (t, std::move(s), o, sz, st))

// A tensor of the device and a CPU tensor (both strided) may take each other's data (`param.data = ...`, which
// Module.to() does to keep each Parameter): c10 knows this of CUDA and the other built-in devices, and leaves it to
// a PrivateUse1 backend to say (TensorImpl::has_compatible_shallow_copy_type). Without it Module.to() swaps each
// Parameter for a new one, which fails where a parametrization or weight_norm holds the old one.
bool compatible_shallow_copy(const at::Tensor& self, const at::Tensor& from) {
  auto ours = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !t.is_quantized() && (t.is_cpu() || t.device().type() == kDev);
  };
  return (ours(self) && ours(from)) || self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy);
  m.impl("empty.memory_format", empty_memory_format_counted);
  m.impl("empty_strided", empty_strided_counted);
  m.impl("as_strided", strided_view_counted);
  m.impl("view", view__counted);
  m.impl("_reshape_alias", reshape_alias__counted);
  m.impl("resize_", device_resize_counted);
  m.impl("set_.source_Storage", set_source_storage_counted);
  m.impl("set_.source_Storage_storage_offset", set_storage_counted);
  m.impl("_copy_from", Host::copy_from);
  m.impl("_copy_from_and_resize", Host::copy_from_and_resize);
}

// (and on its autograd key: before torch 2.6 a backend's own kernel for a CompositeImplicitAutograd op leaves that
// key without one, and Module.to() failed there with "Could not run ... from the 'Autogradnpu' backend")
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dispatch>());
}

// Sparse COO tensors of the device (host_sparse.h): every op of the sparse key reaches `dispatch`, planned and
// counted as a dense op is; the ops that make a sparse tensor, give its parts or change them in place run SparseCPU's
// kernel on the device tensor itself (those kernels work on any device's SparseTensorImpl: `_values()` is the
// device's values, not a copy), planned and counted the same way.
void sparse_structural(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Plan* plan = entry_of(op);
  if (plan->kind == UNPLANNED) ::plan(op, plan);
  if (plan->kind == NATIVE) {
    ++plan->calls;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseCPU), stack);
    return;
  }
  run_python(op, *plan, stack);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dispatch>());
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  for (const char* name : opaudit_host::kSparseStructural)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&sparse_structural>());
}

// Ops of any namespace that have no autograd kernel (torchvision::nms, a library's custom op) reach the device's
// kernels through its autograd key as through the CPU's: with PyTorch's own autograd fallback for custom ops, which
// PyTorch registers for AutogradPrivateUse1 itself only from 2.6 or so (where it has none, it is registered here).
torch::Library* autograd_fallback = nullptr;  // leaked at exit on purpose (static destruction order)
const bool autograd_fallback_registered [[maybe_unused]] = [] {
  if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(c10::DispatchKey::AutogradPrivateUse1)) {
    autograd_fallback = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::AutogradPrivateUse1,
                                           __FILE__, __LINE__);
    autograd_fallback->fallback(torch::autograd::basicAutogradNotImplementedFallback());
  }
  return true;
}();

// autocast on the device: the AutocastPrivateUse1 key falls through to the kernels below it (the rehearsal applies
// the target's autocast policy itself); registered here, as torch.library's Library.fallback is torch >= 2.5
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

torch::Library* composites = nullptr;  // leaked at exit on purpose (static destruction order)

// Register `dispatch` on PrivateUse1 for each aten op whose CompositeExplicitAutograd kernel would otherwise
// run there (and that has no kernel of its own there, nor a CompositeImplicitAutograd one); returns how many.
int64_t intercept_composites() {
  if (composites != nullptr) return 0;
  composites = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  int64_t n = 0;
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    composites->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&dispatch>());
    ++n;
  }
  return n;
}

void set_policy(py::object plan_fn, py::object handle_fn) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  for (auto& [k, p] : plans) {  // (the entries stay: a call may be holding one)
    p->kind = UNPLANNED;
    p->calls = 0;
  }
  Py_XDECREF(planner);
  Py_XDECREF(handler);
  planner = plan_fn.is_none() ? nullptr : plan_fn.inc_ref().ptr();
  handler = handle_fn.is_none() ? nullptr : handle_fn.inc_ref().ptr();
  for (auto& c : infra_calls) c = 0;
  counting = planner != nullptr;
}

// (OpOverload, calls) of each op run natively (NATIVE plans) and of the infrastructure kernels (by name), since
// the last call; the counters start again from 0
py::list take_counts() {
  py::list out;
  std::lock_guard<std::mutex> lock(plans_mutex);
  for (const auto& [k, p] : plans) {
    const int64_t n = p->kind == NATIVE ? p->calls.exchange(0) : 0;
    if (n > 0) out.append(py::make_tuple(py::handle(p->op), n));
  }
  for (int i = 0; i < 8; ++i) {
    const int64_t n = infra_calls[i].exchange(0);
    if (n > 0) out.append(py::make_tuple(infra_names[i], n));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "opaudit's rehearsal device (opaudit/rehearsal/native.py)";
  m.def("intercept_composites", &intercept_composites);
  m.def("set_kernel_ops", &opaudit_bridge::set_kernel_ops,
        "The ops whose CPU kernel refuses a CUDA call in words of its own (cuda_dtypes.toml [[kernel]]).");
  m.def("set_wide_ops", &opaudit_bridge::set_wide_ops,
        "The ops whose float16 calls run in float32, rounded back (cuda_dtypes.toml [[wide]]).");
  m.def("bridged", &opaudit_bridge::bridged_counts,
        "(op, dtype, calls) of the calls whose dtype the CPU kernel refused, run wide and cast back (dtype_bridge.h).");
  m.def("set_policy", &set_policy, py::arg("planner"), py::arg("handler"));
  m.def("set_held_dtypes", &set_held_dtypes, py::arg("not_held"),
        "The dtypes (torch.dtype) the target cannot hold: calls with them go to the handler.");
  m.def("take_counts", &take_counts);
  m.def("run", &run_from_python, py::arg("op"), py::arg("host_results"), py::arg("args"), py::arg("kwargs"));
  m.def("host_alias", [](const at::Tensor& t) {
    std::vector<opaudit_host::Arg> parts;
    return Sparse::is_device_sparse(t) ? Sparse::host(t, parts) : Host::as_cpu(t);
  }, "A CPU tensor over a device tensor's memory (same sizes, strides and offset; a sparse one over its parts').");
  m.def("to_device", [](const at::Tensor& t, int index) {
    check_index(index);
    const c10::Device device(kDev, static_cast<c10::DeviceIndex>(index));
    return t.layout() == at::kSparse && t.is_cpu() ? Sparse::device(t, {}, device) : Host::to_device(t, {}, device);
  }, "A copy of a CPU tensor on device `index` (a device tensor as it is).");
  m.def("memory", [](int i) {
    TORCH_CHECK(i >= 0 && i < kMaxDevices, "invalid device ordinal ", i);
    std::lock_guard<std::mutex> lock(memory_mutex);
    const Counts& c = memory[i];
    return std::vector<int64_t>{c.allocated, c.peak, c.reserved, c.peak_reserved, c.allocations,
                                c.allocated_total, c.freed_total};
  }, "allocated, peak, reserved, peak_reserved, allocations, allocated_total, freed_total of device i");
  m.def("reset_peak", [](int i) {
    TORCH_CHECK(i >= 0 && i < kMaxDevices, "invalid device ordinal ", i);
    std::lock_guard<std::mutex> lock(memory_mutex);
    memory[i].peak = memory[i].allocated;
    memory[i].peak_reserved = memory[i].reserved;
  });
  m.def("empty_cache", [] {
    std::lock_guard<std::mutex> lock(memory_mutex);
    for (auto& c : memory) c.reserved = c.allocated;
  });
  // the device's autocast state, for its module (rehearsal/device.py SimDevice: torch.autocast of torch < 2.4 asks it)
  m.def("autocast_enabled", &opaudit_compat::privateuse1_autocast_enabled);
  m.def("set_autocast_enabled", &opaudit_compat::set_privateuse1_autocast_enabled, py::arg("enabled"));
  m.def("autocast_dtype", [] { return py::handle(reinterpret_cast<PyObject*>(
                                  torch::getTHPDtype(opaudit_compat::privateuse1_autocast_dtype()))); });
  m.def("set_autocast_dtype", [](py::object dtype) {
    TORCH_CHECK(THPDtype_Check(dtype.ptr()), "set_autocast_dtype takes a torch.dtype");
    opaudit_compat::set_privateuse1_autocast_dtype(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
  }, py::arg("dtype"));
  m.def("current_device", [] { return int(cur_dev); });
  m.def("set_device", [](int i) { check_index(i); cur_dev = i; });
  m.def("device_count", [] { return device_count.load(); });
  m.def("set_device_count", [](int n) {
    TORCH_CHECK(n >= 1 && n <= kMaxDevices, "the simulated device count is 1 to ", kMaxDevices);
    device_count = n;
  });
}
