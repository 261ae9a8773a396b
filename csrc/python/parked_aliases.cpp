#include "python/parked_aliases.h"

#include "aten/alias.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

namespace torch_fl::python {
namespace {

#ifndef Py_GIL_DISABLED
constexpr uint8_t kParkedCapacity = 8;

// Guarded by the GIL. Plain data: its objects outlive the interpreter's finalisation, which
// would have to run to free them (each is an empty alias, no memory).
struct Parked {
  PyObject* objects[kParkedCapacity];
  uint8_t size;
};
Parked parked{};

// True when the kernel left no trace on the object's Python side.
bool untouched(PyObject* object) {
  PyTypeObject* type = Py_TYPE(object);
  if (Py_REFCNT(object) != 1 || type != reinterpret_cast<PyTypeObject*>(THPVariableClass)) {
    return false;
  }
  auto* variable = reinterpret_cast<THPVariable*>(object);
  if (variable->backward_hooks != nullptr || variable->post_accumulate_grad_hooks != nullptr) {
    return false;
  }
  if (type->tp_weaklistoffset != 0 &&
      *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(object) + type->tp_weaklistoffset) !=
          nullptr) {
    return false;
  }
  // The instance dictionary (made once per object, then read): attributes must not carry over.
  PyObject* dict = PyObject_GenericGetDict(object, nullptr);
  if (dict == nullptr) {
    PyErr_Clear(); // this type has none
    return true;
  }
  const bool empty = PyDict_GET_SIZE(dict) == 0;
  Py_DECREF(dict);
  return empty;
}
#endif

} // namespace

pybind11::object alias_object(const at::Tensor& flagos) {
#ifndef Py_GIL_DISABLED
  while (parked.size != 0) {
    auto object = pybind11::reinterpret_steal<pybind11::object>(parked.objects[--parked.size]);
    if (repoint_native_alias(THPVariable_Unpack(object.ptr()), flagos)) {
      return object;
    }
    // Another native device or inference mode: freed here, a fresh one made below.
  }
#endif
  PyObject* fresh = THPVariable_Wrap(native_alias(flagos));
  if (fresh == nullptr) {
    throw pybind11::error_already_set();
  }
  return pybind11::reinterpret_steal<pybind11::object>(fresh);
}

void park_alias_object(pybind11::object&& object) noexcept {
#ifndef Py_GIL_DISABLED
  PyObject* raw = object.ptr();
  if (parked.size == kParkedCapacity || !untouched(raw) ||
      !empty_alias_for_reuse(THPVariable_Unpack(raw), raw)) {
    return; // `object` frees it as usual
  }
  parked.objects[parked.size++] = object.release().ptr();
#else
  (void)object;
#endif
}

} // namespace torch_fl::python
