// The tracer's recorder in C++ (opaudit/tracing/native.py builds and loads it; recorder.py drives it).
//
// A boxed fallback on the dispatcher's `Fake` key, which sits below autograd and just below the Python key: the
// level where a backend receives its ops (after CompositeImplicitAutograd decomposition), as the Python recorder's
// TorchDispatchMode sees them, without a Python call per op. While a recording runs, the recording thread has the
// key in its TLS include set (the autograd engine carries it to its device threads); every op reaching it is
// counted into the recording's Python dict under the same key the Python recorder builds
// (op, kind, phase, dtypes, module, location, within, shapes, placement), and then redispatched below with the key
// excluded, so what a kernel runs inside (a backend's own calls, a composite's pieces) is not counted twice.
//
// Per op the recording plans once (planner(op, device type) -> what): RECORD is counted here; NOISE (profiler
// and prim ops) only counted as noise; PYTHON (record_function markers, .item(), meta shortcuts, custom ops that
// decompose) goes to handler(op, args, kwargs) with recording paused, which returns the result or REDISPATCH.
// Attribution as in attribution.py: backward ops by the sequence number of the autograd node being run; forward
// ops by the first user frame (each code object classified once, by the Python locator) and the module stack.
#include "torch_compat.h"

#include <ATen/SequenceNumber.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <frameobject.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <map>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
// 3.11: the interpreter's frames are walked as they are, not through frame objects (PyFrame_GetBack makes one per
// frame it passes, which was most of the recorder's time per op on a deep module stack)
#define OPAUDIT_INTERPRETER_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::Fake;
enum What { UNPLANNED = -1, RECORD = 0, NOISE = 1, PYTHON = 2 };
enum CodeKind { USER = 0, INTERNAL = 1, OPTIMIZER = 2, BACKWARD = 3, OPAUDIT = 4, BRANCH = 8 };  // BRANCH: a flag
enum Cast { NO_CAST = 0, TO_COPY = 1, VIEW_DTYPE = 2 };

struct Plan {
  int what = UNPLANNED;
  int cast = NO_CAST;
  PyObject* name = nullptr;  // "aten::mm.default" (owned)
  PyObject* kind = nullptr;  // "op" | "custom" (owned)
};

// The state of the recording in progress (one per process); every field is touched with the GIL held.
struct State {
  bool on = false;
  PyObject* counts = nullptr;   // Recording.counts
  PyObject* seq = nullptr;      // Recording.seq: sequence number -> (module, location, within)
  PyObject* stack = nullptr;    // ModuleStack.stack: the module paths being called
  PyObject* rec = nullptr;      // the Recording (its total, for the Python paths)
  PyObject* planner = nullptr, *handler = nullptr, *classify = nullptr, *unattributed = nullptr, *tick = nullptr;
  PyObject* branch_at = nullptr;  // branches.Branches.at(code, offset): the device branch's arm there, or None
  PyObject* redispatch = nullptr;  // the handler's "run it below" answer
  PyObject* optimizer_module = nullptr;
  int optimizer_depth = 0;
  bool split_host = false, shapes = false;
  int64_t total = 0, limit = 0, noise = 0;
  std::unordered_map<const void*, Plan> plans;     // by the op's schema (the OperatorHandle's identity)
  std::unordered_map<PyObject*, int> code_kinds;   // code object -> CodeKind (the locator keeps the codes alive)
  std::map<std::pair<PyObject*, int>, PyObject*> locations;  // (code, offset) -> the location tuple (owned)
};
State S;

PyObject *s_forward, *s_backward, *s_optimizer, *s_device, *s_host, *s_mixed;
std::unordered_map<int, PyObject*> dtype_objects;  // ScalarType -> torch.dtype (borrowed: torch keeps them)
std::unordered_map<int, std::string> dtype_names;  // ScalarType -> "float32"

void clear_state() {
  for (auto& kv : S.plans) {
    Py_XDECREF(kv.second.name);
    Py_XDECREF(kv.second.kind);
  }
  S.plans.clear();
  for (auto& kv : S.locations) Py_DECREF(kv.second);
  S.locations.clear();
  S.code_kinds.clear();
  PyObject** owned[] = {&S.counts, &S.seq, &S.stack, &S.rec, &S.planner, &S.handler, &S.classify,
                        &S.branch_at, &S.unattributed, &S.tick, &S.redispatch, &S.optimizer_module};
  for (PyObject** p : owned) Py_CLEAR(*p);
  S.on = false;
}

