/*
 * kiln's launcher: loads a cubin and launches it with cuLaunchKernel, nothing else.
 *
 * Built with the package (setup.py: the module triton_kiln.launch._kiln_launch in the wheel) or,
 * where an install has no usable prebuilt module, on first use by triton_kiln/launch/native.py
 * with the system C compiler (as Triton builds its own launcher), cached by the hash of this file.
 * Both builds define LAUNCHER_SOURCE_SHA256 (the sha256 of this file), exported as SOURCE_SHA256, so
 * kiln never uses a module built from another version of this source. It needs no CUDA headers or
 * libraries at build time: the few driver types are declared below and libcuda.so.1 is opened
 * with dlopen on first use, so the module imports (and call_key works) on machines without a GPU.
 *
 *   call_key(args, flags) -> tuple          what the binary depends on, for the launch cache
 *   Launcher(binary, name, kinds, block_x, shared, n_extra, device=-1, scratch=None, allocators=None)
 *   Launcher.launch(grid, stream, args)     pack the arguments, cuLaunchKernel on `stream`
 *   Launcher.n_params / .n_regs / .n_spills / .scratch
 *
 *     Triton's scratch buffers (the first two of the n_extra trailing parameters: global, then
 *     profile scratch) are NULL unless `scratch` gives a per-program size above 0
 *     (((size, align), (size, align))); then every launch does what Triton's launcher does:
 *     allocator = allocators[i] (a contextvars.ContextVar is read in the calling thread's
 *     context, anything else is the allocator itself); buffer = allocator(grid_x * grid_y *
 *     grid_z * size, align, stream); the parameter is buffer.data_ptr() (an int as it is,
 *     None: NULL); the buffer is released once the launch is queued.
 *   Dispatcher(tables, flags_by_len, owner, fallback, normalize=None)
 *   Dispatcher.bind(grid) -> BoundCall      `kernel[grid]`; calling it is the whole fast path:
 *
 *     BoundCall(*args, **kwargs)
 *                        positional, and tables has entries of len(args)?  keyed as it is
 *                        else, normalize set?  args = normalize(*args, **kwargs): every parameter
 *                                              in order (a Python function with the kernel's
 *                                              signature, called by vectorcall); TypeError ->
 *                                              fallback(grid, args, kwargs)
 *                        else keywords?        -> fallback(grid, args, kwargs)
 *                        key = call key of args (C, keeps each tensor's data_ptr)
 *                        entry = tables[len(args)][key]       miss -> fallback(grid, args, kwargs)
 *                                                             (the caller's own args and kwargs)
 *                        (native, tail, config, result, get_stream, get_device, names, meta_extra)
 *                            = entry.fast
 *                        owner.best_config = config
 *                        grid callable?  grid = grid({names: args + tail} | meta_extra)
 *                        native?         launch args + tail on get_stream(get_device())
 *                        else            entry.launch(grid, args) (Python: Triton's launcher)
 *                        return result
 *
 * The section "benchmark sandbox" at the end adds what kiln's torch-free benchmark sandbox
 * needs: device memory, copies, CUDA IPC and a do_bench-like timing loop (see there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef LAUNCHER_SOURCE_SHA256
#define LAUNCHER_SOURCE_SHA256 "" /* built without it: kiln cannot tell which source, and does not use it */
#endif
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES 3
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_CACHE_PREFER_SHARED 1
#define CU_POINTER_ATTRIBUTE_DEVICE_POINTER 3

#define MAX_ARGS 256
#define N_SCRATCH 2 /* Triton's trailing scratch parameters: global, profile */

/* CUipcMemHandle: passed by value to cuIpcOpenMemHandle. */
struct sb_ipc_handle {
  char reserved[64];
};
#define MAX_CONTEXTS 16

static struct {
  int loaded;
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncGetAttribute)(int *, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncSetCacheConfig)(CUfunction, int);
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *); /* CUDA >= 12.4 */
  CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuDriverGetVersion)(int *);
  /* Optional (dlsym without failing; NULL = missing): the benchmark sandbox's memory, copies,
   * IPC and events (see the section "benchmark sandbox" at the end of this file). */
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*cuIpcGetMemHandle)(void *, CUdeviceptr); /* CUipcMemHandle *: 64 bytes */
  CUresult (*cuIpcOpenMemHandle_v2)(CUdeviceptr *, struct sb_ipc_handle, unsigned int);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuCtxPushCurrent_v2)(CUcontext);
  CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
  CUresult (*cuEventCreate)(void **, unsigned int);
  CUresult (*cuEventRecord)(void *, CUstream);
  CUresult (*cuEventSynchronize)(void *);
  CUresult (*cuEventElapsedTime)(float *, void *, void *);
  CUresult (*cuEventDestroy_v2)(void *);
} cu;

static PyObject *str_data_ptr = NULL;
static PyObject *str_dtype = NULL;
static PyObject *str_base = NULL;
static PyObject *str_block_shape = NULL;
static PyObject *str_padding = NULL;

static int load_driver(void) {
  if (cu.loaded) return 0;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    PyErr_Format(PyExc_RuntimeError,
                 "kiln's launcher could not open libcuda.so.1 (%s): no NVIDIA driver on this machine?",
                 dlerror());
    return -1;
  }
#define SYM(name)                                                                             \
  do {                                                                                        \
    *(void **)(&cu.name) = dlsym(lib, #name);                                                 \
    if (!cu.name) {                                                                           \
      PyErr_Format(PyExc_RuntimeError, "libcuda.so.1 has no symbol %s (driver too old?)", #name); \
      return -1;                                                                              \
    }                                                                                         \
  } while (0)
  SYM(cuInit);
  SYM(cuCtxGetCurrent);
  SYM(cuCtxSetCurrent);
  SYM(cuCtxGetDevice);
  SYM(cuDeviceGet);
  SYM(cuDevicePrimaryCtxRetain);
  SYM(cuDeviceGetAttribute);
  SYM(cuModuleLoadData);
  SYM(cuModuleGetFunction);
  SYM(cuFuncGetAttribute);
  SYM(cuFuncSetAttribute);
  SYM(cuFuncSetCacheConfig);
  SYM(cuPointerGetAttribute);
  SYM(cuLaunchKernel);
  SYM(cuGetErrorString);
  SYM(cuDriverGetVersion);
#undef SYM
  *(void **)(&cu.cuFuncGetParamInfo) = dlsym(lib, "cuFuncGetParamInfo");
#define OPTIONAL_SYM(name) *(void **)(&cu.name) = dlsym(lib, #name)
  OPTIONAL_SYM(cuMemAlloc_v2);
  OPTIONAL_SYM(cuMemFree_v2);
  OPTIONAL_SYM(cuMemcpyDtoD_v2);
  OPTIONAL_SYM(cuMemcpyHtoD_v2);
  OPTIONAL_SYM(cuMemcpyDtoH_v2);
  OPTIONAL_SYM(cuMemcpyDtoDAsync_v2);
  OPTIONAL_SYM(cuMemsetD8_v2);
  OPTIONAL_SYM(cuMemsetD8Async);
  OPTIONAL_SYM(cuMemGetAddressRange_v2);
  OPTIONAL_SYM(cuIpcGetMemHandle);
  OPTIONAL_SYM(cuIpcOpenMemHandle_v2);
  OPTIONAL_SYM(cuIpcCloseMemHandle);
  OPTIONAL_SYM(cuCtxSynchronize);
  OPTIONAL_SYM(cuCtxPushCurrent_v2);
  OPTIONAL_SYM(cuCtxPopCurrent_v2);
  OPTIONAL_SYM(cuEventCreate);
  OPTIONAL_SYM(cuEventRecord);
  OPTIONAL_SYM(cuEventSynchronize);
  OPTIONAL_SYM(cuEventElapsedTime);
  OPTIONAL_SYM(cuEventDestroy_v2);
#undef OPTIONAL_SYM
  cu.loaded = 1;
  return 0;
}

static int check(CUresult status, const char *what) {
  if (status == CUDA_SUCCESS) return 0;
  const char *text = NULL;
  if (cu.cuGetErrorString) cu.cuGetErrorString(status, &text);
  PyErr_Format(PyExc_RuntimeError, "CUDA driver error %d (%s) in %s", status, text ? text : "unknown", what);
  return -1;
}

/* ------------------------------------------------------------------------------ call_key */

/* Codes kept in sync with kiln/launch/callkey.py (see there for what each means). */
#define CODE_ONE 1
#define CODE_BOOL 2
#define CODE_FLOAT 3
#define CODE_INT 16    /* + 2 * range (0: i32, 1: i64, 2: u64) + divisible-by-16 */
#define CODE_PTR 100   /* + aligned-to-16 */

static int append(PyObject **items, Py_ssize_t *n, PyObject *value) {
  if (*n >= 2 * MAX_ARGS + 8) {
    Py_DECREF(value);
    PyErr_SetString(PyExc_ValueError, "too many kernel arguments for kiln's launcher");
    return -1;
  }
  items[(*n)++] = value;
  return 0;
}

static int int_code(PyObject *obj, int specialize, int align, long *code) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (v == -1 && PyErr_Occurred()) return -1;
  int range, divisible;
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(obj);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    range = 2;
    divisible = (u % 16) == 0;
  } else if (overflow < 0) {
    PyErr_SetString(PyExc_OverflowError, "integer argument below -2**63");
    return -1;
  } else {
    if (specialize && v == 1) {
      *code = CODE_ONE;
      return 0;
    }
    range = (v >= INT32_MIN && v <= INT32_MAX) ? 0 : 1;
    divisible = (v % 16) == 0;
  }
  *code = CODE_INT + 2 * range + (specialize && align ? divisible : 0);
  return 0;
}

