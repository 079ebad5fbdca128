/* OpenMP's query functions for a Windows model DLL built without OpenMP.
 *
 * torch 2.13's cross path compiles without -fopenmp (docs/windows.md, finding 4): each
 * `#pragma omp parallel` region then runs once, on the calling thread, but its body still
 * calls omp_get_thread_num() (`int tid = omp_get_thread_num();`) and, with
 * cpp.dynamic_threads, omp_get_max_threads() to size its reduction buffers. Nothing
 * defines them (undefined reference at the link). These answers are the serial ones,
 * which is what the code does. Linked into the DLL, never exported. */
int omp_get_thread_num(void) { return 0; }
int omp_get_num_threads(void) { return 1; }
int omp_get_max_threads(void) { return 1; }
