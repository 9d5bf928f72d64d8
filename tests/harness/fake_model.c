/*
 * fake_model.c — a hand-written stand-in for an nnc-compiled model, used by
 * selftest.sh to check nnc_run without the compiler.
 *
 * Model: input  x       float[4]
 *        output doubled float[4] = 2 * x
 *        output sum     float (rank 0) = sum of doubled
 * It keeps `doubled` in the workspace before copying it out, so a workspace
 * that is not writable or too small shows up as a crash or wrong output.
 *
 * Build knobs (-D...):
 *   NNC_PREFIX           symbol prefix, e.g. -DNNC_PREFIX=fake_ (default none)
 *   FAKE_WORKSPACE_SIZE  declared workspace size (default 16; 0 exercises the
 *                        harness's empty-workspace path, and then the model
 *                        keeps its scratch on the stack)
 *   FAKE_STATUS          forces infer to return this code after its checks,
 *                        to exercise the harness's error path
 */
#include <stdint.h>
#include <string.h>

#include "nnc.h"

#ifndef NNC_PREFIX
#define NNC_PREFIX
#endif
#ifndef FAKE_WORKSPACE_SIZE
#define FAKE_WORKSPACE_SIZE 16
#endif
#ifndef FAKE_STATUS
#define FAKE_STATUS NNC_OK
#endif

#define WORKSPACE_ALIGN 64

/* Two-level paste so NNC_PREFIX is expanded before it is joined. */
#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#define SYMBOL(name) PASTE(NNC_PREFIX, name)

static const int64_t x_dims[] = {4};
static const nnc_tensor_info inputs_info[] = {
    {"x", NNC_DTYPE_FLOAT, 1, x_dims},
};
static const nnc_tensor_info outputs_info[] = {
    {"doubled", NNC_DTYPE_FLOAT, 1, x_dims},
    {"sum", NNC_DTYPE_FLOAT, 0, NULL},
};
static const nnc_model_info info = {
    NNC_ABI_VERSION, 1, 2, inputs_info, outputs_info, FAKE_WORKSPACE_SIZE, WORKSPACE_ALIGN,
    0, 0, NULL, NULL, 0, NULL, NULL,
    "baseline", "", /* cpu_variants, required_cpu_features (ABI 10) */
};

NNC_DECLARE_MODEL(NNC_PREFIX);

const nnc_model_info *SYMBOL(model_info)(void) { return &info; }

int32_t SYMBOL(infer_with_workspace)(const void *const *inputs, void *const *outputs,
                                     void *workspace) {
    if (inputs == NULL || outputs == NULL || inputs[0] == NULL || outputs[0] == NULL ||
        outputs[1] == NULL)
        return NNC_ERR_NULL_POINTER;
    if (workspace == NULL || (uintptr_t)workspace % WORKSPACE_ALIGN != 0)
        return NNC_ERR_MISALIGNED_WORKSPACE;
    if (FAKE_STATUS != NNC_OK)
        return FAKE_STATUS;

    float local[4];
    float *doubled = FAKE_WORKSPACE_SIZE >= sizeof local ? (float *)workspace : local;
    const float *x = inputs[0];
    float sum = 0.0f;
    for (int i = 0; i < 4; i++) {
        doubled[i] = 2.0f * x[i];
        sum += doubled[i];
    }
    memcpy(outputs[0], doubled, sizeof local);
    memcpy(outputs[1], &sum, sizeof sum);
    return NNC_OK;
}

int32_t SYMBOL(infer)(const void *const *inputs, void *const *outputs) {
    static _Alignas(WORKSPACE_ALIGN) unsigned char arena[FAKE_WORKSPACE_SIZE + 1];
    return SYMBOL(infer_with_workspace)(inputs, outputs, arena);
}