/* A host TensorDescriptor's part of a call key: (its type, the base tensor's dtype, the block
 * shape, the padding), what Triton's specialization (`tensordesc<fp16[64, 64]>`) depends on.
 * Anything else raises AttributeError (the full path decides). */
static PyObject *descriptor_key(PyObject *obj) {
  PyObject *block = PyObject_GetAttr(obj, str_block_shape);
  if (!block) return NULL;
  PyObject *shape = PySequence_Tuple(block);
  Py_DECREF(block);
  if (!shape) return NULL;
  PyObject *base = PyObject_GetAttr(obj, str_base);
  if (!base) {
    Py_DECREF(shape);
    return NULL;
  }
  PyObject *dtype = PyObject_GetAttr(base, str_dtype);
  Py_DECREF(base);
  if (!dtype) {
    Py_DECREF(shape);
    return NULL;
  }
  PyObject *padding = PyObject_GetAttr(obj, str_padding);
  if (!padding) {
    PyErr_Clear();
    padding = Py_None;
    Py_INCREF(padding);
  }
  PyObject *key = PyTuple_Pack(4, (PyObject *)Py_TYPE(obj), dtype, shape, padding);
  Py_DECREF(dtype);
  Py_DECREF(shape);
  Py_DECREF(padding);
  return key;
}

/* The call key of items[0..n) under `flags`; for each tensor argument i, its data_ptr() goes to
 * ptrs[i] and has_ptr[i] is set (both may be NULL). */
static PyObject *make_key(PyObject *const *items, Py_ssize_t n, const char *flags, uint64_t *ptrs, char *has_ptr) {
  PyObject *key_items[2 * MAX_ARGS + 8];
  Py_ssize_t count = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *obj = items[i];
    char flag = flags[i];
    if (has_ptr) has_ptr[i] = 0;
    if (flag == 'c') {
      Py_INCREF(obj);
      if (append(key_items, &count, obj)) goto fail;
      continue;
    }
    if (flag == 'k') {
      Py_INCREF(obj);
      if (append(key_items, &count, obj)) goto fail;
    }
    int specialize = flag != 'n';
    long code;
    if (obj == Py_None) {
      Py_INCREF(Py_None);
      if (append(key_items, &count, Py_None)) goto fail;
    } else if (PyBool_Check(obj)) {
      if (append(key_items, &count, PyLong_FromLong(CODE_BOOL))) goto fail;
    } else if (PyLong_Check(obj)) {
      if (int_code(obj, specialize, flag != 'a', &code)) goto fail;
      if (append(key_items, &count, PyLong_FromLong(code))) goto fail;
    } else if (PyFloat_Check(obj)) {
      if (append(key_items, &count, PyLong_FromLong(CODE_FLOAT))) goto fail;
    } else {
      PyObject *dtype = PyObject_GetAttr(obj, str_dtype);
      if (!dtype && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        /* not a tensor: a host TensorDescriptor is keyed by what Triton specializes it on */
        PyErr_Clear();
        PyObject *desc = descriptor_key(obj);
        if (!desc) goto fail;
        if (append(key_items, &count, desc)) goto fail;
        continue;
      }
      if (!dtype) goto fail;
      PyObject *ptr = PyObject_CallMethodNoArgs(obj, str_data_ptr);
      if (!ptr) {
        Py_DECREF(dtype);
        goto fail;
      }
      unsigned long long p = PyLong_AsUnsignedLongLongMask(ptr);
      Py_DECREF(ptr);
      if (PyErr_Occurred()) {
        Py_DECREF(dtype);
        goto fail;
      }
      if (ptrs) {
        ptrs[i] = p;
        has_ptr[i] = 1;
      }
      if (append(key_items, &count, dtype)) goto fail;
      int aligned = (flag == 's' || flag == 'k') && (p % 16) == 0;
      if (append(key_items, &count, PyLong_FromLong(CODE_PTR + aligned))) goto fail;
    }
    if (key_items[count - 1] == NULL) goto fail; /* PyLong_FromLong failed */
  }
  PyObject *key = PyTuple_New(count);
  if (!key) goto fail;
  for (Py_ssize_t j = 0; j < count; j++) PyTuple_SET_ITEM(key, j, key_items[j]);
  return key;
fail:
  for (Py_ssize_t j = 0; j < count; j++) Py_XDECREF(key_items[j]);
  return NULL;
}

/* flags: one byte per argument: 'c' constexpr (the value itself), 's' specialized,
 * 'n' not specialized (do_not_specialize), 'k' a tuning-key argument (its value, then as 's'),
 * 'a' specialized but not on alignment (do_not_specialize_on_alignment). */
static PyObject *call_key(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
  if (argc != 2 || !PyTuple_Check(argv[0]) || !PyBytes_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "call_key(args: tuple, flags: bytes)");
    return NULL;
  }
  PyObject *args = argv[0];
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n != PyBytes_GET_SIZE(argv[1]) || n > MAX_ARGS) {
    PyErr_Format(PyExc_TypeError, "call_key: %zd arguments for %zd flags", n, PyBytes_GET_SIZE(argv[1]));
    return NULL;
  }
  return make_key(&PyTuple_GET_ITEM(args, 0), n, PyBytes_AS_STRING(argv[1]), NULL, NULL);
}

/* ------------------------------------------------------------------------------ Launcher */

typedef struct {
  PyObject_HEAD
  PyObject *binary; /* bytes: the cubin, kept to load it into other contexts (devices) */
  PyObject *name;   /* str: the entry point */
  char kinds[MAX_ARGS + 1];
  Py_ssize_t n_args;
  int n_extra;      /* trailing pointer parameters (Triton's scratch buffers; NULL unless asked for) */
  unsigned long long scratch_size[N_SCRATCH];  /* bytes per program; 0: the parameter is NULL */
  unsigned long long scratch_align[N_SCRATCH];
  PyObject *allocators[N_SCRATCH];   /* ContextVar holding the allocator, or the allocator; NULL: none */
  uint64_t scratch_in[N_SCRATCH], scratch_out[N_SCRATCH]; /* last checked data_ptr -> device pointer */
  int block_x;
  int shared;
  int n_params;     /* as the driver reports it (-1: cuFuncGetParamInfo missing) */
  int n_regs, n_spills;
  int n_contexts;
  CUcontext contexts[MAX_CONTEXTS];
  CUfunction functions[MAX_CONTEXTS];
  /* The last pointer that passed the GPU-memory check for each argument, and what the driver
   * mapped it to: torch's caching allocator hands out the same addresses again and again, so
   * most launches skip cuPointerGetAttribute. */
  uint64_t checked_in[MAX_ARGS];
  uint64_t checked_out[MAX_ARGS];
} Launcher;

static int kind_size(char kind) {
  switch (kind) {
    case 'P': case 'l': case 'L': case 'd': return 8;
    case 'i': case 'I': case 'f': return 4;
    case 'h': case 'H': case 'e': case 'B': return 2;
    case 'b': case 'c': return 1;
    case 'C': return 0;
    default: return -1;
  }
}

static int count_params(CUfunction fn) {
  if (!cu.cuFuncGetParamInfo) return -1;
  size_t offset, size;
  int i = 0;
  while (i < 4 * MAX_ARGS && cu.cuFuncGetParamInfo(fn, (size_t)i, &offset, &size) == CUDA_SUCCESS) i++;
  return i;
}

/* Load the module into the current context (making the primary context of `device` current
 * when there is none), once per context. Returns NULL with an exception set on error. */