void sync_total_to_python() {
  py::handle(S.rec).attr("total") = py::int_(S.total);
}

// ---------------------------------------------------------------- where an op comes from
// frame.f_lasti as Python reads it: the offset in bytes of the frame's last instruction
int frame_lasti(PyFrameObject* frame) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyFrame_GetLasti(frame);
#else
  return frame->f_lasti < 0 ? -1 : frame->f_lasti * static_cast<int>(sizeof(_Py_CODEUNIT));
#endif
}

int code_kind(PyObject* code) {
  auto it = S.code_kinds.find(code);
  if (it != S.code_kinds.end()) return it->second;
  int kind = py::reinterpret_borrow<py::object>(S.classify)(py::handle(code)).cast<int>();
  S.code_kinds.emplace(code, kind);
  return kind;
}

PyObject* location(PyObject* code, int offset) {  // borrowed
  auto key = std::make_pair(code, offset);
  auto it = S.locations.find(key);
  if (it != S.locations.end()) return it->second;
  PyObject* loc = Py_BuildValue("(NN)", PyLong_FromVoidPtr(code), PyLong_FromLong(offset));
  if (loc == nullptr) throw py::error_already_set();
  S.locations.emplace(key, loc);
  return loc;
}

struct Located {
  PyObject* found;  // the location (borrowed), Py_None when there is none
  int hint;
  py::object branch;  // the device branch whose CUDA arm runs on the way (branches.py), or None
};

// a frame of a code flagged BRANCH: the label of the arm its offset is in (None outside the arm)
py::object branch_at(PyObject* code, int offset) {
  return py::reinterpret_borrow<py::object>(S.branch_at)(py::handle(code), offset);
}

// SourceLocator.locate: the first user frame's location, a phase hint, and the device branch on the way.
#ifdef OPAUDIT_INTERPRETER_FRAMES
Located locate() {
  int hint = 0;
  py::object branch = py::none();
  for (_PyInterpreterFrame* f = PyThreadState_Get()->cframe->current_frame; f != nullptr; f = f->previous) {
    if (_PyFrame_IsIncomplete(f)) continue;  // as PyFrame_GetBack skips them
    PyObject* code = reinterpret_cast<PyObject*>(f->f_code);
    int kind = code_kind(code);
    if (kind == USER) {
      int lasti = _PyInterpreterFrame_LASTI(f);
      return {location(code, lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT))), hint, branch};
    }
    if (kind & BRANCH) {
      kind ^= BRANCH;
      if (branch.is_none()) {
        int lasti = _PyInterpreterFrame_LASTI(f);
        branch = branch_at(code, lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT)));
      }
    }
    if (kind == OPAUDIT) break;
    if ((kind == OPTIMIZER || kind == BACKWARD) && hint == 0) hint = kind;
  }
  return {Py_None, hint, branch};
}
#else
Located locate() {
  int hint = 0;
  py::object branch = py::none();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  PyObject* found = Py_None;
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    int kind = code_kind(reinterpret_cast<PyObject*>(code));
    if (kind == USER) {
      found = location(reinterpret_cast<PyObject*>(code), frame_lasti(frame));
      Py_DECREF(code);
      break;
    }
    if ((kind & BRANCH) && branch.is_none()) branch = branch_at(reinterpret_cast<PyObject*>(code), frame_lasti(frame));
    kind &= ~BRANCH;
    Py_DECREF(code);
    if (kind == OPAUDIT) break;
    if ((kind == OPTIMIZER || kind == BACKWARD) && hint == 0) hint = kind;
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return {found, hint, branch};
}
#endif

// ---------------------------------------------------------------- what the call carries
PyObject* dtype_object(c10::ScalarType t) {
  auto it = dtype_objects.find(static_cast<int>(t));
  if (it != dtype_objects.end()) return it->second;
  return reinterpret_cast<PyObject*>(torch::getTHPDtype(t));
}

const std::string& dtype_name(c10::ScalarType t) {
  static const std::string unknown = "unknown";
  auto it = dtype_names.find(static_cast<int>(t));
  return it == dtype_names.end() ? unknown : it->second;
}

// The arguments as torch's Python dispatch hands them over (parseIValuesToPyArgsKwargs): positional ones up to the
// kwarg-only ones, less the trailing ones left at their default; kwarg-only ones not at their default.
struct Split {
  size_t positional;  // arguments [0, positional) are positional
  size_t kwarg_start;
};

