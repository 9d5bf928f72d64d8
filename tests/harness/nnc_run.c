/*
 * nnc_run — run an nnc-compiled model library on raw tensor files.
 *
 *   nnc_run LIB.so PREFIX IN_DIR OUT_DIR
 *
 * Loads LIB.so, looks up PREFIXmodel_info and PREFIXinfer_with_workspace
 * (PREFIX may be "", the default of `nnc`), reads input i from
 * IN_DIR/input_<i>.bin, runs the model on a freshly allocated workspace and
 * writes output i to OUT_DIR/output_<i>.bin. Tensor files hold the dense
 * row-major little-endian bytes of the tensor, nothing else; an input file
 * must have exactly the size model_info gives.
 *
 * With NNC_RUN_THREADS=N in the environment it calls PREFIXrun with a pool of
 * N threads (nnc_pool.h) on a workspace of PREFIXworkspace_size bytes instead.
 * A model with outputs whose extent the input values decide (ABI 5 bounded
 * axes) always runs through PREFIXrun, which reports every output's shape:
 * output i is then written for that shape, and OUT_DIR/output_<i>.shape
 * holds its sizes as decimal numbers, one per line.
 *
 * Exit status: 0 on success, 1 on any error (message on stderr), 2 on bad
 * usage, 3 when the model's infer returned a non-zero code.
 *
 * Plain C11 + POSIX so it builds for any target the compiler emits code for,
 * e.g. aarch64 under qemu-aarch64; see README.md next to this file.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"
#include "nnc_pool.h"

enum { EXIT_USAGE = 2, EXIT_INFER_FAILED = 3 };

/* Tensor buffers get cache-line alignment: at least what any element type
 * or vector load in compiled code could want. */
enum { TENSOR_ALIGN = 64 };