static CUfunction function_for_context(Launcher *self, int device) {
  CUcontext ctx = NULL;
  if (check(cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent")) return NULL;
  for (int i = 0; i < self->n_contexts; i++)
    if (self->contexts[i] == ctx && ctx) return self->functions[i];
  if (!ctx) {
    CUdevice dev;
    if (check(cu.cuInit(0), "cuInit")) return NULL;
    if (check(cu.cuDeviceGet(&dev, device < 0 ? 0 : device), "cuDeviceGet")) return NULL;
    if (check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")) return NULL;
    if (check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) return NULL;
    for (int i = 0; i < self->n_contexts; i++)
      if (self->contexts[i] == ctx) return self->functions[i];
  }
  if (self->n_contexts >= MAX_CONTEXTS) {
    PyErr_SetString(PyExc_RuntimeError, "kiln launcher: kernel loaded into too many CUDA contexts");
    return NULL;
  }
  CUdevice dev;
  if (check(cu.cuCtxGetDevice(&dev), "cuCtxGetDevice")) return NULL;
  CUmodule mod;
  CUfunction fn;
  const char *name = PyUnicode_AsUTF8(self->name);
  if (!name) return NULL;
  if (check(cu.cuModuleLoadData(&mod, PyBytes_AS_STRING(self->binary)), "cuModuleLoadData")) return NULL;
  if (check(cu.cuModuleGetFunction(&fn, mod, name), "cuModuleGetFunction")) return NULL;
  if (check(cu.cuFuncGetAttribute(&self->n_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute"))
    return NULL;
  int local = 0;
  if (check(cu.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn), "cuFuncGetAttribute"))
    return NULL;
  self->n_spills = local / 4;
  int optin = 0;
  if (check(cu.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
            "cuDeviceGetAttribute"))
    return NULL;
  if (self->shared > 49152) {
    if (optin < self->shared) {
      PyErr_Format(PyExc_RuntimeError,
                   "kernel %s needs %d bytes of shared memory; this device allows %d per block",
                   name, self->shared, optin);
      return NULL;
    }
    int shared_static = 0;
    if (check(cu.cuFuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig")) return NULL;
    if (check(cu.cuFuncGetAttribute(&shared_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
              "cuFuncGetAttribute"))
      return NULL;
    if (check(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - shared_static),
              "cuFuncSetAttribute"))
      return NULL;
  }
  self->n_params = count_params(fn);
  self->contexts[self->n_contexts] = ctx;
  self->functions[self->n_contexts] = fn;
  self->n_contexts++;
  return fn;
}

/* scratch: None or ((size, align), (size, align)); allocators: None or a 2-tuple (items may be None). */
static int parse_scratch(Launcher *self, PyObject *scratch, PyObject *allocators) {
  for (int e = 0; e < N_SCRATCH; e++) {
    self->scratch_size[e] = 0;
    self->scratch_align[e] = 1;
    self->scratch_in[e] = self->scratch_out[e] = 0;
    Py_CLEAR(self->allocators[e]);
  }
  if (scratch != Py_None) {
    if (!PyTuple_Check(scratch) || PyTuple_GET_SIZE(scratch) != N_SCRATCH) {
      PyErr_SetString(PyExc_TypeError, "scratch must be ((size, align), (size, align)) or None");
      return -1;
    }
    for (int e = 0; e < N_SCRATCH; e++) {
      PyObject *pair = PyTuple_GET_ITEM(scratch, e);
      if (!PyArg_ParseTuple(pair, "KK", &self->scratch_size[e], &self->scratch_align[e])) return -1;
      if (self->scratch_align[e] < 1) {
        PyErr_SetString(PyExc_ValueError, "a scratch alignment must be at least 1");
        return -1;
      }
      if (self->scratch_size[e] && e >= self->n_extra) {
        PyErr_Format(PyExc_ValueError, "scratch parameter %d is asked for but the kernel has %d extra parameters", e,
                     self->n_extra);
        return -1;
      }
    }
  }
  if (allocators != Py_None) {
    if (!PyTuple_Check(allocators) || PyTuple_GET_SIZE(allocators) != N_SCRATCH) {
      PyErr_SetString(PyExc_TypeError, "allocators must be a 2-tuple (global, profile) or None");
      return -1;
    }
    for (int e = 0; e < N_SCRATCH; e++) {
      PyObject *source = PyTuple_GET_ITEM(allocators, e);
      if (source == Py_None) continue;
      if (!PyContextVar_CheckExact(source) && !PyCallable_Check(source)) {
        PyErr_SetString(PyExc_TypeError, "an allocator must be callable or a contextvars.ContextVar holding one");
        return -1;
      }
      Py_INCREF(source);
      self->allocators[e] = source;
    }
  }
  return 0;
}

static int Launcher_init(Launcher *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"binary", "name", "kinds", "block_x", "shared", "n_extra", "device", "scratch",
                           "allocators", NULL};
  PyObject *binary, *name, *scratch = Py_None, *allocators = Py_None;
  const char *kinds;
  int device = -1;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "SUsiii|iOO", kwlist, &binary, &name, &kinds, &self->block_x,
                                   &self->shared, &self->n_extra, &device, &scratch, &allocators))
    return -1;
  Py_ssize_t n = (Py_ssize_t)strlen(kinds);
  if (n > MAX_ARGS || self->n_extra < 0 || self->n_extra > 8) {
    PyErr_Format(PyExc_ValueError, "kiln launcher supports %d arguments and 8 extra parameters", MAX_ARGS);
    return -1;
  }
  if (parse_scratch(self, scratch, allocators)) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (kind_size(kinds[i]) < 0) {
      PyErr_Format(PyExc_ValueError, "unknown argument kind %c at %zd", kinds[i], i);
      return -1;
    }
  }
  memcpy(self->kinds, kinds, (size_t)n + 1);
  self->n_args = n;
  Py_INCREF(binary);
  Py_XSETREF(self->binary, binary);
  Py_INCREF(name);
  Py_XSETREF(self->name, name);
  self->n_contexts = 0;
  self->n_params = -1;
  if (load_driver()) return -1;
  if (!function_for_context(self, device)) return -1;
  return 0;
}

static void Launcher_dealloc(Launcher *self) {
  Py_XDECREF(self->binary);
  Py_XDECREF(self->name);
  for (int e = 0; e < N_SCRATCH; e++) Py_XDECREF(self->allocators[e]);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A device pointer for argument i: the int itself, NULL for None, or the tensor's data_ptr()
 * (`known` when the caller already read it), checked to be memory the GPU can reach. */
static int device_pointer(Launcher *self, Py_ssize_t i, PyObject *obj, const uint64_t *known, uint64_t *out) {
  uint64_t ptr = 0;
  if (obj == Py_None) {
    *out = 0;
    return 0;
  }
  if (PyLong_Check(obj)) {
    ptr = PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred()) return -1;
    *out = ptr;
    return 0;
  }
  if (known) {
    ptr = *known;
  } else {
    PyObject *ret = PyObject_CallMethodNoArgs(obj, str_data_ptr);
    if (!ret) return -1;
    ptr = PyLong_AsUnsignedLongLong(ret);
    Py_DECREF(ret);
    if (PyErr_Occurred()) return -1;
  }
  if (!ptr) {
    *out = 0;
    return 0;
  }
  if (ptr == self->checked_in[i]) {
    *out = self->checked_out[i];
    return 0;
  }
  uint64_t dev_ptr = 0;
  CUresult status = cu.cuPointerGetAttribute(&dev_ptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr);
  if (status == CUDA_ERROR_INVALID_VALUE) {
    PyErr_Format(PyExc_ValueError, "argument %zd is not GPU memory the kernel can reach (a CPU tensor?)", i);
    return -1;
  }
  if (check(status, "cuPointerGetAttribute")) return -1;
  self->checked_in[i] = ptr;
  self->checked_out[i] = dev_ptr;
  *out = dev_ptr;
  return 0;
}

/* Pack items[0..n_args) (every argument, constexprs included) into the driver's parameter
 * array. ptrs/has_ptr (may be NULL): data_ptr() values the caller already read. */
static int pack(Launcher *self, PyObject *const *items, const uint64_t *ptrs, const char *has_ptr,
                const uint64_t *scratch, uint64_t *slots, void **params, int *n_params) {
  int p = 0;
  for (Py_ssize_t i = 0; i < self->n_args; i++) {
    char kind = self->kinds[i];
    if (kind == 'C') continue;
    PyObject *obj = items[i];
    uint64_t *slot = &slots[p];
    *slot = 0;
    if (kind == 'P') {
      if (device_pointer(self, i, obj, (has_ptr && has_ptr[i]) ? &ptrs[i] : NULL, slot)) return -1;
    } else if (kind == 'f' || kind == 'd' || kind == 'e' || kind == 'B') {
      double v = PyFloat_AsDouble(obj);
      if (v == -1.0 && PyErr_Occurred()) return -1;
      if (kind == 'd') {
        memcpy(slot, &v, 8);
      } else if (kind == 'f') {
        float f = (float)v;
        memcpy(slot, &f, 4);
      } else if (kind == 'e') {
        uint16_t h;
#if PY_VERSION_HEX < 0x030B0000
        if (_PyFloat_Pack2(v, (unsigned char *)&h, 1)) return -1;
#else
        if (PyFloat_Pack2(v, (char *)&h, 1)) return -1;
#endif
        memcpy(slot, &h, 2);
      } else {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t b = (uint16_t)(u >> 16);
        memcpy(slot, &b, 2);
      }
    } else {
      /* integers of every width: two's complement, little endian, the low bytes */
      uint64_t u;
      if (PyBool_Check(obj)) {
        u = obj == Py_True;
      } else {
        u = PyLong_AsUnsignedLongLongMask(obj);
        if (u == (uint64_t)-1 && PyErr_Occurred()) return -1;
      }
      *slot = u;
    }
    params[p] = slot;
    p++;
  }
  for (int e = 0; e < self->n_extra; e++) {
    slots[p] = e < N_SCRATCH ? scratch[e] : 0;
    params[p] = &slots[p];
    p++;
  }
  *n_params = p;
  return 0;
}

static const char *const scratch_names[N_SCRATCH] = {"global", "profile"};

static void release_scratch(PyObject **buffers) {
  for (int e = 0; e < N_SCRATCH; e++) Py_CLEAR(buffers[e]);
}

/* The device pointer of an allocator's buffer: None -> NULL, an int as it is, else data_ptr(),
 * checked to be memory the GPU can reach (as Triton's launcher checks it). */
static int scratch_pointer(Launcher *self, int e, PyObject *buffer, uint64_t *out) {
  *out = 0;
  if (buffer == Py_None) return 0;
  if (PyLong_Check(buffer)) {
    *out = PyLong_AsUnsignedLongLong(buffer);
    return PyErr_Occurred() ? -1 : 0;
  }
  PyObject *ret = PyObject_CallMethodNoArgs(buffer, str_data_ptr);
  if (!ret) return -1;
  uint64_t ptr = PyLong_AsUnsignedLongLong(ret);
  Py_DECREF(ret);
  if (PyErr_Occurred()) return -1;
  if (!ptr) return 0;
  if (ptr == self->scratch_in[e]) {
    *out = self->scratch_out[e];
    return 0;
  }
  uint64_t dev_ptr = 0;
  CUresult status = cu.cuPointerGetAttribute(&dev_ptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr);
  if (status == CUDA_ERROR_INVALID_VALUE) {
    PyErr_Format(PyExc_ValueError, "the %s scratch buffer the allocator returned for %U is not GPU memory",
                 scratch_names[e], self->name);
    return -1;
  }
  if (check(status, "cuPointerGetAttribute")) return -1;
  self->scratch_in[e] = ptr;
  self->scratch_out[e] = dev_ptr;
  *out = dev_ptr;
  return 0;
}

/* Triton's runtime allocation for one launch over grid g (its CudaLauncher.__call__): for each
 * scratch parameter with a size, allocator(size * g0 * g1 * g2, align, stream). New references
 * in buffers[] (release_scratch after the launch is queued), pointers in ptrs[]. */
static int allocate_scratch(Launcher *self, const long *g, uint64_t stream, PyObject **buffers, uint64_t *ptrs) {
  for (int e = 0; e < N_SCRATCH; e++) {
    buffers[e] = NULL;
    ptrs[e] = 0;
  }
  for (int e = 0; e < N_SCRATCH; e++) {
    if (!self->scratch_size[e]) continue;
    unsigned long long total = self->scratch_size[e];
    for (int d = 0; d < 3; d++) {
      if (__builtin_mul_overflow(total, (unsigned long long)g[d], &total)) {
        PyErr_Format(PyExc_OverflowError, "the %s scratch of %U for this grid exceeds 2**64 bytes", scratch_names[e],
                     self->name);
        goto fail;
      }
    }
    PyObject *source = self->allocators[e];
    if (!source) {
      PyErr_Format(PyExc_RuntimeError,
                   "Kernel %U requires a runtime memory allocation (%s scratch), but no allocator was set: "
                   "Triton cannot be imported in this process, so triton.set_allocator cannot have been called",
                   self->name, scratch_names[e]);
      goto fail;
    }
    PyObject *allocator = NULL;
    if (PyContextVar_CheckExact(source)) {
      if (PyContextVar_Get(source, NULL, &allocator) < 0) goto fail;
      if (!allocator) {
        PyErr_Format(PyExc_RuntimeError, "Kernel %U requires a runtime memory allocation, but no allocator was set",
                     self->name);
        goto fail;
      }
    } else {
      Py_INCREF(source);
      allocator = source;
    }
    buffers[e] = PyObject_CallFunction(allocator, "KKK", total, self->scratch_align[e], (unsigned long long)stream);
    Py_DECREF(allocator);
    if (!buffers[e]) goto fail;
    if (scratch_pointer(self, e, buffers[e], &ptrs[e])) goto fail;
  }
  return 0;
fail:
  release_scratch(buffers);
  return -1;
}

/* Launch with every argument in items[0..n); 0 on success, -1 with an exception set. */
static int launch_items(Launcher *self, PyObject *grid, uint64_t stream, PyObject *const *items, Py_ssize_t n,
                        const uint64_t *ptrs, const char *has_ptr) {
  Py_ssize_t gn = PyTuple_GET_SIZE(grid);
  if (gn < 1 || gn > 3) {
    PyErr_Format(PyExc_ValueError, "the grid must have 1 to 3 dimensions, got %zd", gn);
    return -1;
  }
  long g[3] = {1, 1, 1};
  for (Py_ssize_t i = 0; i < gn; i++) {
    g[i] = PyLong_AsLong(PyTuple_GET_ITEM(grid, i));
    if (g[i] == -1 && PyErr_Occurred()) return -1;
    if (g[i] < 0 || g[i] > 0x7fffffffL) {
      PyErr_Format(PyExc_ValueError, "grid dimension %zd is %ld, outside 0..2**31-1", i, g[i]);
      return -1;
    }
  }
  if (n != self->n_args) {
    PyErr_Format(PyExc_TypeError, "kernel %U takes %zd arguments, got %zd", self->name, self->n_args, n);
    return -1;
  }
  CUfunction fn = function_for_context(self, -1);
  if (!fn) return -1;
  PyObject *buffers[N_SCRATCH];
  uint64_t scratch[N_SCRATCH];
  if (allocate_scratch(self, g, stream, buffers, scratch)) return -1;
  uint64_t slots[MAX_ARGS + 8];
  void *params[MAX_ARGS + 8];
  int n_params = 0;
  int status = pack(self, items, ptrs, has_ptr, scratch, slots, params, &n_params);
  if (!status && g[0] * g[1] * g[2] != 0)
    status = check(cu.cuLaunchKernel(fn, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], (unsigned)self->block_x, 1,
                                     1, (unsigned)self->shared, (CUstream)(uintptr_t)stream, params, NULL),
                   "cuLaunchKernel");
  release_scratch(buffers);
  return status;
}

static PyObject *Launcher_launch(Launcher *self, PyObject *const *argv, Py_ssize_t argc) {
  if (argc != 3 || !PyTuple_Check(argv[0]) || !PyTuple_Check(argv[2])) {
    PyErr_SetString(PyExc_TypeError, "launch(grid: tuple, stream: int, args: tuple)");
    return NULL;
  }
  uint64_t stream = PyLong_AsUnsignedLongLongMask(argv[1]);
  if (stream == (uint64_t)-1 && PyErr_Occurred()) return NULL;
  PyObject *args = argv[2];
  if (launch_items(self, argv[0], stream, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL, NULL)) return NULL;
  Py_RETURN_NONE;
}

static PyObject *Launcher_get_n_params(Launcher *self, void *closure) { return PyLong_FromLong(self->n_params); }
static PyObject *Launcher_get_n_regs(Launcher *self, void *closure) { return PyLong_FromLong(self->n_regs); }
static PyObject *Launcher_get_n_spills(Launcher *self, void *closure) { return PyLong_FromLong(self->n_spills); }
static PyObject *Launcher_get_scratch(Launcher *self, void *closure) {
  return Py_BuildValue("((KK)(KK))", self->scratch_size[0], self->scratch_align[0], self->scratch_size[1],
                       self->scratch_align[1]);
}
static PyObject *Launcher_get_n_expected(Launcher *self, void *closure) {
  long n = self->n_extra;
  for (Py_ssize_t i = 0; i < self->n_args; i++) n += self->kinds[i] != 'C';
  return PyLong_FromLong(n);
}

static PyGetSetDef Launcher_getset[] = {
    {"n_params", (getter)Launcher_get_n_params, NULL, "parameters the driver reports (-1: unknown)", NULL},
    {"n_expected", (getter)Launcher_get_n_expected, NULL, "parameters this launcher passes", NULL},
    {"n_regs", (getter)Launcher_get_n_regs, NULL, "registers per thread", NULL},
    {"n_spills", (getter)Launcher_get_n_spills, NULL, "spilled 4-byte words per thread", NULL},
    {"scratch", (getter)Launcher_get_scratch, NULL, "((size, align), (size, align)) per program: global, profile",
     NULL},
    {NULL}};

static PyMethodDef Launcher_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))Launcher_launch, METH_FASTCALL,
     "launch(grid, stream, args): launch on `stream` (a CUstream as int)"},
    {NULL}};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_kiln_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A cubin loaded for launching: Launcher(binary, name, kinds, block_x, shared, n_extra, device=-1, "
              "scratch=None, allocators=None)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launcher_init,
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_methods = Launcher_methods,
    .tp_getset = Launcher_getset,
};

