/*
 * nnc.h — the C ABI of every model compiled by nnc.
 *
 * A compiled model is a native library exporting six functions whose names
 * start with a PREFIX chosen at compile time: empty by default, `foo_` with
 * `nnc --name foo`, so that several models can be linked into one program.
 *
 *   int32_t PREFIXinfer(const void *const *inputs, void *const *outputs);
 *   int32_t PREFIXinfer_with_workspace(const void *const *inputs,
 *                                      void *const *outputs, void *workspace);
 *   const nnc_model_info *PREFIXmodel_info(void);
 *   uint64_t PREFIXworkspace_size(const nnc_run_options *options);
 *   int32_t PREFIXrun(const void *const *inputs, void *const *outputs,
 *                     void *workspace, const nnc_run_options *options);
 *   int32_t PREFIXshapes(const int64_t *dims, int64_t *shapes);
 *
 * Use NNC_DECLARE_MODEL(PREFIX) below to declare them when linking directly;
 * use the nnc_*_fn typedefs with dlsym() when loading at run time.
 *
 * Tensors cross the ABI as dense, row-major (C order) buffers of the element
 * type given by `dtype`, in the target's native (little-endian) byte order;
 * BOOL elements are one byte each (0 or 1). `inputs[i]` / `outputs[i]` follow
 * the order of `model_info()->inputs[i]` / `->outputs[i]`, which is the order
 * of the ONNX graph's (non-initializer) inputs and outputs. An output with a
 * value-dependent extent (nnc_bounded_axis) needs a buffer of its largest size
 * and may fill only the first part of it.
 *
 * This contract is fixed: later versions only extend it (and bump
 * NNC_ABI_VERSION when they do); nothing here is ever renamed or reordered.
 * Its Rust twin is the `nnc-runtime-abi` crate (runtime-abi/src/abi.rs).
 */
#ifndef NNC_H
#define NNC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Value of nnc_model_info.abi_version for the layout declared here. */
#define NNC_ABI_VERSION 10

/* ---- Return codes of PREFIXinfer / PREFIXinfer_with_workspace / PREFIXrun */

/* Success: every output buffer has been written. */
#define NNC_OK 0
/* `inputs` or `outputs` is NULL, or one of their elements is NULL.
 * Nothing has been written. */
#define NNC_ERR_NULL_POINTER 1
/* `workspace` is NULL or its address is not a multiple of
 * model_info()->workspace_align. Nothing has been written. (A non-NULL workspace is required even when
 * workspace_size is 0.) */
#define NNC_ERR_MISALIGNED_WORKSPACE 2
/* An index read from an input at run time (Gather, GatherElements, GatherND,
 * Scatter, ScatterElements, ScatterND, and the ops nnc builds from them, such
 * as CumSum's axis given at run time) is outside [-n, n) for its axis of n
 * elements, or TopK's k given at run time is outside [0, n]. Nothing was read or written
 * outside any buffer, but the outputs and the workspace may be partly
 * written: discard them. Only libraries compiled with `--index-checks error`
 * (the default) return it; `--index-checks clamp` clamps such an index into
 * range instead. Since ABI version 2. */
#define NNC_ERR_INDEX_OUT_OF_RANGE 3
/* PREFIXrun only: `options->size` is smaller than the fields of ABI version
 * 3 up to `pool` (so the options cannot be read), or `options->pool` has
 * num_threads 0 or a NULL parallel_for. Nothing has been written. Since ABI
 * version 3. */
#define NNC_ERR_BAD_OPTIONS 4
/* PREFIXrun only: `options->workspace_bytes` is not 0 and smaller than
 * PREFIXworkspace_size(options). Nothing has been written. Since ABI
 * version 3. */
#define NNC_ERR_WORKSPACE_TOO_SMALL 5
/* PREFIXrun and PREFIXshapes only: a value in `dims` is outside its dim's
 * [min, max] (model_info()->dims). Nothing has been written. Since ABI
 * version 4. */
#define NNC_ERR_DIM_OUT_OF_RANGE 6
/* PREFIXrun and PREFIXshapes only: the values in `dims` are each in range but
 * together break a fact about extents the model needs (a Reshape's element
 * count, two extents a broadcast or a matrix product needs equal), which the
 * compiler could not prove for every value. Nothing has been written. Since
 * ABI version 7. */
#define NNC_ERR_DIMS_INCONSISTENT 7
/* An input the model reads as a shape (a Reshape's target, a Resize's sizes, a
 * Tile's repeats, a OneHot's depth...) and computes nothing else from holds values
 * other than those the output shapes the model declares imply, which the library
 * was compiled for. Nothing has been written. Since ABI version 8. */
