/* bench/bench_windows.py's timing program: LOADER is the generated loader's name. */
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>
#include "LOADER.h"
static int cmp(const void* a, const void* b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {
    char error[512] = "";
    int calls = atoi(argv[2]), rank = argc - 3;
    int64_t shape[8]; size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)(shape[i] = atoll(argv[3 + i]));
    float* input = calloc(n, sizeof(float)); for (size_t i = 0; i < n; i++) input[i] = (float)(i % 7) / 7;
    float* output = malloc(1 << 24); int64_t oshape[8]; int orank;
    LOADER_model* m = LOADER_open(argv[1], error, sizeof error);
    if (!m) { fprintf(stderr, "%s\n", error); return 1; }
    double* t = malloc(sizeof(double) * calls); LARGE_INTEGER f, a, b; QueryPerformanceFrequency(&f);
    for (int i = 0; i < 10 + calls; i++) {
        QueryPerformanceCounter(&a);
        if (LOADER_run(m, input, shape, rank, output, 1 << 22, oshape, &orank, error, sizeof error)) { fprintf(stderr, "%s\n", error); return 1; }
        QueryPerformanceCounter(&b);
        if (i >= 10) t[i - 10] = (double)(b.QuadPart - a.QuadPart) * 1e3 / (double)f.QuadPart;
    }
    qsort(t, calls, sizeof(double), cmp);
    printf("%.4f\n", t[calls / 2]);
    return 0;
}