bool is_default(const c10::Argument& a, const c10::IValue& v) {
  const auto& d = a.default_value();
  return d.has_value() && *d == v;
}

Split split(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  size_t kw = args.size();
  while (kw > 0 && schema.arguments()[kw - 1].kwarg_only()) --kw;
  size_t pos = kw;
  while (pos > 0 && is_default(schema.arguments()[pos - 1], args[pos - 1])) --pos;
  return {pos, kw};
}

bool is_tensor_list(const c10::IValue& v) {
  if (v.isTensorList()) return true;
  if (!v.isList()) return false;
  auto elem = v.toListRef();
  if (elem.empty()) return false;
  return elem[0].isTensor() || elem[0].isNone();
}

bool is_host(const at::Tensor& t) { return t.is_cpu(); }

struct Call {
  py::tuple sig;
  PyObject* where;  // borrowed
  py::object shapes;
};

Call describe_call(const c10::OperatorHandle& op, const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  const auto& schema = op.schema();
  Split sp = split(schema, args);
  std::vector<PyObject*> sig;  // borrowed dtype objects, or owned strings (strings are tracked below)
  std::vector<py::object> keep;
  std::vector<py::object> shapes;
  bool device = false, host = false;
  auto place = [&](const at::Tensor& t) {
    if (is_host(t)) host = true; else device = true;
  };
  auto shape_of = [&](const at::Tensor& t) {
    std::string s;
    for (auto d : t.sizes()) {
      if (!s.empty()) s += 'x';
      s += std::to_string(d);
    }
    shapes.push_back(py::str(s.empty() ? "scalar" : s));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    bool positional = i < sp.positional;
    bool keyword = i >= sp.kwarg_start && !is_default(schema.arguments()[i], args[i]);
    if (!positional && !keyword) continue;
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) continue;  // a Python scalar
      sig.push_back(dtype_object(t.scalar_type()));
      if (S.split_host) place(t);
      if (S.shapes) shape_of(t);
    } else if (is_tensor_list(v)) {
      std::set<std::string> names;
      bool any = false;
      size_t n = 0;
      for (const auto& e : v.toListRef()) {
        ++n;
        if (!e.isTensor()) continue;
        const at::Tensor& t = e.toTensor();
        if (!t.defined()) continue;
        any = true;
        names.insert(dtype_name(t.scalar_type()));
        if (S.split_host) place(t);
      }
      if (positional && !names.empty()) {
        std::string joined;
        for (const auto& nm : names) {
          if (!joined.empty()) joined += '|';
          joined += nm;
        }
        keep.push_back(py::str(joined + "[]"));
        sig.push_back(keep.back().ptr());
      }
      if (S.shapes && any) shapes.push_back(py::str("[" + std::to_string(n) + "]"));
    } else if (keyword && S.split_host && v.isDevice() && schema.arguments()[i].name() == "device") {
      if (v.toDevice().is_cpu()) host = true; else device = true;
    }
  }
  if (sig.empty()) {
    // a factory's dtype= (zeros, full, arange): what the call makes, judged as such; as recorder.py sees it, where
    // Python dispatch leaves out a keyword equal to its default (randint's long)
    auto idx = schema.argumentIndexWithName("dtype");
    if (idx && *idx >= sp.kwarg_start && *idx < args.size() && args[*idx].isInt() &&
        schema.arguments()[*idx].kwarg_only() && !is_default(schema.arguments()[*idx], args[*idx]))
      sig.push_back(dtype_object(args[*idx].toScalarType()));
  }
  if (plan.cast != NO_CAST && !sig.empty() && !args.empty() && args[0].isTensor()) {
    // a cast's output dtype goes on its input's entry ("float32->bfloat16"), as recorder._cast_signature does
    c10::ScalarType src = args[0].toTensor().scalar_type();
    c10::optional<c10::ScalarType> out;
    if (plan.cast == VIEW_DTYPE && args.size() > 1 && args[1].isInt()) out = args[1].toScalarType();
    if (plan.cast == TO_COPY) {
      auto idx = schema.argumentIndexWithName("dtype");
      if (idx && !args[*idx].isNone()) out = args[*idx].toScalarType();
    }
    if (out && *out != src) {
      keep.push_back(py::str(dtype_name(src) + "->" + dtype_name(*out)));
      sig[0] = keep.back().ptr();
    }
  }
  Call call;
  call.sig = py::tuple(sig.size());
  for (size_t i = 0; i < sig.size(); ++i) call.sig[i] = py::handle(sig[i]);
  call.where = !S.split_host ? s_device : device ? (host ? s_mixed : s_device) : s_host;
  if (S.shapes) {
    py::tuple t(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) t[i] = shapes[i];
    call.shapes = t;
  } else {
    call.shapes = py::none();
  }
  return call;
}

