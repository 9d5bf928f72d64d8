/* Runs the model of main.c through PREFIXrun with a caller-owned pool of 2 threads
 * (nnc_pool.h, header-only), on a workspace sized by PREFIXworkspace_size for those
 * options, and prints the output (the same numbers as main.c: the split into tasks
 * never changes a result). Build and run: make run-threads */
#include <stdio.h>
#include <stdlib.h>

#include "libmodel.h" /* written by `nnc compile model.onnx -o libmodel.so` */
#include "nnc_pool.h" /* runtime-abi/include: a pthread pool for run() */

int main(void) {
    float image[NNC_MODEL_INPUT_0_NUMEL];
    for (int i = 0; i < NNC_MODEL_INPUT_0_NUMEL; i++) image[i] = (float)i / 64.0f;
    float probs[NNC_MODEL_OUTPUT_0_NUMEL];
    const void *inputs[] = {image};
    void *outputs[] = {probs};

    /* One pool can serve any number of models and of concurrent run() calls. */
    nnc_pool *pool = nnc_pool_create(2);
    if (!pool) return 1;
    nnc_run_options options = {sizeof options, nnc_pool_get(pool), 0, NULL, NULL};
    uint64_t bytes = workspace_size(&options);
    uint64_t align = model_info()->workspace_align;
    options.workspace_bytes = bytes; /* run() checks it is enough */
    void *workspace = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!workspace) return 1;
    int32_t rc = run(inputs, outputs, workspace, &options);
    free(workspace);
    nnc_pool_destroy(pool);
    if (rc != NNC_OK) {
        fprintf(stderr, "run failed: %d\n", rc);
        return 1;
    }
    for (int i = 0; i < NNC_MODEL_OUTPUT_0_NUMEL; i++) printf(i ? " %.6f" : "%.6f", probs[i]);
    printf("\n");
    return 0;
}