/* ---------------------------------------------------------------------------- Dispatcher */

static PyObject *str_fast = NULL;
static PyObject *str_best_config = NULL;
static PyObject *str_launch = NULL;

typedef struct {
  PyObject_HEAD
  PyObject *tables;   /* dict: len(args) -> dict(call key -> entry); shared with (and filled by) Python */
  PyObject *flags;    /* list: len(args) -> bytes, the call key's flags */
  PyObject *owner;    /* its best_config is set on every hit (the autotuner) */
  PyObject *fallback; /* fallback(grid, args, kwargs): the full path */
  PyObject *normalize; /* normalize(*args, **kwargs) -> every parameter in order, or None */
} Dispatcher;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  Dispatcher *dispatcher;
  PyObject *grid;
} BoundCall;

static PyTypeObject BoundCallType;

static int Dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg) {
  Py_VISIT(self->tables);
  Py_VISIT(self->flags);
  Py_VISIT(self->owner);
  Py_VISIT(self->fallback);
  Py_VISIT(self->normalize);
  return 0;
}

static int Dispatcher_clear(Dispatcher *self) {
  Py_CLEAR(self->tables);
  Py_CLEAR(self->flags);
  Py_CLEAR(self->owner);
  Py_CLEAR(self->fallback);
  Py_CLEAR(self->normalize);
  return 0;
}

