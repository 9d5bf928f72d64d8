/* The K loops an AVX2 INT8 convolution can be built from, timed alone on data in L1:
 * how many u8 x s8 multiply-adds per cycle each sustains on this CPU, to see how far
 * a whole model is from its kernel's bound and what another scheme would buy.
 *
 *   cc -O2 benches/x86_int8_dot_loops.c -o /tmp/dot_loops && taskset -c 1 /tmp/dot_loops
 *
 * One iteration is one K step (4 channels) of a register tile of 4 maps x 8 pixels
 * (128 multiply-adds), except `6x4` (6 maps x 4 pixels, 96). The clock is estimated
 * from a chain of dependent adds (1 per cycle).
 *
 * - exact16:        nnc's `u8s8-conv-4x8-avx2`: planes widened (vpmovzxbw), int16
 *                   weights broadcast, vpmaddwd + vpaddd. Exact.
 * - exact16-wide:   the same with planes stored as int16 (no widening in the loop).
 * - exact16-6x4:    6 maps x 4 pixels, planes stored as int16.
 * - exact16-w8:     weights kept int8 and widened in the loop (vpbroadcastd + vpmovsxbw).
 * - maddubs:        vpmaddubsw + vpmaddwd(ones) + vpaddd, as onnxruntime's AVX2 kernels:
 *                   saturates when a pair of products passes 32767, so it is not exact
 *                   for 8-bit weights (shown for its speed only).
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static uint8_t planes[4096] __attribute__((aligned(64)));
static int16_t weights[4096] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define MAP(W, A0, A1, B0, B1) \
    "vpbroadcastq " W ",%%ymm10\n vpmaddwd %%ymm" B0 ",%%ymm10,%%ymm11\n vpaddd %%ymm11,%%ymm" A0 ",%%ymm" A0 "\n" \
    "vpmaddwd %%ymm" B1 ",%%ymm10,%%ymm12\n vpaddd %%ymm12,%%ymm" A1 ",%%ymm" A1 "\n"

/* A 4 x 8 tile's K step on the two plane registers LOADS fills. */
#define EXACT16_4X8(NAME, LOADS)                                                                 \
    static void NAME(long n) {                                                                   \
        __asm__ volatile("1:\n" LOADS MAP("(%1)", "0", "1", "8", "9") MAP("8(%1)", "2", "3", "8", "9") \
                         MAP("16(%1)", "4", "5", "8", "9") MAP("24(%1)", "6", "7", "8", "9")   \
                         "dec %2\n jnz 1b\n"                                                    \
                         : "+r"((void *){planes}), "+r"((void *){weights}), "+r"(n)              \
                         :                                                                       \
                         : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",     \
                           "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12");                   \
    }

EXACT16_4X8(exact16, "vpmovzxbw (%0),%%ymm8\n vpmovzxbw 16(%0),%%ymm9\n")
EXACT16_4X8(exact16_wide, "vmovdqu (%0),%%ymm8\n vmovdqu 32(%0),%%ymm9\n")

#define MAP1(W, A) "vpbroadcastq " W ",%%ymm10\n vpmaddwd %%ymm8,%%ymm10,%%ymm11\n vpaddd %%ymm11,%%ymm" A ",%%ymm" A "\n"

static void exact16_6x4(long n) {
    __asm__ volatile("1:\n vmovdqu (%0),%%ymm8\n"
                     MAP1("(%1)", "0") MAP1("8(%1)", "1") MAP1("16(%1)", "2")
                     MAP1("24(%1)", "3") MAP1("32(%1)", "4") MAP1("40(%1)", "5")
                     "dec %2\n jnz 1b\n"
                     : "+r"((void *){planes}), "+r"((void *){weights}), "+r"(n)
                     :
                     : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm8",
                       "xmm10", "xmm11");
}

#define MAPW8(W, A0, A1) \
    "vpbroadcastd " W ",%%xmm10\n vpmovsxbw %%xmm10,%%ymm10\n" \
    "vpmaddwd %%ymm8,%%ymm10,%%ymm11\n vpaddd %%ymm11,%%ymm" A0 ",%%ymm" A0 "\n" \
    "vpmaddwd %%ymm9,%%ymm10,%%ymm12\n vpaddd %%ymm12,%%ymm" A1 ",%%ymm" A1 "\n"

static void exact16_w8(long n) {
    __asm__ volatile("1:\n vpmovzxbw (%0),%%ymm8\n vpmovzxbw 16(%0),%%ymm9\n"
                     MAPW8("(%1)", "0", "1") MAPW8("4(%1)", "2", "3")
                     MAPW8("8(%1)", "4", "5") MAPW8("12(%1)", "6", "7")
                     "dec %2\n jnz 1b\n"
                     : "+r"((void *){planes}), "+r"((void *){weights}), "+r"(n)
                     :
                     : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11", "xmm12");
}

#define UBS(W, A) \
    "vpbroadcastd " W ",%%ymm10\n vpmaddubsw %%ymm10,%%ymm8,%%ymm11\n" \
    "vpmaddwd %%ymm15,%%ymm11,%%ymm11\n vpaddd %%ymm11,%%ymm" A ",%%ymm" A "\n"

static void maddubs(long n) {
    __asm__ volatile("vpcmpeqw %%ymm15,%%ymm15,%%ymm15\n vpsrlw $15,%%ymm15,%%ymm15\n"
                     "1:\n vmovdqu (%0),%%ymm8\n"
                     UBS("(%1)", "0") UBS("4(%1)", "1") UBS("8(%1)", "2") UBS("12(%1)", "3")
                     "dec %2\n jnz 1b\n"
                     : "+r"((void *){planes}), "+r"((void *){weights}), "+r"(n)
                     :
                     : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm8", "xmm10", "xmm11",
                       "xmm15");
}

static double ghz(void) {
    long n = 400000000;
    unsigned long x = 0;
    double t = now();
    for (long i = 0; i < n; i++)
        __asm__ volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(x));
    return 4.0 * n / (now() - t) / 1e9;
}

int main(void) {
    struct {
        const char *name;
        void (*loop)(long);
        double macs;
    } loops[] = {{"exact16", exact16, 128},         {"exact16-wide", exact16_wide, 128},
                 {"exact16-6x4", exact16_6x4, 96},  {"exact16-w8", exact16_w8, 128},
                 {"maddubs", maddubs, 128}};
    const long n = 50000000;
    double clock = ghz();
    printf("clock ~%.2f GHz (dependent adds)\n%-14s %8s %8s %10s\n", clock, "loop", "GMAC/s",
           "MAC/cyc", "ns/iter");
    for (unsigned i = 0; i < sizeof loops / sizeof loops[0]; i++) {
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = now();
            loops[i].loop(n);
            t = now() - t;
            if (t < best) best = t;
        }
        double gmacs = loops[i].macs * n / best / 1e9;
        printf("%-14s %8.1f %8.1f %10.2f\n", loops[i].name, gmacs, gmacs / clock, best / n * 1e9);
    }
    return 0;
}