#define NNC_ERR_SHAPE_INPUT_MISMATCH 8
/* The CPU lacks an instruction set extension the library was compiled for (an
 * x86-64 library built with --cpu x86-64-v3, x86-64-v4 or native, run on an older
 * CPU, or where the OS does not save the vector registers it uses): the library
 * checks before running anything and returns this instead of dying on an illegal
 * instruction. Nothing has been written. Since ABI version 9. */
#define NNC_ERR_UNSUPPORTED_CPU 9

/* ---- Element types: the codes of ONNX TensorProto.DataType ------------- */

#define NNC_DTYPE_UNDEFINED 0
#define NNC_DTYPE_FLOAT 1 /* IEEE 754 binary32 */
#define NNC_DTYPE_UINT8 2
#define NNC_DTYPE_INT8 3
#define NNC_DTYPE_UINT16 4
#define NNC_DTYPE_INT16 5
#define NNC_DTYPE_INT32 6
#define NNC_DTYPE_INT64 7
#define NNC_DTYPE_STRING 8 /* not a dense type: never crosses this ABI */
#define NNC_DTYPE_BOOL 9   /* one byte per element */
#define NNC_DTYPE_FLOAT16 10
#define NNC_DTYPE_DOUBLE 11
#define NNC_DTYPE_UINT32 12
#define NNC_DTYPE_UINT64 13
#define NNC_DTYPE_COMPLEX64 14
#define NNC_DTYPE_COMPLEX128 15
#define NNC_DTYPE_BFLOAT16 16
#define NNC_DTYPE_FLOAT8E4M3FN 17
#define NNC_DTYPE_FLOAT8E4M3FNUZ 18
#define NNC_DTYPE_FLOAT8E5M2 19
#define NNC_DTYPE_FLOAT8E5M2FNUZ 20
#define NNC_DTYPE_UINT4 21 /* 4-bit types: packed two per byte */
#define NNC_DTYPE_INT4 22
#define NNC_DTYPE_FLOAT4E2M1 23
#define NNC_DTYPE_FLOAT8E8M0 24
#define NNC_DTYPE_UINT2 25 /* 2-bit types: packed four per byte */
#define NNC_DTYPE_INT2 26
#define NNC_DTYPE_FLOAT6E2M3 27 /* packed four per three bytes */
#define NNC_DTYPE_FLOAT6E3M2 28

/* ---- Model description ------------------------------------------------- */

/* One input or output tensor. Every pointer refers to static data inside the
 * library and stays valid while the library is loaded. */
typedef struct nnc_tensor_info {
    const char *name;    /* the ONNX value name, NUL-terminated UTF-8 */
    int32_t dtype;       /* an NNC_DTYPE_* code */
    int32_t rank;        /* number of dimensions; 0 for a scalar */
    const int64_t *dims; /* `rank` sizes, outermost first; an axis that
                            depends on a dim (see nnc_axis_dim) has its size
                            with every dim at its maximum */
} nnc_tensor_info;

/* ---- Dimensions set at run time (since ABI version 4) --------------------
 *
 * A model compiled with `--dim NAME=MIN..MAX` (or a MIN..MAX axis in
 * `--input-shape`, a dim named INPUT.AXIS unless the model names that
 * axis) has symbolic dims: the caller
 * gives their values to PREFIXrun in `options->dims`, numbered in order of
 * first appearance over the inputs (in order) and their axes (in order).
 * One library runs exactly every value in range. The axes of inputs and
 * outputs that depend on a dim are listed as nnc_axis_dim entries: axis
 * `axis` of tensor `tensor` (inputs first, then outputs) has the size
 * `scale * dims[dim]`, put through the steps of its nnc_axis_extent when
 * model_info()->axis_extents is not NULL (since ABI version 6: an output
 * whose size a conv's or a pool's formula derives from the dim, a text
 * line's columns after a recognizer's convs). Inputs' axes are always
 * `scale * dims[dim]`. PREFIXshapes gives every input's and output's shape
 * for given values. infer and infer_with_workspace, and run with NULL
 * `dims`, use each dim at its maximum (the sizes in nnc_tensor_info). */
typedef struct nnc_dim_info {
    const char *name; /* as the model names it, or INPUT.AXIS */
    int64_t min;
    int64_t max;
} nnc_dim_info;

