/* runtime.h — turning a WkProgram into something Python can call.
 *
 *   cc.c        Python-free. Compiles a C source with the system compiler
 *               ($WICK_CC or cc) into a shared object, cached on disk by the
 *               SHA-256 of (source, compiler identity, flags) under
 *               $WICK_CACHE_DIR (default ~/.cache/wick). Writes go to a
 *               temporary file and are renamed into place, so processes that
 *               share the cache never see half a file. Each .so has a sidecar
 *               holding its own SHA-256; a mismatch (a corrupt or truncated
 *               file) is detected and the artifact rebuilt.
 *   compiled.c  the C type wick._C.CompiledGraph: holds the loaded library,
 *               the plan of steps (program.h: KERNELS stages and EXTERN
 *               calls) and the extern table; calling it with the graph's
 *               input tensors runs the steps in order and returns the
 *               outputs as a tuple, in graph-output order (always a tuple).
 *               No Python code runs between steps except the extern calls.
 *   shim.c      output tensors allocated from C through PyTorch's stable C
 *               shim (aoti_torch_empty_strided), wrapped for Python by
 *               libtorch_python; torch.empty_strided where it is missing.
 *   shim_ops.c  extern calls without Python: matmuls, convolution and
 *               attention called through the shim's per-device functions
 *               when nothing needs the Python call (no autograd, no mode).
 *   triton_rt.c the kernels of a TRITON plan: compiled through wick/_triton.py
 *               (Triton's compiler, cached on disk), loaded and launched
 *               with the CUDA driver API (dlopen'd libcuda.so.1) on the
 *               current stream, autotuned over block sizes; or run by
 *               Triton's interpreter for CPU tensors (tests).
 *   pygraph.c   the C type wick._C.Graph: a Python handle on a WkGraph under
 *               construction, used by the torch.compile adapter (FX import),
 *               by tests of the compiler alone, and by capture to hand a
 *               graph to a non-wick backend.
 */
#ifndef WICK_RUNTIME_H
#define WICK_RUNTIME_H

#include "../codegen/program.h"

/* ---- cc.c (Python-free) ------------------------------------------------ */
typedef struct WkLib WkLib;
/* Returns the loaded library for `source`, compiling it on a cache miss.
 * NULL with wk_error set (compiler missing, compile error with its stderr,
 * dlopen failure). `*cache_hit` (may be NULL) tells whether it was reused. */
WkLib *wk_cc_load(const char *source, int *cache_hit);
void *wk_cc_symbol(WkLib *lib, const char *name);
const char *wk_cc_path(const WkLib *lib);
void wk_cc_close(WkLib *lib);
/* The cache directory in use (created on demand). */
const char *wk_cc_cache_dir(void);

#ifdef PY_SSIZE_T_CLEAN /* the Python-facing half; include Python.h first */
/* ---- shim.c -------------------------------------------------------------- */
/* 1 if outputs can be allocated through PyTorch's C shim (symbols found in
 * the loaded libtorch, WICK_SHIM not 0), else 0: use torch.empty_strided. */
int wk_shim_available(void);
/* A new tensor (new reference) on the CPU (cuda_device -1) or on CUDA
 * device cuda_device (PyTorch's caching allocator), and its data pointer in
 * *data; NULL with a Python exception on failure. Call only when
 * wk_shim_available() (and, for CUDA, wk_shim_cuda_available()). */
PyObject *wk_shim_empty_strided_Ref(int ndim, const int64_t *sizes, const int64_t *strides, WkDType dt,
                                    int cuda_device, void **data);
int wk_shim_cuda_available(void);
/* 1 with tensor's dtype (WK_NDTYPES for one wick does not name), dims,
 * sizes and strides (borrowed: valid while the tensor lives and is not
 * resized) read through the shim, no Python call; 0 when the shim cannot
 * (use the Python attributes). tensor: an exact torch.Tensor or Parameter. */
