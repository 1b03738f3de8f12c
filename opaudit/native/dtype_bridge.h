// The dtypes a device runs that the CPU kernels refuse, shared by opaudit's two devices over host memory (the
// CUDA stand-in, opaudit/native/cuda.cpp, and the rehearsal's device, opaudit/native/device.cpp).
//
// Both run an op's CPU kernel over CPU aliases of the device memory. CUDA's kernels accept (op, dtype) pairs
// that the CPU's refuse (PyTorch's OpInfo database lists them: `dtypesIfCUDA` against `dtypes`, kept in
// coverage_db/curated/cuda_dtypes.toml): histc of integers, softmax of half scores into float32, pooling and
// losses in half, fft in half, complex32 arithmetic, abs of bools. Where the CPU kernel refuses a dtype, the
// call is bridged: its narrow tensors are widened (half, bfloat16 -> float32; complex32 -> complex64; bool
// and integers -> int64 or float64), the CPU kernel runs on the wide copies, and each result is cast to the
// dtype the device's kernel returns (read from the op's Meta kernel where it has one, else the narrow dtype
// it was widened from); written arguments (in-place, out=) get their wide result copied back.
//
// Only a refusal of a dtype is bridged: the CPU kernel's words for one (is_dtype_refusal: AT_DISPATCH's "not
// implemented for '<dtype>'", a conversion "not supported on CPU", ...), and only where the op's Meta kernel (the checks every device shares)
// accepts the call; any other error is the program's and is raised as it was. Each bridged call is counted
// by op and dtype (bridged_counts), as the device's own work.
#pragma once

#include "torch_compat.h"

#include "host_alias.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace opaudit_bridge {
// internal linkage: each C++ part (one translation unit) keeps its own statics, never another part's loaded
// in the same process (inline functions' statics would be merged across them)
namespace {

inline std::mutex& counts_mutex() {
  static std::mutex m;
  return m;
}

inline std::map<std::pair<std::string, std::string>, int64_t>& counts() {
  static std::map<std::pair<std::string, std::string>, int64_t> c;
  return c;
}

// Ops whose CPU kernel refuses, in words of its own, a call CUDA's runs (cuda_dtypes.toml's [[kernel]] entries:
// softmax's backward from float32 gradients to float16), set from Python once the library is loaded.
inline std::set<std::string>& kernel_ops() {
  static std::set<std::string> ops;
  return ops;
}

inline void set_kernel_ops(const std::vector<std::string>& ops) {
  std::lock_guard<std::mutex> g(counts_mutex());
  kernel_ops() = std::set<std::string>(ops.begin(), ops.end());
}

// Ops whose float16 calls run in float32 and are rounded back (cuda_dtypes.toml's [[wide]]: the CPU's float16
// kernel is a slow reference path, CUDA's accumulates in float32), set from Python once the library is loaded.
inline std::set<std::string>& wide_ops() {
  static std::set<std::string> ops;
  return ops;
}

inline void set_wide_ops(const std::vector<std::string>& ops) {
  std::lock_guard<std::mutex> g(counts_mutex());
  wide_ops() = std::set<std::string>(ops.begin(), ops.end());
}

inline bool has_half(const std::vector<c10::IValue>& args) {
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == c10::kHalf) return true;
  }
  return false;
}

// The CPU kernels' words for a dtype they refuse (AT_DISPATCH's, and the checks of softmax, nansum and MKL's FFT),
// or any refusal of an op listed as refusing a CUDA call in words of its own.
inline bool is_dtype_refusal(const c10::OperatorHandle& op, const c10::Error& e) {
  if (kernel_ops().count(op.operator_name().name)) return true;
  const std::string msg = e.what_without_backtrace();
  for (const char* words : {"not implemented for '", "not supported on CPU", "on CPU does not support",
                            "doesn't support tensors of type"})
    if (msg.find(words) != std::string::npos) return true;
  return false;
}

inline bool is_dtype_argument(const c10::Argument& a) {
  const c10::Type* type = a.real_type().get();
  if (type->kind() == c10::OptionalType::Kind) type = type->castRaw<c10::OptionalType>()->getElementType().get();
  return type->kind() == c10::ScalarTypeType::Kind;
}