typedef struct nnc_axis_dim {
    uint32_t tensor; /* inputs[tensor], or outputs[tensor - num_inputs] */
    uint32_t axis;
    uint32_t dim;    /* index in model_info()->dims and options->dims */
    uint32_t reserved;
    int64_t scale;
} nnc_axis_dim;

/* Since ABI version 6: one step of an axis's extent, x -> floor((x + add) / div),
 * with div >= 1 and x + add >= 0 for every value in the dims' ranges. */
typedef struct nnc_extent_step {
    int64_t add;
    int64_t div;
} nnc_extent_step;

/* Since ABI version 6: the extent of axis_dims[i]'s axis is `scale * dims[dim]`
 * put through `num_steps` steps in order (none: that product itself). */
typedef struct nnc_axis_extent {
    uint32_t num_steps;
    uint32_t reserved;
    const nnc_extent_step *steps; /* num_steps entries */
} nnc_axis_extent;

/* Since ABI version 5: axis `axis` of outputs[output] has an extent that the
 * input values decide (NonZero, Unique, Compress, NonMaxSuppression): its size
 * in nnc_tensor_info is the largest it can have, the caller's buffer must hold
 * that many elements, and the output is written densely (row-major) for the
 * extent of the run, which options->output_shapes reports. */
typedef struct nnc_bounded_axis {
    uint32_t output;
    uint32_t axis;
} nnc_bounded_axis;

typedef struct nnc_model_info {
    uint32_t abi_version; /* NNC_ABI_VERSION of the compiler that built it */
    uint32_t num_inputs;
    uint32_t num_outputs;
    const nnc_tensor_info *inputs;  /* num_inputs entries */
    const nnc_tensor_info *outputs; /* num_outputs entries */
    /* Scratch memory that PREFIXinfer_with_workspace needs, and the
     * alignment (a power of two) its address must have. */
    uint64_t workspace_size;
    uint64_t workspace_align;
    /* Since ABI version 4 (read only when abi_version >= 4): */
    uint32_t num_dims;      /* symbolic dims: 0 for a model of fixed shapes */
    uint32_t num_axis_dims;
    const nnc_dim_info *dims;      /* num_dims entries */
    const nnc_axis_dim *axis_dims; /* num_axis_dims entries */
    /* Since ABI version 5 (read only when abi_version >= 5): */
    uint32_t num_bounded_axes;
    const nnc_bounded_axis *bounded_axes; /* num_bounded_axes entries */
    /* Since ABI version 6 (read only when abi_version >= 6): */
    const nnc_axis_extent *axis_extents; /* num_axis_dims entries, or NULL when
                                            every axis is scale * dims[dim] */
    /* Since ABI version 10 (read only when abi_version >= 10): the CPU
     * variants the library carries, as `nnc compile --cpu` names them, most
     * capable first, separated by commas (the x86-64 default:
     * "x86-64-v4+vnni,x86-64-v3+avxvnni,x86-64-v3,baseline"); each call runs
     * the first one the CPU has every feature of. And the features a CPU must
     * have to run the library at all
     * (its least demanding variant's, comma-separated, e.g. "sse3,ssse3,sse41";
     * "" when every CPU of the architecture can): elsewhere PREFIXinfer,
     * PREFIXinfer_with_workspace and PREFIXrun return NNC_ERR_UNSUPPORTED_CPU
     * and write nothing. */
    const char *cpu_variants;
    const char *required_cpu_features;
} nnc_model_info;

/* ---- Threads: a caller-owned pool (since ABI version 3) ------------------
 *
 * A library never creates threads. PREFIXrun takes, through its options, a
 * pool the caller owns (and may share between models and between calls):
 * parallel_for must return only after task(task_ctx, i, worker) has run
 * exactly once for every i in [0, n); `worker` < num_threads names the thread
 * that ran it (the library keeps per-worker scratch in the workspace). The
 * calling thread may run tasks itself. The library calls nothing but
 * parallel_for, and only from inside PREFIXrun.
 *
 * How a node's work is split into tasks is fixed when the model is compiled,
 * never by the number of threads, and every task computes its outputs with
 * the same operations in the same order: the outputs are bit-identical for
 * every pool, with any number of threads, and with no pool at all.
 *
 * `nnc_pool.h` (beside this header) is a ready pthread pool. */
typedef void (*nnc_task_fn)(void *task_ctx, uint32_t index, uint32_t worker);
typedef struct nnc_thread_pool {
    void *ctx;
    uint32_t num_threads;
    void (*parallel_for)(void *ctx, uint32_t n, nnc_task_fn task, void *task_ctx);
} nnc_thread_pool;