int wk_shim_meta(PyObject *tensor, WkDType *dtype, int *ndim, const int64_t **sizes, const int64_t **strides);
uint64_t wk_shim_abi_version(void); /* 0 when unavailable */
/* A new CPU tensor (new reference) over a block of the output pool (see
 * shim.c: reused warm memory for outputs of WK_POOL_MIN_BYTES or more), its
 * data pointer in *data. NULL without an exception when the pool does not
 * serve it (too small, WICK_OUTPUT_POOL=0, no torch_from_blob, no memory):
 * use wk_shim_empty_strided_Ref. nbytes: the storage the strides span. */
enum { WK_POOL_MIN_BYTES = 4 << 20 };
PyObject *wk_shim_pooled_Ref(int ndim, const int64_t *sizes, const int64_t *strides, WkDType dt, int64_t nbytes,
                             void **data);
int64_t wk_shim_pool_cached_bytes(void); /* bytes the pool holds now (tests) */
/* A tensor over base's storage (base: an exact torch.Tensor or Parameter,
 * borrowed) with these sizes and strides, storage offset base's plus
 * offset_increment: new reference. No autograd view of base (see shim.c).
 * NULL without an exception when the shim cannot make it (use the Python
 * path), NULL with one when the call failed. */
/* 1 with tensor's data pointer (an exact torch.Tensor or Parameter,
 * borrowed) in *data, read through the shim; 0 when the shim cannot (use
 * Tensor.data_ptr()). */
int wk_shim_data_ptr(PyObject *tensor, void **data);
PyObject *wk_shim_alias_Ref(PyObject *base, int ndim, const int64_t *sizes, const int64_t *strides,
                            int64_t offset_increment);
/* For shim_ops.c. wk_shim_handle: tensor's at::Tensor handle (borrowed, as
 * long as the tensor lives; tensor an exact torch.Tensor or Parameter), NULL
 * when the shim cannot read it. wk_shim_wrap_handle_Ref: a torch.Tensor for a
 * handle a shim function returned (new reference; None for an undefined
 * tensor); takes the handle either way. wk_shim_delete_handle: drops one
 * unused (NULL: nothing). wk_shim_op_symbol: a shim function of
 * libtorch_cpu (cuda 0) or libtorch_cuda (cuda 1) as torch loaded them,
 * NULL when absent. */
void *wk_shim_handle(PyObject *tensor);
PyObject *wk_shim_wrap_handle_Ref(void *handle);
void wk_shim_delete_handle(void *handle);
void *wk_shim_op_symbol(const char *name, int cuda);

/* ---- shim_ops.c ---------------------------------------------------------
 * Extern calls made from C through PyTorch's C shim, no Python between
 * (see shim_ops.c for which ops and when). */
typedef struct WkNativeCall WkNativeCall;
enum { WK_NATIVE_MAX_OUTPUTS = 9 };
/* The native form of an extern entry (see ExternEntry in compiled.c: items,
 * kind, nargs, nitems, kwnames; picks) for the op called `name` (an ATen
 * name such as "aten.mm.default") on a CPU (cuda_device -1) or CUDA graph,
 * or NULL when there is none: fn is not that op's own callable, the
 * arguments are not the supported form, or the shim lacks the function.
 * Never leaves a Python exception set. Free with wk_native_call_free. */
WkNativeCall *wk_native_call_prepare(const char *name, PyObject *fn, PyObject *const *items, const int *kind,
                                     Py_ssize_t nargs, Py_ssize_t nitems, PyObject *kwnames,
                                     const Py_ssize_t *pick, Py_ssize_t npicks, int nout, int cuda_device);
void wk_native_call_free(WkNativeCall *c);
/* Runs c on the extern node's tensor inputs `in` (borrowed). Out-variant
 * ops allocate output k with out_ndim[k], out_sizes[k], out_strides[k],
 * out_dtype[k]. 1: out[0..nout) are new references; 0: not here (grad mode
 * on, a tensor subclass or Python mode, a shim error): nothing ran, use the
 * Python call; -1: a Python exception. */
int wk_native_call_run(const WkNativeCall *c, PyObject *const *in, int nin, const int *out_ndim,
                       const int64_t *const *out_sizes, const int64_t *const *out_strides,
                       const WkDType *out_dtype, PyObject **out);

/* ---- compiled.c -------------------------------------------------------- */
/* Compiles g with the wick pipeline and returns a new CompiledGraph
 * (new reference), or NULL with wk_error set and no Python exception when
 * wick cannot compile it (the caller falls back), or NULL with a Python
 * exception for interpreter-level failures (KeyboardInterrupt, MemoryError).
 * Does not take ownership of g. */
