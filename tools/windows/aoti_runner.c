/* A Windows test program for a cross-compiled AOTInductor CPU model (kiln,
 * tools/windows/cross_repro.py): C only, so it talks to the MinGW-built model DLL
 * and the MSVC-built torch_cpu.dll through their C ABIs alone (no C++ object crosses).
 *
 *   aoti_runner.exe MODEL.dll WEIGHTS.blob INPUT.bin OUTPUT.bin D0 D1 ...
 *
 * INPUT.bin: float32 values of one input of shape D0 x D1 x ...; OUTPUT.bin gets
 * the first output's float32 values. Exit 0 on success; a message on stderr else. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

typedef void* Handle;
typedef int32_t (*CreateFn)(Handle*, size_t, const char*, const char*);
typedef int32_t (*BlobFn)(Handle, const uint8_t*);
typedef int32_t (*RunFn)(Handle, Handle*, size_t, Handle*, size_t, Handle, Handle);
typedef int32_t (*FromBlobFn)(void*, int64_t, const int64_t*, const int64_t*, int64_t, int32_t,
                              int32_t, int32_t, Handle*);
typedef int32_t (*DataFn)(Handle, void**);
typedef int32_t (*NumelFn)(Handle, int64_t*);
typedef int32_t (*IntFn)(void);

static void* need(HMODULE lib, const char* name) {
    void* f = (void*)GetProcAddress(lib, name);
    if (!f) {
        fprintf(stderr, "missing symbol %s\n", name);
        exit(3);
    }
    return f;
}

static uint8_t* slurp(const char* path, long* size) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(4);
    }
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* AOTInductor reads constants at 64-byte aligned offsets of the blob. */
    uint8_t* data = _aligned_malloc(*size ? *size : 1, 64);
    if (fread(data, 1, *size, f) != (size_t)*size) exit(4);
    fclose(f);
    return data;
}

int main(int argc, char** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL.dll WEIGHTS.blob INPUT.bin OUTPUT.bin D0 [D1 ...]\n", argv[0]);
        return 2;
    }
    HMODULE model = LoadLibraryA(argv[1]);
    if (!model) {
        fprintf(stderr, "LoadLibrary(%s) failed: error %lu\n", argv[1], GetLastError());
        return 3;
    }
    HMODULE torch = GetModuleHandleA("torch_cpu.dll");
    if (!torch) {
        fprintf(stderr, "torch_cpu.dll is not loaded by the model\n");
        return 3;
    }
    CreateFn create = (CreateFn)need(model, "AOTInductorModelContainerCreateWithDevice");
    BlobFn from_blob = (BlobFn)need(model, "AOTInductorModelUpdateConstantsFromBlob");
    RunFn run = (RunFn)need(model, "AOTInductorModelContainerRun");
    FromBlobFn tensor = (FromBlobFn)need(torch, "aoti_torch_create_tensor_from_blob");
    DataFn data_ptr = (DataFn)need(torch, "aoti_torch_get_data_ptr");
    NumelFn numel = (NumelFn)need(torch, "aoti_torch_get_numel");
    IntFn f32 = (IntFn)need(torch, "aoti_torch_dtype_float32");
    IntFn cpu = (IntFn)need(torch, "aoti_torch_device_type_cpu");

    Handle container = NULL;
    if (create(&container, 1, "cpu", NULL)) {
        fprintf(stderr, "AOTInductorModelContainerCreateWithDevice failed\n");
        return 5;
    }
    long blob_size, input_size;
    uint8_t* blob = slurp(argv[2], &blob_size);
    if (from_blob(container, blob)) {
        fprintf(stderr, "AOTInductorModelUpdateConstantsFromBlob failed\n");
        return 5;
    }
    float* input = (float*)slurp(argv[3], &input_size);
    int64_t ndim = argc - 5, sizes[8], strides[8], count = 1;
    for (int64_t i = 0; i < ndim; i++) sizes[i] = atoll(argv[5 + i]);
    for (int64_t i = ndim - 1; i >= 0; i--) {
        strides[i] = count;
        count *= sizes[i];
    }
    if (count * 4 != input_size) {
        fprintf(stderr, "input holds %ld bytes, shape needs %lld\n", input_size, (long long)count * 4);
        return 2;
    }
    Handle in = NULL, out = NULL;
    if (tensor(input, ndim, sizes, strides, 0, f32(), cpu(), 0, &in)) return 5;
    if (run(container, &in, 1, &out, 1, NULL, NULL)) {
        fprintf(stderr, "AOTInductorModelContainerRun failed\n");
        return 6;
    }
    void* values;
    int64_t n;
    data_ptr(out, &values);
    numel(out, &n);
    FILE* f = fopen(argv[4], "wb");
    fwrite(values, 4, (size_t)n, f);
    fclose(f);
    printf("ok: %lld output values\n", (long long)n);
    return 0;
}
