/*
 * fake_bounded.c — a hand-written stand-in for an nnc-compiled model with a
 * value-dependent output extent, used by tests/loader.rs to check the loader
 * and the C++ wrapper (examples/cpp/nnc.hpp) without the compiler.
 *
 * Model: NonZero of x, with a dim N = 1..6 set at run time:
 *   input  x       float[N]
 *   output indices int64[1, N]  the positions of x's nonzero elements; axis 1
 *                               is bounded: the run's extent is their count
 *   output count   int64 (rank 0), that count
 *
 * Build knobs (-D...):
 *   FAKE_ABI=4          the ABI 4 layout: a 72-byte nnc_model_info, no bounded
 *                       axes, output_shapes ignored. The struct ends where an
 *                       inaccessible page starts, so a loader reading past its
 *                       end crashes.
 *   FAKE_REPORT=v       reports v as the bounded extent instead of the count
 *   FAKE_REPORT_FIXED=v reports v for axis 0 of `indices` (which is always 1)
 *   FAKE_NO_REPORT      leaves output_shapes unwritten
 *   FAKE_BOUNDED_OUTPUT, FAKE_BOUNDED_AXIS
 *                       the bounded axis model_info declares (default 0, 1)
 *   FAKE_NO_RUN         exports neither run nor workspace_size (and has no dim,
 *                       which would need run): only infer can run it
 */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nnc.h"

#ifndef FAKE_ABI
#define FAKE_ABI 5
#endif
#ifndef FAKE_BOUNDED_OUTPUT
#define FAKE_BOUNDED_OUTPUT 0
#endif
#ifndef FAKE_BOUNDED_AXIS
#define FAKE_BOUNDED_AXIS 1
#endif

#define MAX_N 6
#define WORKSPACE_ALIGN 16

static const int64_t x_dims[] = {MAX_N};
static const int64_t indices_dims[] = {1, MAX_N};
static const nnc_tensor_info inputs_info[] = {
    {"x", NNC_DTYPE_FLOAT, 1, x_dims},
};
static const nnc_tensor_info outputs_info[] = {
    {"indices", NNC_DTYPE_INT64, 2, indices_dims},
    {"count", NNC_DTYPE_INT64, 0, NULL},
};
static const nnc_dim_info dims_info[] = {{"N", 1, MAX_N}};
/* x's axis 0 and indices' axis 1 (its bound) are N. */
static const nnc_axis_dim axis_dims[] = {{0, 0, 0, 0, 1}, {1, 1, 0, 0, 1}};
#ifdef FAKE_NO_RUN
#define NUM_DIMS 0
#define NUM_AXIS_DIMS 0
#else
#define NUM_DIMS 1
#define NUM_AXIS_DIMS 2
#endif

NNC_DECLARE_MODEL();

#if FAKE_ABI >= 5
static const nnc_bounded_axis bounded[] = {{FAKE_BOUNDED_OUTPUT, FAKE_BOUNDED_AXIS}};
static const nnc_model_info info = {
    FAKE_ABI, 1, 2, inputs_info, outputs_info, 0, WORKSPACE_ALIGN,
    NUM_DIMS, NUM_AXIS_DIMS, dims_info, axis_dims,
    1, bounded,
    NULL, /* axis_extents (ABI 6): the loader of an ABI 5 library never reads it */
    NULL, /* cpu_variants (ABI 10): likewise */
    NULL, /* required_cpu_features (ABI 10) */
};

const nnc_model_info *model_info(void) { return &info; }
#else
/* nnc_model_info as ABI 4 declared it. */
typedef struct {
    uint32_t abi_version, num_inputs, num_outputs;
    const nnc_tensor_info *inputs, *outputs;
    uint64_t workspace_size, workspace_align;
    uint32_t num_dims, num_axis_dims;
    const nnc_dim_info *dims;
    const nnc_axis_dim *axis_dims;
} model_info_v4;
_Static_assert(sizeof(model_info_v4) == 72, "the ABI 4 struct is 72 bytes on LP64");
static const model_info_v4 info = {
    FAKE_ABI, 1, 2, inputs_info, outputs_info, 0, WORKSPACE_ALIGN,
    NUM_DIMS, NUM_AXIS_DIMS, dims_info, axis_dims,
};