PyObject *wk_rt_compile_Ref(const WkGraph *g);

/* ---- the extern table ----
 * wk_rt_compile_externs_Ref is wk_rt_compile_Ref for graphs with EXTERN
 * nodes. `externs` (borrowed; a list or tuple, or NULL/None when the graph
 * has none) has at least one entry per extern index the graph uses. Entry i
 * says how to call extern i at run time, as one of:
 *   - a callable f: called as f(*tensor_inputs) (a prebuilt closure);
 *   - a tuple (fn, args[, kwargs[, picks]]): fn(*args, **kwargs), where args
 *     (a tuple or list) and kwargs (a dict or None) are templates in which
 *     every wick._C.ExternInput(k) stands for the node's tensor input k,
 *     also inside nested lists/tuples and dict values (cat's tensor list);
 *     everything else is passed as it is (ints, floats, dtypes, None...).
 * The entries are read once, at compile time; the CompiledGraph keeps
 * references to fn and the templates. Outputs: with picks (a sequence of
 * ints, one per node output) output k is result[picks[k]], so a tuple with
 * None or non-tensor items works; without picks, a tuple/list result gives
 * outputs 0..n-1 from its first n items, anything else is output 0 of a
 * single-output node. Every output must be a torch.Tensor. A view result
 * (transpose, a slice) is kept as the view: the runtime holds a reference to
 * it, and to its base through it. An output that generated kernels read is
 * checked against the node's metadata: a different dtype or shape raises
 * RuntimeError; different strides are copied into the promised layout. An
 * exception raised by the extern propagates out of the call unchanged, as
 * it would in eager mode (no partial outputs are returned).
 * Externs must not mutate their inputs (the steps are ordered by data flow
 * only): capture and the FX importer give functional graphs. */
PyObject *wk_rt_compile_externs_Ref(const WkGraph *g, PyObject *externs);
/* Source, summary and timings of a CompiledGraph as a dict (new reference). */
PyObject *wk_rt_describe_Ref(PyObject *compiled);
/* Turns input validation of a CompiledGraph
 * on or off. Capture turns it off: its guards already checked dtype, device,
 * sizes and strides. The argument count is always checked. */
void wk_rt_set_check_inputs(PyObject *compiled, int on);

/* ---- triton_rt.c ------------------------------------------------------- */
typedef struct WkTriton WkTriton;
/* 1 if the CUDA driver API can be loaded; else 0 and the reason in why. */
int wk_triton_gpu_available(char *why, size_t n);
/* Prepares the kernels of `plan` (TRITON target; borrowed, must outlive the
 * result) for CUDA device `device`, or for Triton's interpreter when device
 * is -1. Writes the module into the cache; compiles kernels at their first
 * launch. NULL with a Python exception. */
WkTriton *wk_triton_new(const WkPlan *plan, int device);
/* Launches the kernels of KERNELS step `step` (program p): bufs[b] is the
 * tensor of program buffer b (borrowed), ptrs[b] its data pointer. -1 with
 * a Python exception. */
int wk_triton_run(WkTriton *t, int step, const WkProgram *p, PyObject *const *bufs, void *const *ptrs);
/* Starts compiling, on the compile processes, the kernels the first launch
 * needs, without waiting (no-op for the interpreter or once started); the
 * first wk_triton_run waits for them. Errors are left to the loads. */
void wk_triton_prepare_soon(WkTriton *t);
void wk_triton_free(WkTriton *t);

/* ---- pygraph.c --------------------------------------------------------- */
/* Wraps g in a wick._C.Graph (new reference); the wrapper owns g from then on. */
PyObject *wk_rt_graph_wrap_Steal(WkGraph *g);
/* The WkGraph inside a wick._C.Graph (borrowed), or NULL if not one. */
WkGraph *wk_rt_graph_unwrap_Borrow(PyObject *obj);

/* Module init: adds CompiledGraph and Graph to wick._C. */
int wk_rt_init(PyObject *module);
#endif

#endif /* WICK_RUNTIME_H */