typedef struct nnc_run_options {
    uint32_t size;               /* sizeof(nnc_run_options): later versions append fields */
    const nnc_thread_pool *pool; /* NULL: everything on the calling thread */
    /* Bytes at `workspace`, checked against PREFIXworkspace_size(options) when
     * not 0 (0: the caller vouches for the size). */
    uint64_t workspace_bytes;
    /* Since ABI version 4: the values of the model's symbolic dims
     * (model_info()->num_dims of them), read when `size` reaches this field;
     * NULL (or a shorter `size`): every dim at its maximum. The workspace a
     * run needs does not depend on them. */
    const int64_t *dims;
    /* Since ABI version 5, read when `size` reaches this field. When not NULL,
     * a successful run (NNC_OK) writes every output's shape here: outputs in
     * order, `rank` entries each (the sum of model_info()->outputs[i].rank).
     * A bounded axis (nnc_bounded_axis) gets the extent of this run, every
     * other axis the size PREFIXshapes gives for the run's dims. On an error
     * return nothing is written here. infer and infer_with_workspace write
     * bounded outputs the same way but cannot report their extents: use run. */
    int64_t *output_shapes;
} nnc_run_options;

/* ---- Entry points -------------------------------------------------------
 *
 * infer:                uses a static arena inside the library, so it is
 *                       not reentrant: at most one call at a time per model.
 * infer_with_workspace: uses only the caller's `workspace`, so calls with
 *                       distinct workspaces may run concurrently.
 * model_info:           never NULL; the same static object on every call.
 * workspace_size:       the bytes of workspace a run with these options needs
 *                       (aligned to model_info()->workspace_align); NULL
 *                       options, or no pool, or a pool of one thread:
 *                       model_info()->workspace_size.
 * run:                  infer_with_workspace with options: NULL options, or
 *                       no pool, run everything on the calling thread; with a
 *                       pool, the nodes worth it are split into tasks run by
 *                       its parallel_for. Reentrant, allocates nothing: calls
 *                       with distinct workspaces (of workspace_size(options)
 *                       bytes each) may run concurrently, sharing one pool.
 *                       Returns the codes above. With options->output_shapes,
 *                       also reports every output's shape (the only way to
 *                       learn a bounded axis's extent).
 * shapes:               for dim values `dims` (NULL: each at its maximum),
 *                       writes the sizes of every input's axes, then every
 *                       output's, into `shapes` (the sum of their ranks),
 *                       a bounded axis with its largest size;
 *                       NNC_OK, or NNC_ERR_DIM_OUT_OF_RANGE writing nothing.
 *                       Since ABI version 4.
 */
typedef int32_t (*nnc_infer_fn)(const void *const *inputs, void *const *outputs);
typedef int32_t (*nnc_infer_with_workspace_fn)(const void *const *inputs,
                                               void *const *outputs,
                                               void *workspace);
typedef const nnc_model_info *(*nnc_model_info_fn)(void);
typedef uint64_t (*nnc_workspace_size_fn)(const nnc_run_options *options);
typedef int32_t (*nnc_run_fn)(const void *const *inputs, void *const *outputs,
                              void *workspace, const nnc_run_options *options);
typedef int32_t (*nnc_shapes_fn)(const int64_t *dims, int64_t *shapes);

/* Declares the entry points of a model compiled with the given PREFIX, e.g.
 * NNC_DECLARE_MODEL(foo_) or, for the default empty prefix,
 * NNC_DECLARE_MODEL(). The declarations carry C linkage themselves, since
 * the macro is expanded outside this header's extern "C" block. */
#ifdef __cplusplus
#define NNC_EXTERN_C extern "C"
#else
#define NNC_EXTERN_C extern
#endif
#define NNC_DECLARE_MODEL(PREFIX)                                              \
    NNC_EXTERN_C int32_t PREFIX##infer(const void *const *inputs,              \
                                       void *const *outputs);                  \
    NNC_EXTERN_C int32_t PREFIX##infer_with_workspace(                         \
        const void *const *inputs, void *const *outputs, void *workspace);     \
    NNC_EXTERN_C const nnc_model_info *PREFIX##model_info(void);               \
    NNC_EXTERN_C uint64_t PREFIX##workspace_size(                              \
        const nnc_run_options *options);                                       \
    NNC_EXTERN_C int32_t PREFIX##run(const void *const *inputs,                \
                                     void *const *outputs, void *workspace,    \
                                     const nnc_run_options *options);          \
    NNC_EXTERN_C int32_t PREFIX##shapes(const int64_t *dims, int64_t *shapes)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNC_H */