// The dtype a narrow one is computed in; `ints` widens integer and bool tensors too (a second attempt).
inline c10::optional<c10::ScalarType> wide(c10::ScalarType t, bool ints) {
  switch (t) {
    case c10::kHalf:
    case c10::kBFloat16: return c10::kFloat;
    case c10::kComplexHalf: return c10::kComplexFloat;
    case c10::kBool: return c10::kLong;
    default: break;
  }
  if (ints && c10::isIntegralType(t, /*includeBool=*/false)) return c10::kDouble;
  return c10::nullopt;
}

struct Widened {
  std::vector<c10::IValue> args;
  std::vector<std::pair<at::Tensor, at::Tensor>> writes;  // (the argument, its wide copy) of written arguments
  std::vector<std::pair<c10::ScalarType, c10::ScalarType>> narrowed;  // (wide, narrow) of each widened tensor
  bool changed = false;
};

inline Widened widen(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args, bool ints) {
  Widened w;
  w.args = args;
  auto one = [&](const at::Tensor& t, bool write) -> at::Tensor {
    if (!t.defined()) return t;
    auto to = wide(t.scalar_type(), ints);
    if (!to) return t;
    auto c = t.to(*to);
    w.changed = true;
    w.narrowed.emplace_back(*to, t.scalar_type());
    if (write) w.writes.emplace_back(t, c);
    return c;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = schema.arguments()[i];
    const auto* ai = a.alias_info();
    const bool write = ai && ai->isWrite();
    auto& v = w.args[i];
    if (v.isTensor()) {
      v = one(v.toTensor(), write);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList().copy();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, one(list.get(j), write));
      v = list;
    } else if (v.isInt() && is_dtype_argument(a)) {
      // a dtype argument naming a narrow dtype (softmax backward's input_dtype): computed wide as well
      auto to = wide(static_cast<c10::ScalarType>(v.toInt()), false);
      if (to) v = static_cast<int64_t>(*to);
    } else if (v.isBool() && v.toBool() && a.name() == "half_to_float") {
      v = false;  // the wide input is float32 already (CUDA's half-to-float softmax)
    }
  }
  return w;
}

// The dtypes of the op's results as the device's kernel makes them: its Meta kernel on meta copies of the
// arguments. Empty where the op has no Meta kernel; nullopt where the Meta kernel refuses the call (every
// device would).
inline c10::optional<std::vector<c10::ScalarType>> meta_dtypes(const c10::OperatorHandle& op,
                                                              const std::vector<c10::IValue>& args) {
  std::vector<c10::ScalarType> out;
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) return out;
  auto meta = [](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  torch::jit::Stack stack;
  for (const auto& v : args) {
    if (v.isTensor()) {
      stack.emplace_back(meta(v.toTensor()));
    } else if (v.isTensorList()) {
      auto list = v.toTensorList().copy();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, meta(list.get(j)));
      stack.emplace_back(list);
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList().copy();
      for (size_t j = 0; j < list.size(); ++j) {
        c10::optional<at::Tensor> t = list.get(j);
        if (t) list.set(j, meta(*t));
      }
      stack.emplace_back(list);
    } else {
      stack.push_back(v);
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  } catch (const c10::Error&) {
    return c10::nullopt;
  }
  for (const auto& v : stack) {
    if (v.isTensor()) out.push_back(v.toTensor().defined() ? v.toTensor().scalar_type() : c10::kFloat);
    else if (v.isTensorList() && v.toTensorList().size() > 0) out.push_back(v.toTensorList().get(0).scalar_type());
    else out.push_back(c10::ScalarType::Undefined);
  }
  return out;
}

inline at::Tensor narrow_result(const at::Tensor& r, const Widened& w, c10::optional<c10::ScalarType> expected) {
  if (!r.defined()) return r;
  for (const auto& [arg, copy] : w.writes)
    if (r.unsafeGetTensorImpl() == copy.unsafeGetTensorImpl()) return arg;
  c10::ScalarType to = r.scalar_type();
  if (expected && *expected != c10::ScalarType::Undefined) {
    to = *expected;
  } else {
    for (const auto& [widened, narrow] : w.narrowed)
      if (widened == r.scalar_type()) { to = narrow; break; }
  }
  return to == r.scalar_type() ? r : r.to(to);
}

