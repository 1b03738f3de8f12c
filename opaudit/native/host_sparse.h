// Sparse COO tensors of opaudit's two devices over host memory (host_device.h): the CUDA stand-in's (SparseCUDA,
// cuda.cpp) and the rehearsal device's (SparsePrivateUse1, device.cpp). A device sparse tensor is torch's
// SparseTensorImpl on the device's sparse key whose indices and values are device tensors, as a CUDA build's and a
// plugin's are. An op with one runs as a dense op does: its CPU kernel (SparseCPU's) over a CPU sparse tensor whose
// indices and values alias the device memory, each sparse result made a device one over its indices and values on
// the device. A dense op that gives a sparse result (embedding_bag's backward with sparse=True) gets it on the device
// the same way (results()). The device's traits name its sparse key: `static constexpr c10::DispatchKey sparse_key`.
#pragma once

#include "dtype_bridge.h"
#include "host_device.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>

#include <vector>

namespace opaudit_host {
namespace {

// The ops that make a sparse tensor, give its parts or change them in place. SparseCPU's kernels of these work on
// any device's SparseTensorImpl (`_values()` is the device's values, not a copy): each device registers them on its
// sparse key to run SparseCPU's kernel on the device tensor itself.
constexpr const char* kSparseStructural[] = {
    "empty.memory_format", "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors",
    "sparse_resize_", "sparse_resize_and_clear_", "sparse_dim", "dense_dim", "_dimI", "_dimV", "_nnz",
    "is_coalesced", "_coalesced_", "_indices", "_values", "indices", "values", "copy_", "copy_sparse_to_sparse_",
    "resize_as_sparse_", "zero_"};

template <class D>
struct HostSparse {
  using Host = HostDevice<D>;

  static bool is_device_sparse(const at::Tensor& t) {
    return t.defined() && t.layout() == at::kSparse && t.device().type() == D::type;
  }

  // `impl` made a sparse tensor of t's shape over `indices` and `values` (not copied).
  static void set_sparse(at::SparseTensorImpl* impl, const at::Tensor& t, const at::Tensor& indices,
                         const at::Tensor& values) {
    impl->raw_resize_(t.sparse_dim(), t.dense_dim(), t.sizes());
    impl->set_indices_and_values_unsafe(indices, values);
    impl->set_coalesced(t.is_coalesced());
  }

  // A sparse tensor on `key` (SparseCPU, the device's) with t's shape over `indices` and `values` (not copied).
  static at::Tensor over(c10::DispatchKey key, const at::Tensor& t, const at::Tensor& indices,
                         const at::Tensor& values) {
    auto out = at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key), t.dtype());
    set_sparse(at::sparse::get_sparse_impl(out), t, indices, values);
    return out;
  }

  // A device sparse tensor as a CPU one over its memory; its indices and values join `parts` (so that a result
  // that is one of them, or a view of one, becomes the device's again).
  static at::Tensor host(const at::Tensor& t, std::vector<Arg>& parts) {
    auto* impl = at::sparse::get_sparse_impl(t);
    auto i = Host::as_cpu(impl->indices()), v = Host::as_cpu(impl->values());
    parts.push_back({impl->indices(), i, i.storage().data()});
    parts.push_back({impl->values(), v, v.storage().data()});
    return over(c10::DispatchKey::SparseCPU, t, i, v);
  }

  // A CPU sparse result on the device (its indices and values as Host::to_device makes a dense result).
  static at::Tensor device(const at::Tensor& t, const std::vector<Arg>& parts, c10::Device device) {
    c10::DeviceGuard g(device);
    auto* impl = at::sparse::get_sparse_impl(t);
    return over(D::sparse_key, t, Host::to_device(impl->indices(), parts, device),
                Host::to_device(impl->values(), parts, device));
  }

  // The op's CPU sparse results made the device's (save `keep`'s CPU twins: those are the device tensors again,
  // and the results whose bit is set in `host_results`: made on the host, they stay there).
  struct Twin { at::Tensor dev, cpu; };
  static void results(const c10::FunctionSchema& schema, torch::jit::Stack* stack, const HostCall& call,
                      const std::vector<Twin>& keep = {}, uint32_t host_results = 0) {
    if (call.to_host) return;
    const size_t nrets = schema.returns().size();
    for (size_t r = 0; r < nrets; ++r) {
      auto& v = (*stack)[stack->size() - nrets + r];
      if (!v.isTensor() || host_results & (1u << r)) continue;
      const at::Tensor t = v.toTensor();
      if (!t.defined() || t.layout() != at::kSparse || !t.is_cpu()) continue;
      at::Tensor out;
      for (const auto& s : keep)
        if (t.unsafeGetTensorImpl() == s.cpu.unsafeGetTensorImpl()) out = s.dev;
      v = out.defined() ? out : device(t, call.args, call.device);
    }
  }

  // An op with a device sparse argument, run by its CPU kernel (above).
  static void run(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t nargs = schema.arguments().size(), base = stack->size() - nargs;
    std::vector<Arg> parts;
    std::vector<Twin> sparse, written;
    for (size_t i = 0; i < nargs; ++i) {
      auto& v = (*stack)[base + i];
      if (!v.isTensor() || !is_device_sparse(v.toTensor())) continue;
      const auto* ai = schema.arguments()[i].alias_info();
      at::Tensor t = v.toTensor();
      auto cpu = host(t, parts);
      sparse.push_back({t, cpu});
      if (ai && ai->isWrite()) written.push_back({t, cpu});
      v = cpu;
    }
    auto call = Host::host_arguments(op, stack);  // the dense device arguments
    if (!sparse.empty()) call.device = sparse.front().dev.device();
    opaudit_bridge::run_cpu(op, stack, c10::DispatchKeySet(c10::DispatchKey::SparseCPU));
    for (const auto& a : parts) call.args.push_back(a);
    c10::DeviceGuard g(call.device);
    for (const auto& s : written) {  // what an in-place op did to a sparse argument, done to the device's
      auto* cpu = at::sparse::get_sparse_impl(s.cpu);
      set_sparse(at::sparse::get_sparse_impl(s.dev), s.cpu, Host::to_device(cpu->indices(), call.args, call.device),
                 Host::to_device(cpu->values(), call.args, call.device));
    }
    if (call.to_host) return;
    results(schema, stack, call, sparse);
    Host::device_results(op, stack, call);
  }

  // (a device sparse argument, or a sparse layout asked for: a sparse factory of the device)
  static bool wanted(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
    const size_t nargs = schema.arguments().size(), base = stack.size() - nargs;
    for (size_t i = 0; i < nargs; ++i) {
      const auto& v = stack[base + i];
      if (v.isTensor() && is_device_sparse(v.toTensor())) return true;
      if (v.isInt() && schema.arguments()[i].name() == "layout" &&
          static_cast<at::Layout>(v.toInt()) == at::kSparse)
        return true;
    }
    return false;
  }
};

}  // namespace
}  // namespace opaudit_host
