// The walk of the profiler's event tree that ``%%memtrace`` on CPU needs, in C++.
//
// The Python walk (``_cpu_record._walk_python``) pays a call into C++ and a Python wrapper per node and per
// field; here the tree is read where it lies, once.  It returns plain buffers and lists and leaves every
// decision about frames and stacks to Python (``_cpu_record._walk_compiled``), so that the two walks share
// their rules and can be compared exactly (the build's self-check does, before any kernel loads this).
//
// Built by ``nbdebug.core.memory._compiled`` with torch.utils.cpp_extension, against the headers of the torch
// that is installed: the structs read here are torch's own (torch/csrc/profiler/collection.h).

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/collection.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;
using torch::profiler::impl::EventType;
using torch::profiler::impl::ExtraFields;
using torch::profiler::impl::Result;

namespace {

template <typename T>
py::bytes as_bytes(const std::vector<T>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A name as bytes, or None where there is none (torch's own bindings give None for a null name).
py::object name_or_none(const char* s) {
  if (s == nullptr) {
    return py::none();
  }
  return py::bytes(s);
}

// One depth-first walk, in the tree's order (ties in time keep it, as in the Python walk).
//
// Per allocation leaf (in the order met): start time, address, bytes (negative for a free), 1 when on the CPU,
// and the index of the innermost inner node above it (-1: none).
// Per inner node ("link"): the index of the inner node above it, its kind (1 a Python call, 2 a call of a C
// function from Python, 0 anything else: an operator, a record_function scope), and for a call the frame that
// made it (file, line, function, as bytes: names are not always valid UTF-8) and for a Python call its own name
// ("file(first line): function", or "nn.Module: ..." for a module).
py::tuple walk(const py::object& results) {
  const auto& result = results.cast<const torch::autograd::profiler::ProfilerResult&>();
  std::vector<int64_t> t_ns, ptr, size, link_of, parent, line;
  std::vector<int8_t> on_cpu, kind;
  py::list files, functions, names;

  struct Level {
    const std::vector<std::shared_ptr<Result>>* nodes;
    size_t next;
    int64_t link;
  };
  std::vector<Level> pending{{&result.event_tree(), 0, -1}};
  while (!pending.empty()) {
    Level& level = pending.back();
    if (level.next >= level.nodes->size()) {
      pending.pop_back();
      continue;
    }
    const std::shared_ptr<Result>& node = (*level.nodes)[level.next++];
    if (!node) {
      continue;
    }
    const int64_t above = level.link;
    if (!node->children_.empty()) {
      const auto me = static_cast<int64_t>(parent.size());
      parent.push_back(above);
      int8_t k = 0;
      const torch::profiler::impl::PyFrameState* caller = nullptr;
      if (const auto* call = std::get_if<ExtraFields<EventType::PyCall>>(&node->extra_fields_)) {
        k = 1;
        caller = &call->caller_;
      } else if (const auto* ccall = std::get_if<ExtraFields<EventType::PyCCall>>(&node->extra_fields_)) {
        k = 2;
        caller = &ccall->caller_;
      }
      kind.push_back(k);
      if (caller != nullptr) {
        line.push_back(caller->line_no_);
        files.append(name_or_none(caller->filename_.str()));
        functions.append(name_or_none(caller->funcname_.str()));
      } else {
        line.push_back(0);
        files.append(py::none());
        functions.append(py::none());
      }
      if (k == 1) {
        names.append(py::bytes(node->name()));
      } else {
        names.append(py::none());
      }
      // `level` may move when `pending` grows: nothing of it is used after this push
      pending.push_back({&node->children_, 0, me});
      continue;
    }
    if (const auto* alloc = std::get_if<ExtraFields<EventType::Allocation>>(&node->extra_fields_)) {
      t_ns.push_back(node->start_time_ns_);
      ptr.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(alloc->ptr_)));
      size.push_back(alloc->alloc_size_);
      on_cpu.push_back(alloc->device_type_ == c10::DeviceType::CPU ? 1 : 0);
      link_of.push_back(above);
    }
  }
  return py::make_tuple(as_bytes(t_ns), as_bytes(ptr), as_bytes(size), as_bytes(on_cpu), as_bytes(link_of),
                        as_bytes(parent), as_bytes(kind), as_bytes(line), files, functions, names);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "nbdebug: the profiler event-tree walk of memtrace on CPU";
  m.def("walk", &walk, "the allocations and the inner nodes above them, of a profiler result");
}