// ---------------------------------------------------------------- the hot path
void tick() {
  sync_total_to_python();
  py::reinterpret_borrow<py::object>(S.tick)();  // may raise TraceStopped
  S.limit = py::handle(S.rec).attr("_limit").cast<int64_t>();
}

// Recording._where: the phase, module, location and device branch of an op issued outside the autograd engine.
void where(PyObject*& phase, py::object& module, py::object& loc, py::object& branch) {
  auto [found, hint, arm] = locate();
  loc = py::reinterpret_borrow<py::object>(found);
  branch = arm;
  if (hint == 0 && S.optimizer_depth == 0) {
    phase = s_forward;
    Py_ssize_t n = PyList_GET_SIZE(S.stack);
    module = n ? py::reinterpret_borrow<py::object>(PyList_GET_ITEM(S.stack, n - 1)) : py::none();
  } else if (S.optimizer_depth || hint == OPTIMIZER) {
    phase = s_optimizer;
    module = S.optimizer_depth ? py::reinterpret_borrow<py::object>(S.optimizer_module) : py::none();
  } else {
    phase = s_backward;
    module = py::none();
  }
}

void record(const c10::OperatorHandle& op, const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  if (S.total >= S.limit) tick();
  ++S.total;
  PyObject* phase;
  py::object module, loc, within;
  auto node = torch::autograd::get_current_node();
  if (node) {
    phase = s_backward;
    py::object nr = py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(node->sequence_nr()));
    PyObject* attr = PyDict_GetItemWithError(S.seq, nr.ptr());  // borrowed
    py::object held;
    if (attr == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      held = py::reinterpret_borrow<py::object>(S.unattributed)(
          py::reinterpret_steal<py::object>(torch::autograd::functionToPyObject(node)));
      attr = held.ptr();
    }
    py::tuple t = py::reinterpret_borrow<py::tuple>(attr);
    module = t[0];
    loc = t[1];
    within = t[2];
  } else {
    where(phase, module, loc, within);
    if (phase == s_forward && c10::GradMode::is_enabled()) {
      // signed, as torch's Python binding answers: -1 before the thread's first node
      py::object nr = py::reinterpret_steal<py::object>(
          PyLong_FromLongLong(static_cast<int64_t>(at::sequence_number::peek()) - 1));
      py::tuple attr = py::make_tuple(module, loc, within);
      if (PyDict_SetDefault(S.seq, nr.ptr(), attr.ptr()) == nullptr) throw py::error_already_set();
    }
  }
  Call call = describe_call(op, plan, args);
  py::tuple key = py::make_tuple(py::handle(plan.name), py::handle(plan.kind), py::handle(phase), call.sig, module,
                                 loc, within, call.shapes, py::handle(call.where));
  PyObject* old = PyDict_GetItemWithError(S.counts, key.ptr());
  if (old == nullptr && PyErr_Occurred()) throw py::error_already_set();
  long n = old == nullptr ? 1 : PyLong_AsLong(old) + 1;
  py::object count = py::reinterpret_steal<py::object>(PyLong_FromLong(n));
  if (PyDict_SetItem(S.counts, key.ptr(), count.ptr()) < 0) throw py::error_already_set();
}

Plan& plan_of(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  Plan& p = S.plans[&op.schema()];
  if (p.what != UNPLANNED) return p;
  py::object device = py::none();
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined()) {
      device = py::str(c10::DeviceTypeName(v.toTensor().device().type(), /*lower_case=*/true));
      break;
    }
  }
  py::handle py_op = opaudit_compat::api_function(op);
  py::tuple answer = py::reinterpret_borrow<py::object>(S.planner)(py_op, device);
  p.name = py::object(answer[1]).release().ptr();
  p.kind = py::object(answer[2]).release().ptr();
  const auto& name = op.schema().name();
  const auto& overload = op.schema().overload_name();
  if (name == "aten::_to_copy" && overload.empty()) p.cast = TO_COPY;
  if (name == "aten::view" && overload == "dtype") p.cast = VIEW_DTYPE;
  p.what = answer[0].cast<int>();
  return p;
}

