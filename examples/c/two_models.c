/* Links two models into one program: model.onnx compiled with `--name digits_a` and
 * second.onnx compiled with `--name second`. Each library exports only its own
 * PREFIXinfer, PREFIXinfer_with_workspace and PREFIXmodel_info (everything else in
 * it is local), so the two link side by side, shared or static, without clashes.
 * Prints digits_a's output on the first line and second's on the second.
 * Build and run: make run-two   (or make run-two-static; see README.md) */
#include <stdio.h>
#include <stdlib.h>

/* Both headers carry the shared ABI part (nnc.h) under one include guard, plus
 * their own NNC_<NAME>_* defines and prefixed declarations. */
#include "libdigits_a.h" /* nnc compile model.onnx --name digits_a -o libdigits_a.so */
#include "libsecond.h"   /* nnc compile second.onnx --name second -o libsecond.so */

static void print_row(const float *v, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %.6f" : "%.6f", v[i]);
    printf("\n");
}

int main(void) {
    /* digits_a: the same ramp image as main.c, run with the library's own arena. */
    float image[NNC_DIGITS_A_INPUT_0_NUMEL];
    for (int i = 0; i < NNC_DIGITS_A_INPUT_0_NUMEL; i++) image[i] = (float)i / 64.0f;
    float probs[NNC_DIGITS_A_OUTPUT_0_NUMEL];
    const void *a_inputs[] = {image};
    void *a_outputs[] = {probs};
    int32_t rc = digits_a_infer(a_inputs, a_outputs);
    if (rc != NNC_OK) {
        fprintf(stderr, "digits_a_infer failed: %d\n", rc);
        return 1;
    }

    /* second: run with a caller-owned workspace, sized and aligned from its header
     * (aligned_alloc wants a size that is a non-zero multiple of the alignment). */
    size_t align = NNC_SECOND_WORKSPACE_ALIGN;
    size_t size = (NNC_SECOND_WORKSPACE_SIZE + align - 1) / align * align;
    void *workspace = aligned_alloc(align, size ? size : align);
    if (!workspace) return 1;
    float features[NNC_SECOND_INPUT_0_NUMEL]; /* -1.0, -0.5, ..., as in make_second_model.py */
    for (int i = 0; i < NNC_SECOND_INPUT_0_NUMEL; i++) features[i] = 0.5f * (float)i - 1.0f;
    float scores[NNC_SECOND_OUTPUT_0_NUMEL];
    const void *b_inputs[] = {features};
    void *b_outputs[] = {scores};
    rc = second_infer_with_workspace(b_inputs, b_outputs, workspace);
    free(workspace);
    if (rc != NNC_OK) {
        fprintf(stderr, "second_infer_with_workspace failed: %d\n", rc);
        return 1;
    }

    /* Each model_info describes its own model: a sign that the symbols resolved to
     * the right library. Diagnostics go to stderr; stdout holds only the numbers. */
    fprintf(stderr, "digits_a: input \"%s\", second: input \"%s\"\n",
            digits_a_model_info()->inputs[0].name, second_model_info()->inputs[0].name);
    print_row(probs, NNC_DIGITS_A_OUTPUT_0_NUMEL);
    print_row(scores, NNC_SECOND_OUTPUT_0_NUMEL);
    return 0;
}
