// Runs ../c/model.onnx, compiled with `--name digits`, through the nnc.hpp wrapper and
// prints its output like ../c/main.c does, so it checks against ../c/expected.txt.
// Build and run: make run   (see README.md)
#include <algorithm>
#include <cstdio>
#include <vector>

#include "libdigits.h" // written by `nnc compile ../c/model.onnx --name digits -o libdigits.so`
#include "libbatch.h"  // `nnc compile ../c/batch_model.onnx --name batch --dim N=1..4`
#include "nnc.hpp"
#include "nnc_pool.h" // runtime-abi/include: a pthread pool for PREFIXrun

int main() {
    try {
        nnc::Model model(digits_infer_with_workspace, digits_model_info);

        // The same 1x1x8x8 ramp as main.c; sizes come from model_info.
        std::vector<float> image(nnc::numel(model.info().inputs[0]));
        for (size_t i = 0; i < image.size(); i++) image[i] = static_cast<float>(i) / 64.0f;
        std::vector<float> probs(nnc::numel(model.info().outputs[0]));
        model.run({image}, {probs});

        // A buffer of the wrong size is refused before the library sees it.
        std::vector<float> short_image(image.size() - 1);
        try {
            model.run({short_image}, {probs});
            std::fprintf(stderr, "a short input was accepted\n");
            return 1;
        } catch (const nnc::Error &e) {
            std::fprintf(stderr, "refused as expected (code %d): %s\n", e.code(), e.what());
        }

        // Through PREFIXrun with a pool of 2 threads: the same numbers, bit for bit.
        nnc_pool *pool = nnc_pool_create(2);
        if (!pool) return 1;
        {
            nnc::Model pooled(digits_run, digits_workspace_size, digits_model_info,
                              nnc_pool_get(pool));
            std::vector<float> pooled_probs(probs.size());
            pooled.run({image}, {pooled_probs});
            if (pooled_probs != probs) {
                std::fprintf(stderr, "the pooled run differs\n");
                return 1;
            }
        }

        // One library for every batch of 1 to 4 images: three at once, the first the
        // same ramp, so its row equals `probs` bit for bit (the same compiled code).
        {
            nnc::Model batch(batch_run, batch_workspace_size, batch_model_info,
                             nnc_pool_get(pool));
            std::vector<float> images(3 * image.size(), 0.5f);
            std::copy(image.begin(), image.end(), images.begin());
            std::vector<float> rows(batch.numel_for(1, std::vector<int64_t>{3}.data()));
            batch.run({3}, {images}, {rows});
            if (rows.size() != 3 * probs.size() ||
                !std::equal(probs.begin(), probs.end(), rows.begin())) {
                std::fprintf(stderr, "the batch run's first row differs\n");
                return 1;
            }
            try {
                std::vector<float> five(5 * image.size()), out(5 * probs.size());
                batch.run({5}, {five}, {out});
                std::fprintf(stderr, "a batch of 5 was accepted\n");
                return 1;
            } catch (const nnc::Error &e) {
                if (e.code() != NNC_ERR_DIM_OUT_OF_RANGE) return 1;
                std::fprintf(stderr, "batch of 5 refused as expected: %s\n", e.what());
            }
        }
        nnc_pool_destroy(pool);

        // Only the numbers go to stdout, for check_close.py.
        for (size_t i = 0; i < probs.size(); i++) std::printf(i ? " %.6f" : "%.6f", probs[i]);
        std::printf("\n");
    } catch (const nnc::Error &e) {
        std::fprintf(stderr, "nnc error %d: %s\n", e.code(), e.what());
        return 1;
    }
    return 0;
}