py::object to_python(const c10::Argument& a, const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined() && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
    // a Python number the binding wrapped: Python kernels receive it as the number
    return torch::jit::toPyObject(v.toTensor().item());
  }
  if (v.isInt()) {
    const c10::Type* type = a.real_type().get();
    if (type->kind() == c10::OptionalType::Kind) type = type->castRaw<c10::OptionalType>()->getElementType().get();
    switch (type->kind()) {
      case c10::ScalarTypeType::Kind:
        return py::reinterpret_borrow<py::object>(dtype_object(v.toScalarType()));
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

// The handler's turn (GIL held, recording paused): true when it answered, false when the op is to run below.
bool run_python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  Split sp = split(schema, args);
  py::tuple positional(sp.positional);
  py::dict keywords;
  for (size_t i = 0; i < nargs; ++i) {
    const auto& a = schema.arguments()[i];
    if (i < sp.positional) positional[i] = to_python(a, args[i]);
    else if (i >= sp.kwarg_start && !is_default(a, args[i])) keywords[py::str(a.name())] = to_python(a, args[i]);
  }
  sync_total_to_python();
  py::object out;
  {
    c10::impl::ExcludeDispatchKeyGuard paused(kKey);
    out = py::reinterpret_borrow<py::object>(S.handler)(opaudit_compat::api_function(op), positional,
                                                        keywords);
  }
  S.total = py::handle(S.rec).attr("total").cast<int64_t>();
  if (S.total >= S.limit) S.limit = py::handle(S.rec).attr("_limit").cast<int64_t>();
  if (out.ptr() == S.redispatch) return false;
  torch::jit::drop(*stack, nargs);
  const auto& returns = schema.returns();
  if (returns.empty()) return true;
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].real_type()));
    return true;
  }
  py::tuple results = py::cast<py::tuple>(out);
  TORCH_CHECK(results.size() == returns.size(), schema.name(), ": the recorder's handler returned ", results.size(),
              " results for ", returns.size());
  for (size_t i = 0; i < returns.size(); ++i)
    stack->push_back(torch::jit::toIValue(results[i], returns[i].real_type()));
  return true;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  {
    py::gil_scoped_acquire gil;
    if (S.on) {
      auto args = torch::jit::last(*stack, op.schema().arguments().size());
      Plan& p = plan_of(op, args);
      if (p.what == RECORD) {
        record(op, p, args);
      } else if (p.what == NOISE) {
        ++S.noise;
      } else if (run_python(op, stack)) {
        return;
      }
    }
  }
  c10::impl::ExcludeDispatchKeyGuard below(kKey);
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

// ---------------------------------------------------------------- the module
void start(py::object rec, py::dict counts, py::dict seq, py::list stack, py::object planner, py::object handler,
           py::object classify, py::object branch_at_fn, py::object unattributed, py::object tick_fn,
           py::object redispatch,
           py::dict dtypes, bool split_host, bool shapes, int64_t limit) {
  TORCH_CHECK(!S.on, "a recording is already running in C++");
  clear_state();
  dtype_objects.clear();
  dtype_names.clear();
  for (auto item : dtypes) {
    auto* d = reinterpret_cast<THPDtype*>(item.first.ptr());
    dtype_objects[static_cast<int>(d->scalar_type)] = item.first.ptr();
    dtype_names[static_cast<int>(d->scalar_type)] = item.second.cast<std::string>();
  }
  auto own = [](py::handle h) { return h.inc_ref().ptr(); };
  S.rec = own(rec);
  S.counts = own(counts);
  S.seq = own(seq);
  S.stack = own(stack);
  S.planner = own(planner);
  S.handler = own(handler);
  S.classify = own(classify);
  S.branch_at = own(branch_at_fn);
  S.unattributed = own(unattributed);
  S.tick = own(tick_fn);
  S.redispatch = own(redispatch);
  S.optimizer_module = own(py::none());
  S.optimizer_depth = 0;
  S.split_host = split_host;
  S.shapes = shapes;
  S.total = rec.attr("total").cast<int64_t>();
  S.noise = 0;
  S.limit = limit;
  S.on = true;
  c10::impl::tls_set_dispatch_key_included(kKey, true);
}

