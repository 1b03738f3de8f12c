// What opaudit's C++ parts need from torch that older releases do not export, one place for each.
#pragma once

// What the parts use of torch/extension.h (ATen, operator registration, pybind11 with torch's type casters),
// without the C++ frontend it also brings (torch/all.h: nn, optim, data), which took half of each part's build
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <ATen/autocast_mode.h>

#include <torch/version.h>

#include <mutex>
#include <string>
#include <unordered_map>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#include <torch/csrc/PyInterpreter.h>
#define OPAUDIT_HAS_TORCH_API_FUNCTION 1
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
// at::Allocator: allocate() is const up to torch 2.2, and copy_data() (with default_copy_data) comes in 2.3
#define OPAUDIT_TORCH_2_3 1
#define OPAUDIT_ALLOCATE_CONST
#else
#define OPAUDIT_ALLOCATE_CONST const
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define OPAUDIT_TORCH_2_4 1
// a virtual function the interface has from torch 2.4 on (the PrivateUse1 hooks' device count, current device, ...;
// torch 2.1's interface has only getDefaultGenerator and getDeviceFromPtr)
#define OPAUDIT_OVERRIDE_2_4 override
#else
#define OPAUDIT_OVERRIDE_2_4
#endif

// `override` on a virtual function the interface has from that torch on, as read in each release's headers
// (PyPI's wheels): 2.5 the PrivateUse1 hooks' const getDefaultGenerator and isPinnedPtr; 2.6 the hooks' init and
// the device guard's synchronizeDevice; 2.7 the hooks' isBuilt and isAvailable. Before, the same functions are
// plain members (never called), so one source builds against each release.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define OPAUDIT_TORCH_2_5 1
#define OPAUDIT_OVERRIDE_2_5 override
#else
#define OPAUDIT_OVERRIDE_2_5
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define OPAUDIT_OVERRIDE_2_6 override
#else
#define OPAUDIT_OVERRIDE_2_6
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
#define OPAUDIT_OVERRIDE_2_7 override
#else
#define OPAUDIT_OVERRIDE_2_7
#endif

namespace opaudit_compat {
// internal linkage: each C++ part (one translation unit) keeps its own statics, never another part's loaded
// in the same process (inline functions' statics would be merged across them)
namespace {

// The OpOverload (torch.ops.<namespace>.<name>.<overload>) of an operator, borrowed. torch >= 2.8 exports its own
// cache (torch::detail::getTorchApiFunction); before, the overload is looked up in Python once per operator and kept.
// Called with the GIL held.
inline py::handle api_function(const c10::OperatorHandle& op) {
#ifdef OPAUDIT_HAS_TORCH_API_FUNCTION
  return torch::detail::getTorchApiFunction(op);
#else
  static std::mutex m;
  static std::unordered_map<const void*, py::object>* found = new std::unordered_map<const void*, py::object>();
  const void* key = &op.schema();
  {
    std::lock_guard<std::mutex> g(m);
    auto it = found->find(key);
    if (it != found->end()) return it->second;
  }
  const auto& name = op.operator_name();
  const auto split = name.name.find("::");
  const std::string ns = name.name.substr(0, split), base = name.name.substr(split + 2);
  py::object overload = py::module_::import("torch").attr("ops").attr(ns.c_str()).attr(base.c_str())
                            .attr(name.overload_name.empty() ? "default" : name.overload_name.c_str());
  std::lock_guard<std::mutex> g(m);
  return (*found)[key] = overload;
#endif
}

// The autocast state of the PrivateUse1 device (what its module's is_autocast_enabled, set_autocast_enabled,
// get_autocast_dtype, set_autocast_dtype answer and set, which torch.autocast of torch 2.1 to 2.3 calls for that
// device, as a plugin's C++ does): at::autocast's device-type functions from torch 2.4 on, its *_privateuseone_*
// functions before.
inline bool privateuse1_autocast_enabled() {
#ifdef OPAUDIT_TORCH_2_4
  return at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1);
#else
  return at::autocast::is_privateuseone_enabled();
#endif
}
inline void set_privateuse1_autocast_enabled(bool on) {
#ifdef OPAUDIT_TORCH_2_4
  at::autocast::set_autocast_enabled(c10::DeviceType::PrivateUse1, on);
#else
  at::autocast::set_privateuseone_enabled(on);
#endif
}
inline at::ScalarType privateuse1_autocast_dtype() {
#ifdef OPAUDIT_TORCH_2_4
  return at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1);
#else
  return at::autocast::get_autocast_privateuseone_dtype();
#endif
}
inline void set_privateuse1_autocast_dtype(at::ScalarType dtype) {
#ifdef OPAUDIT_TORCH_2_4
  at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, dtype);
#else
  at::autocast::set_autocast_privateuseone_dtype(dtype);
#endif
}

}  // namespace
}  // namespace opaudit_compat