// One bridged call of `op`, under the narrow dtype it was called with.
inline void count(const c10::OperatorHandle& op, c10::optional<c10::ScalarType> narrow) {
  std::string name = op.operator_name().name;
  name += "." + (op.operator_name().overload_name.empty() ? std::string("default") : op.operator_name().overload_name);
  std::string dtype = narrow ? std::string(c10::toString(*narrow)) : "";
  std::lock_guard<std::mutex> g(counts_mutex());
  ++counts()[{name, dtype}];
}

inline void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKeySet cpu);
inline bool run_wide(const c10::OperatorHandle& op, const std::vector<c10::IValue>& saved, torch::jit::Stack* stack,
                     size_t base, c10::DispatchKeySet cpu, std::initializer_list<bool> ints_tried);

// An op whose CPU kernel refuses a dtype that widening cannot help (nansum of complex numbers: complex64 is as
// wide as it goes) and that another op computes on cleaned arguments: nansum is sum with NaN taken as zero (the
// same arguments, the same results). True when it ran.
inline bool reference(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args, torch::jit::Stack* stack,
                      size_t base, c10::DispatchKeySet cpu) {
  const auto& name = op.operator_name();
  if (name.name != "aten::nansum" || args.empty() || !args[0].isTensor()) return false;
  static const auto sum = c10::Dispatcher::singleton().findSchemaOrThrow("aten::sum", "dim_IntList");
  static const auto sum_out = c10::Dispatcher::singleton().findSchemaOrThrow("aten::sum", "IntList_out");
  const auto& self = args[0].toTensor();
  stack->resize(base);
  stack->emplace_back(at::where(at::isnan(self), at::zeros({}, self.options()), self));
  for (size_t i = 1; i < args.size(); ++i) stack->push_back(args[i]);
  run_cpu(name.overload_name == "out" ? sum_out : sum, stack, cpu);
  return true;
}

// Runs the op's CPU kernel on the stack's arguments (already on the host), bridging a refused dtype (header doc).
inline void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKeySet cpu) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size(), base = stack->size() - nargs;
  std::vector<c10::IValue> saved(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  const bool wide = !wide_ops().empty() && wide_ops().count(op.operator_name().name) && has_half(saved);
  try {
    if (!wide) {
      op.redispatchBoxed(cpu, stack);
      return;
    }
    if (!run_wide(op, saved, stack, base, cpu, {false})) op.redispatchBoxed(cpu, stack);  // (as it was called)
  } catch (const c10::Error& e) {
    if (wide || !is_dtype_refusal(op, e)) throw;
    if (run_wide(op, saved, stack, base, cpu, {false, true})) return;
    if (reference(op, saved, stack, base, cpu)) {
      count(op, saved[0].toTensor().scalar_type());  // (reference() runs only with a tensor first)
      return;
    }
    throw;
  }
}

// The call with its narrow tensors widened (`ints`: false, then true, to widen integers too), the results cast to
// the dtypes the op's Meta kernel gives; false where no widening runs (the stack then holds the arguments again).
inline bool run_wide(const c10::OperatorHandle& op, const std::vector<c10::IValue>& saved, torch::jit::Stack* stack,
                     size_t base, c10::DispatchKeySet cpu, std::initializer_list<bool> ints_tried) {
  const auto& schema = op.schema();
  auto expected = meta_dtypes(op, saved);
  for (bool ints : ints_tried) {
    if (!expected) break;
    Widened w = widen(schema, saved, ints);
    if (!w.changed) continue;
    stack->resize(base);
    for (auto& v : w.args) stack->push_back(v);
    try {
      op.redispatchBoxed(cpu, stack);
    } catch (const c10::Error&) {
      continue;
    }
    for (const auto& [arg, copy] : w.writes) arg.copy_(copy);
    opaudit_host::map_results(stack, schema.returns().size(), [&](const at::Tensor& t, size_t r) {
      return narrow_result(t, w, r < expected->size() ? c10::optional<c10::ScalarType>((*expected)[r]) : c10::nullopt);
    });
    count(op, w.narrowed.front().second);
    return true;
  }
  stack->resize(base);
  for (const auto& v : saved) stack->push_back(v);
  return false;
}

// {(op, dtype): calls} of the bridged calls so far.
inline std::vector<std::tuple<std::string, std::string, int64_t>> bridged_counts() {
  std::lock_guard<std::mutex> g(counts_mutex());
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& [k, n] : counts()) out.emplace_back(k.first, k.second, n);
  return out;
}

}  // namespace
}  // namespace opaudit_bridge