py::tuple stop() {
  c10::impl::tls_set_dispatch_key_included(kKey, false);
  py::tuple out = py::make_tuple(S.total, S.noise);
  clear_state();
  return out;
}

void set_optimizer(int depth, py::object module) {
  S.optimizer_depth = depth;
  Py_XDECREF(S.optimizer_module);
  S.optimizer_module = module.inc_ref().ptr();
}

// pause(True) stops counting on this thread (a choice's own ops), pause(False) resumes; returns the state before.
bool set_paused(bool paused) {
  bool before = c10::impl::tls_is_dispatch_key_excluded(kKey);
  c10::impl::tls_set_dispatch_key_excluded(kKey, paused);
  return before;
}

py::tuple where_now() {
  TORCH_CHECK(S.on, "no recording runs in C++");
  PyObject* phase;
  py::object module, loc, branch;
  where(phase, module, loc, branch);
  return py::make_tuple(py::handle(phase), module, loc, branch);
}

// recorder._signature and recorder._placement of a call made from Python (a choice's, an API's), read in C++:
// under a TorchFunctionMode (torch.device("cuda") as the default device) every tensor attribute read in Python
// goes through the mode.
std::string list_signature(PyObject* seq, bool& device, bool& host, bool& any) {
  std::set<std::string> names;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPVariable_Check(items[i])) continue;
    const at::Tensor& t = THPVariable_Unpack(items[i]);
    names.insert(dtype_name(t.scalar_type()));
    (t.is_cpu() ? host : device) = true;
    any = true;
  }
  std::string joined;
  for (const auto& nm : names) {
    if (!joined.empty()) joined += '|';
    joined += nm;
  }
  return names.empty() ? joined : joined + "[]";
}

py::tuple call_signature(py::tuple args, py::object kwargs) {
  py::list sig;
  bool device = false, host = false;
  for (auto item : args) {
    PyObject* a = item.ptr();
    if (THPVariable_Check(a)) {
      const at::Tensor& t = THPVariable_Unpack(a);
      sig.append(py::handle(dtype_object(t.scalar_type())));
      (t.is_cpu() ? host : device) = true;
    } else if ((PyList_CheckExact(a) || PyTuple_CheckExact(a)) && PySequence_Fast_GET_SIZE(a) > 0 &&
               (THPVariable_Check(PySequence_Fast_ITEMS(a)[0]) || PySequence_Fast_ITEMS(a)[0] == Py_None)) {
      bool any = false;
      std::string names = list_signature(a, device, host, any);
      if (!names.empty()) sig.append(py::str(names));
    }
  }
  if (!kwargs.is_none()) {
    for (auto item : py::reinterpret_borrow<py::dict>(kwargs)) {
      PyObject* a = item.second.ptr();
      if (THPVariable_Check(a)) {
        const at::Tensor& t = THPVariable_Unpack(a);
        sig.append(py::handle(dtype_object(t.scalar_type())));
        (t.is_cpu() ? host : device) = true;
      } else if (a != Py_None && py::str(item.first).cast<std::string>() == "device") {
        bool cpu;
        if (THPDevice_Check(a)) cpu = reinterpret_cast<THPDevice*>(a)->device.is_cpu();
        else cpu = py::module_::import("torch").attr("device")(item.second).attr("type").cast<std::string>() == "cpu";
        (cpu ? host : device) = true;
      }
    }
  }
  PyObject* where = device ? (host ? s_mixed : s_device) : s_host;
  return py::make_tuple(py::tuple(sig), py::handle(where));
}

bool active() {
  return S.on && c10::impl::tls_is_dispatch_key_included(kKey) && !c10::impl::tls_is_dispatch_key_excluded(kKey);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, Fake, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  s_forward = PyUnicode_InternFromString("forward");
  s_backward = PyUnicode_InternFromString("backward");
  s_optimizer = PyUnicode_InternFromString("optimizer");
  s_device = PyUnicode_InternFromString("device");
  s_host = PyUnicode_InternFromString("host");
  s_mixed = PyUnicode_InternFromString("mixed");
  m.def("start", &start);
  m.def("stop", &stop);
  m.def("set_optimizer", &set_optimizer);
  m.def("pause", &set_paused);
  m.def("active", &active);
  m.def("where", &where_now);
  m.def("call_signature", &call_signature);
}
