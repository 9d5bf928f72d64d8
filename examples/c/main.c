/* Links a model compiled by nnc and prints its output.
 * Build and run: make run   (see README.md) */
#include <stdio.h>
#include <stdlib.h>

#include "libmodel.h" /* written by `nnc compile model.onnx -o libmodel.so` */

int main(void) {
    const nnc_model_info *info = model_info();
    if (info->abi_version != NNC_ABI_VERSION) {
        fprintf(stderr, "unexpected ABI version %u\n", info->abi_version);
        return 1;
    }
    /* The input: a 1x1x8x8 ramp, the same one make_model.py used for expected.txt. */
    float image[NNC_MODEL_INPUT_0_NUMEL];
    for (int i = 0; i < NNC_MODEL_INPUT_0_NUMEL; i++) image[i] = (float)i / 64.0f;
    float probs[NNC_MODEL_OUTPUT_0_NUMEL];

    const void *inputs[] = {image};
    void *outputs[] = {probs};
    int32_t rc = infer(inputs, outputs);
    if (rc != NNC_OK) {
        fprintf(stderr, "infer failed: %d\n", rc);
        return 1;
    }
    for (int i = 0; i < NNC_MODEL_OUTPUT_0_NUMEL; i++) printf(i ? " %.6f" : "%.6f", probs[i]);
    printf("\n");
    return 0;
}