static void Dispatcher_dealloc(Dispatcher *self) {
  PyObject_GC_UnTrack(self);
  Dispatcher_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Dispatcher_init(Dispatcher *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tables", "flags_by_len", "owner", "fallback", "normalize", NULL};
  PyObject *tables, *flags, *owner, *fallback, *normalize = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OO|O", kwlist, &PyDict_Type, &tables, &PyList_Type, &flags,
                                   &owner, &fallback, &normalize))
    return -1;
  if (!PyCallable_Check(fallback)) {
    PyErr_SetString(PyExc_TypeError, "Dispatcher: fallback must be callable");
    return -1;
  }
  if (normalize != Py_None && !PyCallable_Check(normalize)) {
    PyErr_SetString(PyExc_TypeError, "Dispatcher: normalize must be callable or None");
    return -1;
  }
  Py_ssize_t n = PyList_GET_SIZE(flags);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *f = PyList_GET_ITEM(flags, i);
    if (!PyBytes_Check(f) || PyBytes_GET_SIZE(f) != i) {
      PyErr_Format(PyExc_TypeError, "Dispatcher: flags_by_len[%zd] must be %zd bytes", i, i);
      return -1;
    }
  }
  Py_INCREF(tables);
  Py_XSETREF(self->tables, tables);
  Py_INCREF(flags);
  Py_XSETREF(self->flags, flags);
  Py_INCREF(owner);
  Py_XSETREF(self->owner, owner);
  Py_INCREF(fallback);
  Py_XSETREF(self->fallback, fallback);
  Py_INCREF(normalize);
  Py_XSETREF(self->normalize, normalize);
  return 0;
}

static PyObject *BoundCall_vectorcall(BoundCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static PyObject *Dispatcher_bind(Dispatcher *self, PyObject *grid) {
  BoundCall *bound = PyObject_GC_New(BoundCall, &BoundCallType);
  if (!bound) return NULL;
  bound->vectorcall = (vectorcallfunc)BoundCall_vectorcall;
  Py_INCREF(self);
  bound->dispatcher = self;
  Py_INCREF(grid);
  bound->grid = grid;
  PyObject_GC_Track(bound);
  return (PyObject *)bound;
}

static PyMethodDef Dispatcher_methods[] = {
    {"bind", (PyCFunction)Dispatcher_bind, METH_O, "bind(grid) -> a callable that launches with that grid"},
    {NULL}};

static PyMappingMethods Dispatcher_as_mapping = {.mp_subscript = (binaryfunc)Dispatcher_bind};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_kiln_launch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The tuned call's fast path: Dispatcher(tables, flags_by_len, owner, fallback, normalize=None)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dispatcher_init,
    .tp_dealloc = (destructor)Dispatcher_dealloc,
    .tp_traverse = (traverseproc)Dispatcher_traverse,
    .tp_clear = (inquiry)Dispatcher_clear,
    .tp_methods = Dispatcher_methods,
    .tp_as_mapping = &Dispatcher_as_mapping,
};

static int BoundCall_traverse(BoundCall *self, visitproc visit, void *arg) {
  Py_VISIT(self->dispatcher);
  Py_VISIT(self->grid);
  return 0;
}

static int BoundCall_clear(BoundCall *self) {
  Py_CLEAR(self->dispatcher);
  Py_CLEAR(self->grid);
  return 0;
}

static void BoundCall_dealloc(BoundCall *self) {
  PyObject_GC_UnTrack(self);
  BoundCall_clear(self);
  PyObject_GC_Del(self);
}

/* The full path: fallback(grid, args, kwargs). */
static PyObject *slow_call(BoundCall *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *tuple = PyTuple_New(nargs);
  if (!tuple) return NULL;
  for (Py_ssize_t i = 0; i < nargs; i++) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(tuple, i, args[i]);
  }
  PyObject *kwargs = PyDict_New();
  if (!kwargs) {
    Py_DECREF(tuple);
    return NULL;
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i])) {
      Py_DECREF(tuple);
      Py_DECREF(kwargs);
      return NULL;
    }
  }
  PyObject *result = PyObject_CallFunctionObjArgs(self->dispatcher->fallback, self->grid, tuple, kwargs, NULL);
  Py_DECREF(tuple);
  Py_DECREF(kwargs);
  return result;
}

/* The launch grid as a tuple (new reference in *out): `grid` itself, or what grid(meta) returns,
 * meta = {names[i]: items[i]} updated with meta_extra (the config's kwargs and options), as
 * Triton's autotuner builds it. */
static int grid_of(PyObject *grid, PyObject *names, PyObject *meta_extra, PyObject *const *items, Py_ssize_t n,
                   PyObject **out) {
  if (PyTuple_CheckExact(grid)) {
    Py_INCREF(grid);
    *out = grid;
    return 0;
  }
  PyObject *meta = PyDict_New();
  if (!meta) return -1;
  Py_ssize_t n_names = PyTuple_GET_SIZE(names);
  for (Py_ssize_t i = 0; i < n && i < n_names; i++) {
    if (PyDict_SetItem(meta, PyTuple_GET_ITEM(names, i), items[i])) {
      Py_DECREF(meta);
      return -1;
    }
  }
  if (PyDict_Update(meta, meta_extra)) {
    Py_DECREF(meta);
    return -1;
  }
  PyObject *value = PyObject_CallOneArg(grid, meta);
  Py_DECREF(meta);
  if (!value) return -1;
  if (PyTuple_CheckExact(value)) {
    *out = value;
    return 0;
  }
  *out = PySequence_Tuple(value);
  Py_DECREF(value);
  return *out ? 0 : -1;
}

/* The positional fast path over args[0..nargs) (already normal: one item per parameter, or a
 * positional call); a miss, or arguments the key cannot describe, go to the full path with the
 * caller's own arguments (call_args[0..call_nargs) + call_kwnames). */
static PyObject *dispatch(BoundCall *self, PyObject *const *args, Py_ssize_t nargs, PyObject *const *call_args,
                          Py_ssize_t call_nargs, PyObject *call_kwnames) {
  Dispatcher *d = self->dispatcher;
  if (nargs >= PyList_GET_SIZE(d->flags) || nargs > MAX_ARGS)
    return slow_call(self, call_args, call_nargs, call_kwnames);
  PyObject *n_obj = PyLong_FromSsize_t(nargs);
  if (!n_obj) return NULL;
  PyObject *table = PyDict_GetItemWithError(d->tables, n_obj); /* borrowed */
  Py_DECREF(n_obj);
  if (!table) return PyErr_Occurred() ? NULL : slow_call(self, call_args, call_nargs, call_kwnames);
  uint64_t ptrs[MAX_ARGS];
  char has_ptr[MAX_ARGS];
  PyObject *key = make_key(args, nargs, PyBytes_AS_STRING(PyList_GET_ITEM(d->flags, nargs)), ptrs, has_ptr);
  if (!key) {
    /* arguments the key cannot describe: the full path decides (and raises its own error) */
    if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_AttributeError) ||
        PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_ValueError)) {
      PyErr_Clear();
      return slow_call(self, call_args, call_nargs, call_kwnames);
    }
    return NULL;
  }
  PyObject *entry = PyDict_GetItemWithError(table, key); /* borrowed */
  Py_DECREF(key);
  if (!entry) return PyErr_Occurred() ? NULL : slow_call(self, call_args, call_nargs, call_kwnames);
  Py_INCREF(entry); /* the table may change while Python code runs below */
  PyObject *result = NULL;
  PyObject *grid = NULL; /* the grid as a tuple (a new reference) */
  PyObject *fast = PyObject_GetAttr(entry, str_fast);
  if (!fast) goto done;
  if (!PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 8) {
    PyErr_SetString(PyExc_TypeError, "kiln: a fast-path entry's .fast must be an 8-tuple");
    goto done;
  }
  PyObject *native = PyTuple_GET_ITEM(fast, 0);
  PyObject *tail = PyTuple_GET_ITEM(fast, 1);
  PyObject *names = PyTuple_GET_ITEM(fast, 6);
  PyObject *meta_extra = PyTuple_GET_ITEM(fast, 7);
  if (PyObject_SetAttr(d->owner, str_best_config, PyTuple_GET_ITEM(fast, 2))) goto done;
  if (native == Py_None || !PyObject_TypeCheck(native, &LauncherType) || !PyTuple_Check(tail) ||
      !PyTuple_Check(names) || !PyDict_Check(meta_extra) ||
      !(PyTuple_CheckExact(self->grid) || PyCallable_Check(self->grid))) {
    PyObject *tuple = PyTuple_New(nargs);
    if (!tuple) goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
      Py_INCREF(args[i]);
      PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    result = PyObject_CallMethodObjArgs(entry, str_launch, self->grid, tuple, NULL);
    Py_DECREF(tuple);
    goto done;
  }
  Py_ssize_t ntail = PyTuple_GET_SIZE(tail);
  if (nargs + ntail > MAX_ARGS) {
    PyErr_SetString(PyExc_ValueError, "too many kernel arguments for kiln's launcher");
    goto done;
  }
  PyObject *items[MAX_ARGS];
  for (Py_ssize_t i = 0; i < nargs; i++) items[i] = args[i];
  for (Py_ssize_t i = 0; i < ntail; i++) {
    items[nargs + i] = PyTuple_GET_ITEM(tail, i);
    has_ptr[nargs + i] = 0;
  }
  if (grid_of(self->grid, names, meta_extra, items, nargs + ntail, &grid)) goto done;
  PyObject *device = PyObject_CallNoArgs(PyTuple_GET_ITEM(fast, 5));
  if (!device) goto done;
  PyObject *stream_obj = PyObject_CallOneArg(PyTuple_GET_ITEM(fast, 4), device);
  Py_DECREF(device);
  if (!stream_obj) goto done;
  uint64_t stream = PyLong_AsUnsignedLongLongMask(stream_obj);
  Py_DECREF(stream_obj);
  if (stream == (uint64_t)-1 && PyErr_Occurred()) goto done;
  if (launch_items((Launcher *)native, grid, stream, items, nargs + ntail, ptrs, has_ptr)) goto done;
  result = PyTuple_GET_ITEM(fast, 3);
  Py_INCREF(result);