/* A copy of `info` in the last bytes of a page whose successor is mapped
 * without access (made on the first call; the tests call it from one thread). */
const nnc_model_info *model_info(void) {
    static const nnc_model_info *at_page_end;
    if (at_page_end == NULL) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        unsigned char *p =
            mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || mprotect(p + page, page, PROT_NONE) != 0)
            return (const nnc_model_info *)&info; /* unguarded, still an ABI 4 struct */
        memcpy(p + page - sizeof info, &info, sizeof info);
        at_page_end = (const nnc_model_info *)(p + page - sizeof info);
    }
    return at_page_end;
}
#endif

/* Runs for N = n, writing the shapes to `shapes` when not NULL. */
static int32_t nonzero(const void *const *inputs, void *const *outputs, void *workspace,
                       int64_t n, int64_t *shapes) {
    if (inputs == NULL || outputs == NULL || inputs[0] == NULL || outputs[0] == NULL ||
        outputs[1] == NULL)
        return NNC_ERR_NULL_POINTER;
    if (workspace == NULL || (uintptr_t)workspace % WORKSPACE_ALIGN != 0)
        return NNC_ERR_MISALIGNED_WORKSPACE;
    if (n < 1 || n > MAX_N)
        return NNC_ERR_DIM_OUT_OF_RANGE;
    const float *x = inputs[0];
    int64_t *indices = outputs[0], *count = outputs[1];
    int64_t found = 0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0.0f)
            indices[found++] = i;
    *count = found;
#ifndef FAKE_NO_REPORT
    if (shapes != NULL) {
#ifdef FAKE_REPORT_FIXED
        shapes[0] = FAKE_REPORT_FIXED;
#else
        shapes[0] = 1;
#endif
#ifdef FAKE_REPORT
        shapes[1] = FAKE_REPORT;
#else
        shapes[1] = found;
#endif
    }
#else
    (void)shapes;
#endif
    return NNC_OK;
}

int32_t infer_with_workspace(const void *const *inputs, void *const *outputs, void *workspace) {
    return nonzero(inputs, outputs, workspace, MAX_N, NULL);
}

int32_t infer(const void *const *inputs, void *const *outputs) {
    static _Alignas(WORKSPACE_ALIGN) unsigned char arena[1];
    return infer_with_workspace(inputs, outputs, arena);
}

#ifndef FAKE_NO_RUN
/* Whether `options` (of `options->size` bytes) reaches the field ending at `end`. */
#define HAS(options, end) ((options)->size >= (end))

uint64_t workspace_size(const nnc_run_options *options) {
    (void)options;
    return 0;
}

int32_t run(const void *const *inputs, void *const *outputs, void *workspace,
            const nnc_run_options *options) {
    int64_t n = MAX_N;
    int64_t *shapes = NULL;
    if (options != NULL) {
        if (!HAS(options, offsetof(nnc_run_options, workspace_bytes) + sizeof(uint64_t)))
            return NNC_ERR_BAD_OPTIONS;
        if (HAS(options, offsetof(nnc_run_options, dims) + sizeof(void *)) &&
            options->dims != NULL)
            n = options->dims[0];
#if FAKE_ABI >= 5
        if (HAS(options, offsetof(nnc_run_options, output_shapes) + sizeof(void *)))
            shapes = options->output_shapes;
#endif
    }
    return nonzero(inputs, outputs, workspace, n, shapes);
}
#endif

int32_t shapes(const int64_t *dims, int64_t *out) {
    int64_t n = dims != NULL ? dims[0] : MAX_N;
    if (n < 1 || n > MAX_N)
        return NNC_ERR_DIM_OUT_OF_RANGE;
    out[0] = n; /* x */
    out[1] = 1; /* indices: its largest extent */
    out[2] = n;
    return NNC_OK;
}
