// A STAND-IN for the part of CUDA's cuda_runtime_api.h that kiln's generated loaders use:
// declarations only, with the CUDA runtime's signatures, for -fsyntax-only checks on
// machines without CUDA. See NvInferRuntime.h beside it.
#pragma once

#include <cstddef>

typedef struct CUstream_st* cudaStream_t;

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

extern "C" {
cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaStreamCreate(cudaStream_t* pStream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
const char* cudaGetErrorString(cudaError_t error);
}