done:
  Py_XDECREF(grid);
  Py_XDECREF(fast);
  Py_DECREF(entry);
  return result;
}

static PyObject *BoundCall_vectorcall(BoundCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  Dispatcher *d = self->dispatcher;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  int has_kw = kwnames && PyTuple_GET_SIZE(kwnames);
  if (!has_kw) {
    /* positional calls keyed as they are, when entries of that length exist */
    PyObject *n_obj = PyLong_FromSsize_t(nargs);
    if (!n_obj) return NULL;
    int known = PyDict_Contains(d->tables, n_obj);
    Py_DECREF(n_obj);
    if (known < 0) return NULL;
    if (known || d->normalize == Py_None) return dispatch(self, args, nargs, args, nargs, NULL);
  } else if (d->normalize == Py_None) {
    return slow_call(self, args, nargs, kwnames);
  }
  /* keywords, or a positional call of a length with no entries: every parameter in order */
  PyObject *normal = PyObject_Vectorcall(d->normalize, args, nargs, kwnames);
  if (!normal) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
    PyErr_Clear(); /* a call it cannot normalize: the full path decides (and raises its own error) */
    return slow_call(self, args, nargs, kwnames);
  }
  if (!PyTuple_CheckExact(normal)) {
    Py_DECREF(normal);
    PyErr_SetString(PyExc_TypeError, "kiln: Dispatcher.normalize must return a tuple");
    return NULL;
  }
  PyObject *result = dispatch(self, &PyTuple_GET_ITEM(normal, 0), PyTuple_GET_SIZE(normal), args, nargs, kwnames);
  Py_DECREF(normal);
  return result;
}

static PyObject *BoundCall_get_grid(BoundCall *self, void *closure) {
  Py_INCREF(self->grid);
  return self->grid;
}

static PyGetSetDef BoundCall_getset[] = {{"grid", (getter)BoundCall_get_grid, NULL, "the grid it launches with", NULL},
                                         {NULL}};

static PyTypeObject BoundCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_kiln_launch.BoundCall",
    .tp_basicsize = sizeof(BoundCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "kernel[grid]: call it with the kernel's arguments",
    .tp_vectorcall_offset = offsetof(BoundCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)BoundCall_dealloc,
    .tp_traverse = (traverseproc)BoundCall_traverse,
    .tp_clear = (inquiry)BoundCall_clear,
    .tp_getset = BoundCall_getset,
};

/* device_info(device) -> (major, minor, driver_version): what a bundle is checked against. */
static PyObject *device_info(PyObject *self, PyObject *arg) {
  long device = PyLong_AsLong(arg);
  if (device == -1 && PyErr_Occurred()) return NULL;
  if (load_driver()) return NULL;
  CUdevice dev;
  int major = 0, minor = 0, version = 0;
  if (check(cu.cuInit(0), "cuInit")) return NULL;
  if (check(cu.cuDeviceGet(&dev, (int)device), "cuDeviceGet")) return NULL;
  if (check(cu.cuDeviceGetAttribute(&major, 75, dev), "cuDeviceGetAttribute")) return NULL;
  if (check(cu.cuDeviceGetAttribute(&minor, 76, dev), "cuDeviceGetAttribute")) return NULL;
  if (check(cu.cuDriverGetVersion(&version), "cuDriverGetVersion")) return NULL;
  return Py_BuildValue("(iii)", major, minor, version);
}

