// A STAND-IN for the part of TensorRT's NvInferRuntime.h that kiln's generated loaders
// use: the declarations only, with the signatures of TensorRT 10 (NvInferRuntime.h,
// NvInferRuntimeBase.h; TensorRT-RTX keeps the same nvinfer1 API). It is not TensorRT
// and links to nothing: the loader tests compile against it with -fsyntax-only, on
// machines where TensorRT's headers cannot be installed. The same test compiles against
// the real headers where TENSORRT_INCLUDE_DIR names them.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace nvinfer1 {

using AsciiChar = char;

class Dims64 {
 public:
  static constexpr int32_t MAX_DIMS{8};
  int32_t nbDims;
  int64_t d[MAX_DIMS];
};
using Dims = Dims64;

enum class DataType : int32_t {
  kFLOAT = 0,
  kHALF = 1,
  kINT8 = 2,
  kINT32 = 3,
  kBOOL = 4,
  kUINT8 = 5,
  kFP8 = 6,
  kBF16 = 7,
  kINT64 = 8,
  kINT4 = 9,
  kFP4 = 10,
};

enum class TensorIOMode : int32_t { kNONE = 0, kINPUT = 1, kOUTPUT = 2 };

enum class ExecutionContextAllocationStrategy : int32_t { kSTATIC = 0, kON_PROFILE_CHANGE = 1, kUSER_MANAGED = 2 };

class ILogger {
 public:
  enum class Severity : int32_t { kINTERNAL_ERROR = 0, kERROR = 1, kWARNING = 2, kINFO = 3, kVERBOSE = 4 };
  virtual void log(Severity severity, AsciiChar const* msg) noexcept = 0;
  ILogger() = default;
  virtual ~ILogger() = default;

 protected:
  ILogger(ILogger const&) = default;
  ILogger(ILogger&&) = default;
  ILogger& operator=(ILogger const&) & = default;
  ILogger& operator=(ILogger&&) & = default;
};

class IExecutionContext {
 public:
  virtual ~IExecutionContext() noexcept = default;
  bool setInputShape(char const* tensorName, Dims const& dims) noexcept;
  Dims getTensorShape(char const* tensorName) const noexcept;
  bool setTensorAddress(char const* tensorName, void* data) noexcept;
  bool enqueueV3(cudaStream_t stream) noexcept;

 protected:
  IExecutionContext() = default;
};

class ICudaEngine {
 public:
  virtual ~ICudaEngine() noexcept = default;
  int32_t getNbIOTensors() const noexcept;
  char const* getIOTensorName(int32_t index) const noexcept;
  TensorIOMode getTensorIOMode(char const* tensorName) const noexcept;
  DataType getTensorDataType(char const* tensorName) const noexcept;
  Dims getTensorShape(char const* tensorName) const noexcept;
  IExecutionContext* createExecutionContext(
      ExecutionContextAllocationStrategy strategy = ExecutionContextAllocationStrategy::kSTATIC) noexcept;

 protected:
  ICudaEngine() = default;
};

class IRuntime {
 public:
  virtual ~IRuntime() noexcept = default;
  ICudaEngine* deserializeCudaEngine(void const* blob, std::size_t size) noexcept;
  void setEngineHostCodeAllowed(bool allowed) noexcept;

 protected:
  IRuntime() = default;
};

IRuntime* createInferRuntime(ILogger& logger) noexcept;

}  // namespace nvinfer1