static void fail(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fputs("nnc_run: error: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    exit(EXIT_FAILURE);
}

/* Bytes per element of a dense tensor of this dtype; 0 when the dtype has no
 * whole-byte element (strings, packed sub-byte types) or is unknown. */
static size_t dtype_size(int32_t dtype) {
    switch (dtype) {
    case NNC_DTYPE_UINT8:
    case NNC_DTYPE_INT8:
    case NNC_DTYPE_BOOL:
    case NNC_DTYPE_FLOAT8E4M3FN:
    case NNC_DTYPE_FLOAT8E4M3FNUZ:
    case NNC_DTYPE_FLOAT8E5M2:
    case NNC_DTYPE_FLOAT8E5M2FNUZ:
    case NNC_DTYPE_FLOAT8E8M0:
        return 1;
    case NNC_DTYPE_UINT16:
    case NNC_DTYPE_INT16:
    case NNC_DTYPE_FLOAT16:
    case NNC_DTYPE_BFLOAT16:
        return 2;
    case NNC_DTYPE_FLOAT:
    case NNC_DTYPE_INT32:
    case NNC_DTYPE_UINT32:
        return 4;
    case NNC_DTYPE_INT64:
    case NNC_DTYPE_UINT64:
    case NNC_DTYPE_DOUBLE:
    case NNC_DTYPE_COMPLEX64:
        return 8;
    case NNC_DTYPE_COMPLEX128:
        return 16;
    default:
        return 0;
    }
}

/* Dense byte size of a tensor described by model_info; fails on anything
 * the ABI does not allow (negative dims, non-dense dtypes, overflow). */
static size_t tensor_bytes(const char *role, uint32_t index, const nnc_tensor_info *t) {
    const char *name = t->name ? t->name : "?";
    /* 4- and 2-bit types are packed: count elements, then round up to bytes. */
    unsigned per_byte = 1;
    switch (t->dtype) {
    case NNC_DTYPE_UINT4:
    case NNC_DTYPE_INT4:
    case NNC_DTYPE_FLOAT4E2M1:
        per_byte = 2;
        break;
    case NNC_DTYPE_UINT2:
    case NNC_DTYPE_INT2:
        per_byte = 4;
        break;
    default:
        break;
    }
    size_t bytes = per_byte > 1 ? 1 : dtype_size(t->dtype);
    if (bytes == 0)
        fail("%s %u '%s': dtype %d has no dense byte size", role, index, name, t->dtype);
    if (t->rank < 0 || (t->rank > 0 && t->dims == NULL))
        fail("%s %u '%s': invalid rank %d / dims", role, index, name, t->rank);
    for (int32_t d = 0; d < t->rank; d++) {
        int64_t dim = t->dims[d];
        if (dim < 0)
            fail("%s %u '%s': dimension %d is %lld", role, index, name, d, (long long)dim);
        if (dim != 0 && bytes > SIZE_MAX / (uint64_t)dim)
            fail("%s %u '%s': size overflows", role, index, name);
        bytes *= (size_t)dim;
    }
    return per_byte > 1 ? (bytes + per_byte - 1) / per_byte : bytes;
}

/* Aligned buffer of `bytes` (never NULL, even for 0 bytes, because the
 * model rejects NULL tensor pointers). */
static void *alloc_aligned(size_t align, size_t bytes, const char *what) {
    void *p = NULL;
    int err = posix_memalign(&p, align, bytes ? bytes : 1);
    if (err != 0)
        fail("cannot allocate %zu bytes for %s: %s", bytes, what, strerror(err));
    return p;
}

/* dlsym for a function: goes through memcpy because ISO C has no
 * conversion from void * to a function pointer. */
static void lookup(void *lib, const char *prefix, const char *base, void *fn_out, size_t fn_size) {
    char symbol[256];
    if (snprintf(symbol, sizeof symbol, "%s%s", prefix, base) >= (int)sizeof symbol)
        fail("prefix '%s' is too long", prefix);
    dlerror();
    void *sym = dlsym(lib, symbol);
    const char *err = dlerror();
    if (err != NULL || sym == NULL)
        fail("symbol '%s' not found: %s", symbol, err ? err : "null address");
    memcpy(fn_out, &sym, fn_size);
}

/* DIR/ROLE_<index>.bin, the file of one tensor. */
static void tensor_path(char *buf, size_t size, const char *dir, const char *role, uint32_t index) {
    if (snprintf(buf, size, "%s/%s_%u.bin", dir, role, index) >= (int)size)
        fail("path under %s is too long", dir);
}

static void read_exact(const char *path, void *buf, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail("cannot open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        fail("cannot seek %s: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0)
        fail("cannot size %s: %s", path, strerror(errno));
    if ((unsigned long)size != bytes)
        fail("%s has %ld bytes, the model expects %zu", path, size, bytes);
    rewind(f);
    if (fread(buf, 1, bytes, f) != bytes)
        fail("cannot read %s", path);
    fclose(f);
}

static void write_all(const char *path, const void *buf, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        fail("cannot create %s: %s", path, strerror(errno));
    if (fwrite(buf, 1, bytes, f) != bytes || fclose(f) != 0)
        fail("cannot write %s: %s", path, strerror(errno));
}

static const char *status_name(int32_t status) {
    switch (status) {
    case NNC_ERR_NULL_POINTER:
        return "NNC_ERR_NULL_POINTER";
    case NNC_ERR_MISALIGNED_WORKSPACE:
        return "NNC_ERR_MISALIGNED_WORKSPACE";
    case NNC_ERR_INDEX_OUT_OF_RANGE:
        return "NNC_ERR_INDEX_OUT_OF_RANGE";
    case NNC_ERR_BAD_OPTIONS:
        return "NNC_ERR_BAD_OPTIONS";
    case NNC_ERR_WORKSPACE_TOO_SMALL:
        return "NNC_ERR_WORKSPACE_TOO_SMALL";
    case NNC_ERR_DIM_OUT_OF_RANGE:
        return "NNC_ERR_DIM_OUT_OF_RANGE";
    case NNC_ERR_DIMS_INCONSISTENT:
        return "NNC_ERR_DIMS_INCONSISTENT";
    case NNC_ERR_SHAPE_INPUT_MISMATCH:
        return "NNC_ERR_SHAPE_INPUT_MISMATCH";
    case NNC_ERR_UNSUPPORTED_CPU:
        return "NNC_ERR_UNSUPPORTED_CPU";
    default:
        return "unknown error code";
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s LIB.so PREFIX IN_DIR OUT_DIR   (PREFIX may be \"\")\n",
                argc > 0 ? argv[0] : "nnc_run");
        return EXIT_USAGE;
    }
    const char *lib_path = argv[1], *prefix = argv[2], *in_dir = argv[3], *out_dir = argv[4];

    /* The files are little-endian and copied verbatim into the model. */
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1)
        fail("big-endian hosts are not supported");

    void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        fail("cannot load %s: %s", lib_path, dlerror());

    nnc_model_info_fn model_info;
    nnc_infer_with_workspace_fn infer_with_workspace;
    lookup(lib, prefix, "model_info", &model_info, sizeof model_info);
    lookup(lib, prefix, "infer_with_workspace", &infer_with_workspace, sizeof infer_with_workspace);

    const nnc_model_info *info = model_info();
    if (info == NULL)
        fail("%smodel_info() returned NULL", prefix);
    if (info->abi_version != NNC_ABI_VERSION)
        fail("library has ABI version %u, nnc_run speaks %d", info->abi_version, NNC_ABI_VERSION);
    if ((info->num_inputs > 0 && info->inputs == NULL) ||
        (info->num_outputs > 0 && info->outputs == NULL))
        fail("model_info has NULL input/output descriptions");

    char path[4096];
    size_t in_total = 0, out_total = 0;

    /* calloc(0) may return NULL, so arrays get at least one slot. */
    const void **inputs = calloc((size_t)info->num_inputs + 1, sizeof *inputs);
    void **outputs = calloc((size_t)info->num_outputs + 1, sizeof *outputs);
    size_t *out_bytes = calloc((size_t)info->num_outputs + 1, sizeof *out_bytes);
    if (inputs == NULL || outputs == NULL || out_bytes == NULL)
        fail("out of memory");

    for (uint32_t i = 0; i < info->num_inputs; i++) {
        size_t bytes = tensor_bytes("input", i, &info->inputs[i]);
        void *buf = alloc_aligned(TENSOR_ALIGN, bytes, "an input");
        tensor_path(path, sizeof path, in_dir, "input", i);
        read_exact(path, buf, bytes);
        inputs[i] = buf;
        in_total += bytes;
    }
    for (uint32_t i = 0; i < info->num_outputs; i++) {
        out_bytes[i] = tensor_bytes("output", i, &info->outputs[i]);
        outputs[i] = alloc_aligned(TENSOR_ALIGN, out_bytes[i], "an output");
        out_total += out_bytes[i];
    }

    uint64_t ws_align = info->workspace_align;
    if (ws_align == 0 || (ws_align & (ws_align - 1)) != 0 || ws_align > SIZE_MAX)
        fail("workspace_align %llu is not a usable power of two", (unsigned long long)ws_align);
    if (info->workspace_size > SIZE_MAX)
        fail("workspace_size %llu does not fit in memory",
             (unsigned long long)info->workspace_size);
    /* posix_memalign needs a multiple of sizeof(void *); any larger power
     * of two is still a multiple of the model's alignment. */
    size_t alloc_align = ws_align < sizeof(void *) ? sizeof(void *) : (size_t)ws_align;
    const char *threads = getenv("NNC_RUN_THREADS");
    int bounded = info->abi_version >= 5 && info->num_bounded_axes > 0;
    size_t total_rank = 0;
    for (uint32_t i = 0; i < info->num_outputs; i++)
        total_rank += (size_t)info->outputs[i].rank;
    int64_t *shapes = calloc(total_rank + 1, sizeof *shapes);
    if (shapes == NULL)
        fail("out of memory");
    int32_t status;
    void *workspace;
    if ((threads != NULL && atoi(threads) > 0) || bounded) {
        nnc_workspace_size_fn workspace_size;
        nnc_run_fn run;
        lookup(lib, prefix, "workspace_size", &workspace_size, sizeof workspace_size);
        lookup(lib, prefix, "run", &run, sizeof run);
        nnc_pool *pool = NULL;
        if (threads != NULL && atoi(threads) > 0) {
            pool = nnc_pool_create((uint32_t)atoi(threads));
            if (pool == NULL)
                fail("cannot start %s threads", threads);
        }
        nnc_run_options options = {sizeof options, pool ? nnc_pool_get(pool) : NULL, 0, NULL,
                                   bounded ? shapes : NULL};
        uint64_t bytes = workspace_size(&options);
        if (bytes > SIZE_MAX)
            fail("workspace_size %llu does not fit in memory", (unsigned long long)bytes);
        options.workspace_bytes = bytes;
        workspace = alloc_aligned(alloc_align, (size_t)bytes, "the workspace");
        status = run(inputs, (void *const *)outputs, workspace, &options);
        if (pool != NULL)
            nnc_pool_destroy(pool);
    } else {
        workspace = alloc_aligned(alloc_align, (size_t)info->workspace_size, "the workspace");
        status = infer_with_workspace(inputs, (void *const *)outputs, workspace);
    }
    if (status != NNC_OK) {
        fprintf(stderr, "nnc_run: error: %s%s returned %d (%s)\n", prefix,
                threads || bounded ? "run" : "infer_with_workspace", status,
                status_name(status));
        if (status == NNC_ERR_UNSUPPORTED_CPU && info->abi_version >= 10)
            fprintf(stderr, "nnc_run: the library needs a CPU with %s (its variants: %s)\n",
                    info->required_cpu_features, info->cpu_variants);
        return EXIT_INFER_FAILED;
    }

    const int64_t *shape = shapes;
    for (uint32_t i = 0; i < info->num_outputs; i++) {
        const nnc_tensor_info *t = &info->outputs[i];
        size_t bytes = out_bytes[i];
        if (bounded) {
            /* The reported shape, checked against the bound before it sizes a write. */
            nnc_tensor_info actual = *t;
            actual.dims = shape;
            for (int32_t d = 0; d < t->rank; d++)
                if (shape[d] < 0 || shape[d] > t->dims[d])
                    fail("output %u: reported size %lld of axis %d exceeds %lld", i,
                         (long long)shape[d], d, (long long)t->dims[d]);
            bytes = tensor_bytes("output", i, &actual);
            snprintf(path, sizeof path, "%s/output_%u.shape", out_dir, i);
            FILE *f = fopen(path, "w");
            if (f == NULL)
                fail("cannot write %s: %s", path, strerror(errno));
            for (int32_t d = 0; d < t->rank; d++)
                fprintf(f, "%lld\n", (long long)shape[d]);
            if (fclose(f) != 0)
                fail("cannot write %s: %s", path, strerror(errno));
            shape += t->rank;
        }
        tensor_path(path, sizeof path, out_dir, "output", i);
        write_all(path, outputs[i], bytes);
    }
    free(shapes);

    printf("nnc_run: ok: %s prefix='%s' inputs=%u (%zu B) outputs=%u (%zu B) "
           "workspace=%llu B align=%llu\n",
           lib_path, prefix, info->num_inputs, in_total, info->num_outputs, out_total,
           (unsigned long long)info->workspace_size, (unsigned long long)ws_align);

    for (uint32_t i = 0; i < info->num_inputs; i++)
        free((void *)inputs[i]);
    for (uint32_t i = 0; i < info->num_outputs; i++)
        free(outputs[i]);
    free(inputs);
    free(outputs);
    free(out_bytes);
    free(workspace);
    dlclose(lib);
    return EXIT_SUCCESS;
}