static PyMethodDef module_methods[] = {
    {"device_info", (PyCFunction)device_info, METH_O,
     "device_info(device) -> (major, minor, driver_version)"},
    {"call_key", (PyCFunction)(void (*)(void))call_key, METH_FASTCALL,
     "call_key(args, flags): what a compiled binary depends on in these arguments"},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kiln_launch", NULL, -1, module_methods};

static int add_sandbox_functions(PyObject *m);

PyMODINIT_FUNC PyInit__kiln_launch(void) {
  str_data_ptr = PyUnicode_InternFromString("data_ptr");
  str_dtype = PyUnicode_InternFromString("dtype");
  str_base = PyUnicode_InternFromString("base");
  str_block_shape = PyUnicode_InternFromString("block_shape");
  str_padding = PyUnicode_InternFromString("padding");
  str_fast = PyUnicode_InternFromString("fast");
  str_best_config = PyUnicode_InternFromString("best_config");
  str_launch = PyUnicode_InternFromString("launch");
  if (!str_data_ptr || !str_dtype || !str_base || !str_block_shape || !str_padding || !str_fast || !str_best_config ||
      !str_launch)
    return NULL;
  if (PyType_Ready(&LauncherType) < 0) return NULL;
  if (PyType_Ready(&DispatcherType) < 0) return NULL;
  if (PyType_Ready(&BoundCallType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (add_sandbox_functions(m) < 0) return NULL; /* the section at the end of this file */
  Py_INCREF(&LauncherType);
  if (PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0) return NULL;
  Py_INCREF(&DispatcherType);
  if (PyModule_AddObject(m, "Dispatcher", (PyObject *)&DispatcherType) < 0) return NULL;
  Py_INCREF(&BoundCallType);
  if (PyModule_AddObject(m, "BoundCall", (PyObject *)&BoundCallType) < 0) return NULL;
  if (PyModule_AddStringConstant(m, "SOURCE_SHA256", LAUNCHER_SOURCE_SHA256) < 0) return NULL;
  return m;
}

/* ======================================================================= benchmark sandbox
 *
 * What kiln's torch-free benchmark sandbox (kiln/sandbox/native_worker.py) needs besides the
 * Launcher, and the one call the caller makes to hand its tensors over (ipc_get_handle):
 *
 *   cuda_init(device) -> context           cuInit + the device's primary context, made current
 *   mem_alloc(nbytes) -> ptr / mem_free(ptr)
 *   memcpy_dtod(dst, src, nbytes) / memcpy_htod(dst, buffer) / memcpy_dtoh(buffer, src)
 *   memset_d8(ptr, value, nbytes) / ctx_synchronize()
 *   ipc_get_handle(ptr, device) -> (handle, base, size)   (caller) the allocation holding ptr
 *   ipc_open(handle) -> ptr / ipc_close(ptr)                (sandbox)
 *   bench_loop(launcher, grid, args, zero, restore, flush_ptr, flush_bytes, warmup_ms, rep_ms)
 *       -> (estimate_ms, [ms per run])      triton.testing.do_bench's loop, in C
 *
 * Every driver call's status is checked; a failure raises RuntimeError("CUDA driver error <code>
 * (<text>) in <call>"), the format kiln's Python side parses to tell sticky errors apart. The
 * symbols are optional in load_driver: a driver without one fails only the function needing it.
 */

#define SB_NEED(name)                                                                        \
  do {                                                                                       \
    if (load_driver()) return NULL;                                                          \
    if (!cu.name) {                                                                          \
      PyErr_Format(PyExc_RuntimeError, "libcuda.so.1 has no symbol %s (driver too old?)", #name); \
      return NULL;                                                                           \
    }                                                                                        \
  } while (0)

static int sb_u64(PyObject *obj, uint64_t *out) {
  *out = PyLong_AsUnsignedLongLong(obj);
  return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *sb_cuda_init(PyObject *self, PyObject *arg) {
  long device = PyLong_AsLong(arg);
  if (device == -1 && PyErr_Occurred()) return NULL;
  if (load_driver()) return NULL;
  CUdevice dev;
  CUcontext ctx;
  if (check(cu.cuInit(0), "cuInit")) return NULL;
  if (check(cu.cuDeviceGet(&dev, (int)device), "cuDeviceGet")) return NULL;
  if (check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")) return NULL;
  if (check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) return NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)ctx);
}

static PyObject *sb_mem_alloc(PyObject *self, PyObject *arg) {
  SB_NEED(cuMemAlloc_v2);
  uint64_t n;
  if (sb_u64(arg, &n)) return NULL;
  CUdeviceptr ptr = 0;
  if (check(cu.cuMemAlloc_v2(&ptr, (size_t)n), "cuMemAlloc")) return NULL;
  return PyLong_FromUnsignedLongLong(ptr);
}

static PyObject *sb_mem_free(PyObject *self, PyObject *arg) {
  SB_NEED(cuMemFree_v2);
  uint64_t ptr;
  if (sb_u64(arg, &ptr)) return NULL;
  if (check(cu.cuMemFree_v2(ptr), "cuMemFree")) return NULL;
  Py_RETURN_NONE;
}

static PyObject *sb_memcpy_dtod(PyObject *self, PyObject *args) {
  SB_NEED(cuMemcpyDtoD_v2);
  unsigned long long dst, src, n;
  if (!PyArg_ParseTuple(args, "KKK", &dst, &src, &n)) return NULL;
  CUresult status;
  Py_BEGIN_ALLOW_THREADS
  status = cu.cuMemcpyDtoD_v2(dst, src, (size_t)n);
  Py_END_ALLOW_THREADS
  if (check(status, "cuMemcpyDtoD")) return NULL;
  Py_RETURN_NONE;
}

static PyObject *sb_memcpy_htod(PyObject *self, PyObject *args) {
  SB_NEED(cuMemcpyHtoD_v2);
  unsigned long long dst;
  Py_buffer view;
  if (!PyArg_ParseTuple(args, "Ky*", &dst, &view)) return NULL;
  CUresult status;
  Py_BEGIN_ALLOW_THREADS
  status = cu.cuMemcpyHtoD_v2(dst, view.buf, (size_t)view.len);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (check(status, "cuMemcpyHtoD")) return NULL;
  Py_RETURN_NONE;
}

/* memcpy_dtoh(buffer, src): fills the writable buffer (len(buffer) bytes) from device memory. */
static PyObject *sb_memcpy_dtoh(PyObject *self, PyObject *args) {
  SB_NEED(cuMemcpyDtoH_v2);
  unsigned long long src;
  Py_buffer view;
  if (!PyArg_ParseTuple(args, "w*K", &view, &src)) return NULL;
  CUresult status;
  Py_BEGIN_ALLOW_THREADS
  status = cu.cuMemcpyDtoH_v2(view.buf, src, (size_t)view.len);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (check(status, "cuMemcpyDtoH")) return NULL;
  Py_RETURN_NONE;
}

static PyObject *sb_memset_d8(PyObject *self, PyObject *args) {
  SB_NEED(cuMemsetD8_v2);
  unsigned long long ptr, n;
  unsigned char value;
  if (!PyArg_ParseTuple(args, "KbK", &ptr, &value, &n)) return NULL;
  if (check(cu.cuMemsetD8_v2(ptr, value, (size_t)n), "cuMemsetD8")) return NULL;
  Py_RETURN_NONE;
}

static PyObject *sb_ctx_synchronize(PyObject *self, PyObject *unused) {
  SB_NEED(cuCtxSynchronize);
  CUresult status;
  Py_BEGIN_ALLOW_THREADS
  status = cu.cuCtxSynchronize();
  Py_END_ALLOW_THREADS
  if (check(status, "cuCtxSynchronize")) return NULL;
  Py_RETURN_NONE;
}

/* ipc_get_handle(ptr, device) -> (handle: 64 bytes, base, size): the IPC handle of the whole
 * allocation holding ptr (a caching allocator's segment), with the device's primary context
 * pushed for the calls. Fails for memory that is not a plain cuMemAlloc allocation (torch's
 * expandable segments, cuMemCreate/cuMemMap). */
static PyObject *sb_ipc_get_handle(PyObject *self, PyObject *args) {
  SB_NEED(cuIpcGetMemHandle);
  SB_NEED(cuMemGetAddressRange_v2);
  SB_NEED(cuCtxPushCurrent_v2);
  SB_NEED(cuCtxPopCurrent_v2);
  unsigned long long ptr;
  int device;
  if (!PyArg_ParseTuple(args, "Ki", &ptr, &device)) return NULL;
  CUdevice dev;
  CUcontext ctx, popped;
  if (check(cu.cuInit(0), "cuInit")) return NULL;
  if (check(cu.cuDeviceGet(&dev, device), "cuDeviceGet")) return NULL;
  if (check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")) return NULL;
  if (check(cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")) return NULL;
  CUdeviceptr base = 0;
  size_t size = 0;
  struct sb_ipc_handle handle;
  memset(&handle, 0, sizeof handle);
  CUresult status = cu.cuMemGetAddressRange_v2(&base, &size, ptr);
  const char *what = "cuMemGetAddressRange";
  if (status == CUDA_SUCCESS) {
    status = cu.cuIpcGetMemHandle(&handle, base);
    what = "cuIpcGetMemHandle";
  }
  CUresult pop = cu.cuCtxPopCurrent_v2(&popped);
  /* the primary context stays retained: the caller's CUDA runtime (torch) holds it anyway */
  if (check(status, what) || check(pop, "cuCtxPopCurrent")) return NULL;
  return Py_BuildValue("(y#KK)", handle.reserved, (Py_ssize_t)sizeof handle.reserved, (unsigned long long)base,
                       (unsigned long long)size);
}

static PyObject *sb_ipc_open(PyObject *self, PyObject *arg) {
  SB_NEED(cuIpcOpenMemHandle_v2);
  if (!PyBytes_Check(arg) || PyBytes_GET_SIZE(arg) != 64) {
    PyErr_SetString(PyExc_ValueError, "ipc_open(handle): a CUDA IPC handle is 64 bytes");
    return NULL;
  }
  struct sb_ipc_handle handle;
  memcpy(handle.reserved, PyBytes_AS_STRING(arg), 64);
  CUdeviceptr ptr = 0;
  if (check(cu.cuIpcOpenMemHandle_v2(&ptr, handle, 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */),
            "cuIpcOpenMemHandle"))
    return NULL;
  return PyLong_FromUnsignedLongLong(ptr);
}

static PyObject *sb_ipc_close(PyObject *self, PyObject *arg) {
  SB_NEED(cuIpcCloseMemHandle);
  uint64_t ptr;
  if (sb_u64(arg, &ptr)) return NULL;
  if (check(cu.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")) return NULL;
  Py_RETURN_NONE;
}

/* -- bench_loop ---------------------------------------------------------------------------- */

#define SB_MAX_SPANS 256
#define SB_MAX_REPEAT (1 << 20)

typedef struct {
  CUfunction fn;
  unsigned grid[3];
  unsigned block_x, shared;
  void **params;
  int n_zero, n_restore;
  uint64_t zero[SB_MAX_SPANS][2];    /* (ptr, nbytes): cuMemsetD8 to 0 before the launch */
  uint64_t restore[SB_MAX_SPANS][3]; /* (dst, src, nbytes): copied after the launch */
  uint64_t flush_ptr, flush_bytes;
} sb_plan;

/* One call of what is timed: zero the reset_to_zero tensors, launch, restore the restore_value
 * ones (what triton.autotune's pre/post hooks do around its benchmarked call). */
static CUresult sb_call(const sb_plan *plan) {
  CUresult s;
  for (int i = 0; i < plan->n_zero; i++)
    if ((s = cu.cuMemsetD8Async(plan->zero[i][0], 0, (size_t)plan->zero[i][1], NULL))) return s;
  if (plan->grid[0] && plan->grid[1] && plan->grid[2]) {
    s = cu.cuLaunchKernel(plan->fn, plan->grid[0], plan->grid[1], plan->grid[2], plan->block_x, 1, 1, plan->shared,
                          NULL, plan->params, NULL);
    if (s) return s;
  }
  for (int i = 0; i < plan->n_restore; i++)
    if ((s = cu.cuMemcpyDtoDAsync_v2(plan->restore[i][0], plan->restore[i][1], (size_t)plan->restore[i][2], NULL)))
      return s;
  return CUDA_SUCCESS;
}

static CUresult sb_flush(const sb_plan *plan) {
  if (!plan->flush_bytes) return CUDA_SUCCESS;
  return cu.cuMemsetD8Async(plan->flush_ptr, 0, (size_t)plan->flush_bytes, NULL);
}

static int sb_spans(PyObject *list, int width, uint64_t (*out)[3], uint64_t (*out2)[2], int *count,
                    const char *what) {
  if (!PyList_Check(list) || PyList_GET_SIZE(list) > SB_MAX_SPANS) {
    PyErr_Format(PyExc_TypeError, "bench_loop: %s must be a list of at most %d tuples", what, SB_MAX_SPANS);
    return -1;
  }
  *count = (int)PyList_GET_SIZE(list);
  for (int i = 0; i < *count; i++) {
    PyObject *item = PyList_GET_ITEM(list, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != width) {
      PyErr_Format(PyExc_TypeError, "bench_loop: each %s entry is a %d-tuple of ints", what, width);
      return -1;
    }
    for (int j = 0; j < width; j++) {
      uint64_t v;
      if (sb_u64(PyTuple_GET_ITEM(item, j), &v)) return -1;
      if (width == 3)
        out[i][j] = v;
      else
        out2[i][j] = v;
    }
  }
  return 0;
}

typedef struct {
  CUresult status;
  const char *what;
  float estimate_ms;
  long n_repeat;
  float *times;
} sb_result;

#define SB_TRY(call, name)           \
  do {                               \
    if ((r->status = (call))) {      \
      r->what = name;                \
      goto out;                      \
    }                                \
  } while (0)

/* triton.testing.do_bench: one call, an estimate from 5 flushed calls, n_warmup calls, then
 * n_repeat calls each after an L2 flush and between its own pair of events. No GIL held. */
static void sb_run(const sb_plan *plan, double warmup_ms, double rep_ms, sb_result *r) {
  void *start = NULL, *end = NULL;
  void **starts = NULL, **ends = NULL;
  long created = 0;
  r->status = CUDA_SUCCESS;
  r->times = NULL;
  r->n_repeat = 0;
  SB_TRY(sb_call(plan), "cuLaunchKernel");
  SB_TRY(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  SB_TRY(cu.cuEventCreate(&start, 0), "cuEventCreate");
  SB_TRY(cu.cuEventCreate(&end, 0), "cuEventCreate");
  SB_TRY(cu.cuEventRecord(start, NULL), "cuEventRecord");
  for (int i = 0; i < 5; i++) {
    SB_TRY(sb_flush(plan), "cuMemsetD8Async");
    SB_TRY(sb_call(plan), "cuLaunchKernel");
  }
  SB_TRY(cu.cuEventRecord(end, NULL), "cuEventRecord");
  SB_TRY(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  float total = 0.0f;
  SB_TRY(cu.cuEventElapsedTime(&total, start, end), "cuEventElapsedTime");
  double estimate = total / 5.0;
  r->estimate_ms = (float)estimate;
  if (estimate <= 0.0) estimate = 1e-6;
  double w = warmup_ms / estimate, n = rep_ms / estimate;
  long n_warmup = w < 1.0 ? 1 : (w > SB_MAX_REPEAT ? SB_MAX_REPEAT : (long)w);
  long n_repeat = n < 1.0 ? 1 : (n > SB_MAX_REPEAT ? SB_MAX_REPEAT : (long)n);
  starts = calloc((size_t)n_repeat, sizeof(void *));
  ends = calloc((size_t)n_repeat, sizeof(void *));
  r->times = calloc((size_t)n_repeat, sizeof(float));
  if (!starts || !ends || !r->times) {
    r->status = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    r->what = "calloc (host memory for events)";
    goto out;
  }
  for (; created < n_repeat; created++) {
    SB_TRY(cu.cuEventCreate(&starts[created], 0), "cuEventCreate");
    if ((r->status = cu.cuEventCreate(&ends[created], 0))) {
      cu.cuEventDestroy_v2(starts[created]);
      r->what = "cuEventCreate";
      goto out;
    }
  }
  for (long i = 0; i < n_warmup; i++) SB_TRY(sb_call(plan), "cuLaunchKernel");
  for (long i = 0; i < n_repeat; i++) {
    SB_TRY(sb_flush(plan), "cuMemsetD8Async");
    SB_TRY(cu.cuEventRecord(starts[i], NULL), "cuEventRecord");
    SB_TRY(sb_call(plan), "cuLaunchKernel");
    SB_TRY(cu.cuEventRecord(ends[i], NULL), "cuEventRecord");
  }
  SB_TRY(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  for (long i = 0; i < n_repeat; i++)
    SB_TRY(cu.cuEventElapsedTime(&r->times[i], starts[i], ends[i]), "cuEventElapsedTime");
  r->n_repeat = n_repeat;
out:
  for (long i = 0; i < created; i++) {
    cu.cuEventDestroy_v2(starts[i]);
    cu.cuEventDestroy_v2(ends[i]);
  }
  free(starts);
  free(ends);
  if (start) cu.cuEventDestroy_v2(start);
  if (end) cu.cuEventDestroy_v2(end);
}

/* bench_loop(launcher, grid, args, zero, restore, flush_ptr, flush_bytes, warmup_ms, rep_ms)
 *   args:    every argument in order (pointers as ints), as Launcher.launch takes them
 *   zero:    [(ptr, nbytes)] zeroed before each call;  restore: [(dst, src, nbytes)] after it
 * -> (estimate_ms, [ms of each of the n_repeat timed calls]) */
static PyObject *sb_bench_loop(PyObject *self, PyObject *args) {
  PyObject *launcher, *grid, *items, *zero, *restore;
  unsigned long long flush_ptr, flush_bytes;
  double warmup_ms, rep_ms;
  if (!PyArg_ParseTuple(args, "O!O!O!OOKKdd", &LauncherType, &launcher, &PyTuple_Type, &grid, &PyTuple_Type, &items,
                        &zero, &restore, &flush_ptr, &flush_bytes, &warmup_ms, &rep_ms))
    return NULL;
  SB_NEED(cuMemsetD8Async);
  SB_NEED(cuMemcpyDtoDAsync_v2);
  SB_NEED(cuCtxSynchronize);
  SB_NEED(cuEventCreate);
  SB_NEED(cuEventRecord);
  SB_NEED(cuEventElapsedTime);
  SB_NEED(cuEventDestroy_v2);
  Launcher *l = (Launcher *)launcher;
  sb_plan *plan = calloc(1, sizeof(sb_plan));
  if (!plan) return PyErr_NoMemory();
  PyObject *result = NULL;
  PyObject *buffers[N_SCRATCH] = {NULL, NULL}; /* the scratch every timed call uses (one stream: in order) */
  uint64_t scratch[N_SCRATCH];
  long g[3] = {1, 1, 1};
  sb_result r = {0};
  Py_ssize_t gn = PyTuple_GET_SIZE(grid);
  if (gn < 1 || gn > 3) {
    PyErr_Format(PyExc_ValueError, "the grid must have 1 to 3 dimensions, got %zd", gn);
    goto done;
  }
  plan->grid[0] = plan->grid[1] = plan->grid[2] = 1;
  for (Py_ssize_t i = 0; i < gn; i++) {
    long extent = PyLong_AsLong(PyTuple_GET_ITEM(grid, i));
    if (extent == -1 && PyErr_Occurred()) goto done;
    if (extent < 0 || extent > 0x7fffffffL) {
      PyErr_Format(PyExc_ValueError, "grid dimension %zd is %ld, outside 0..2**31-1", i, extent);
      goto done;
    }
    plan->grid[i] = (unsigned)extent;
  }
  for (int i = 0; i < 3; i++) g[i] = (long)plan->grid[i];
  if (PyTuple_GET_SIZE(items) != l->n_args) {
    PyErr_Format(PyExc_TypeError, "kernel %U takes %zd arguments, got %zd", l->name, l->n_args,
                 PyTuple_GET_SIZE(items));
    goto done;
  }
  if (sb_spans(zero, 2, NULL, plan->zero, &plan->n_zero, "zero")) goto done;
  if (sb_spans(restore, 3, plan->restore, NULL, &plan->n_restore, "restore")) goto done;
  plan->fn = function_for_context(l, -1);
  if (!plan->fn) goto done;
  uint64_t slots[MAX_ARGS + 8];
  void *params[MAX_ARGS + 8];
  int n_params = 0;
  if (allocate_scratch(l, g, 0, buffers, scratch)) goto done; /* stream 0: the loop's (the NULL stream) */
  if (pack(l, &PyTuple_GET_ITEM(items, 0), NULL, NULL, scratch, slots, params, &n_params)) goto done;
  plan->params = params;
  plan->block_x = (unsigned)l->block_x;
  plan->shared = (unsigned)l->shared;
  plan->flush_ptr = flush_ptr;
  plan->flush_bytes = flush_bytes;
  Py_BEGIN_ALLOW_THREADS
  sb_run(plan, warmup_ms, rep_ms, &r);
  Py_END_ALLOW_THREADS
  if (check(r.status, r.what)) goto done;
  PyObject *times = PyList_New(r.n_repeat);
  if (!times) goto done;
  for (long i = 0; i < r.n_repeat; i++) {
    PyObject *t = PyFloat_FromDouble((double)r.times[i]);
    if (!t) {
      Py_DECREF(times);
      goto done;
    }
    PyList_SET_ITEM(times, i, t);
  }
  result = Py_BuildValue("(dN)", (double)r.estimate_ms, times);
done:
  release_scratch(buffers);
  free(r.times);
  free(plan);
  return result;
}

static PyMethodDef sandbox_methods[] = {
    {"cuda_init", (PyCFunction)sb_cuda_init, METH_O, "cuda_init(device): make the device's primary context current"},
    {"mem_alloc", (PyCFunction)sb_mem_alloc, METH_O, "mem_alloc(nbytes) -> device pointer"},
    {"mem_free", (PyCFunction)sb_mem_free, METH_O, "mem_free(ptr)"},
    {"memcpy_dtod", (PyCFunction)sb_memcpy_dtod, METH_VARARGS, "memcpy_dtod(dst, src, nbytes)"},
    {"memcpy_htod", (PyCFunction)sb_memcpy_htod, METH_VARARGS, "memcpy_htod(dst, buffer)"},
    {"memcpy_dtoh", (PyCFunction)sb_memcpy_dtoh, METH_VARARGS, "memcpy_dtoh(buffer, src): fill buffer"},
    {"memset_d8", (PyCFunction)sb_memset_d8, METH_VARARGS, "memset_d8(ptr, value, nbytes)"},
    {"ctx_synchronize", (PyCFunction)sb_ctx_synchronize, METH_NOARGS, "ctx_synchronize(): cuCtxSynchronize"},
    {"ipc_get_handle", (PyCFunction)sb_ipc_get_handle, METH_VARARGS,
     "ipc_get_handle(ptr, device) -> (handle, base, size) of the allocation holding ptr"},
    {"ipc_open", (PyCFunction)sb_ipc_open, METH_O, "ipc_open(handle) -> device pointer"},
    {"ipc_close", (PyCFunction)sb_ipc_close, METH_O, "ipc_close(ptr)"},
    {"bench_loop", (PyCFunction)sb_bench_loop, METH_VARARGS,
     "bench_loop(launcher, grid, args, zero, restore, flush_ptr, flush_bytes, warmup_ms, rep_ms)"
     " -> (estimate_ms, [ms per timed call])"},
    {NULL}};

static int add_sandbox_functions(PyObject *m) { return PyModule_AddFunctions(m, sandbox_methods); }
