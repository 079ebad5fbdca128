// A STAND-IN implementation of the stand-in NvInferRuntime.h and cuda_runtime_api.h beside
// it, so that kiln's generated loader and runner can run on a machine without TensorRT,
// CUDA or a GPU. It is not TensorRT: an "engine" is a text blob
//
//     standin-engine
//     in <name> <dtype>        one line per input  (dtype: float32 | int64 | float16)
//     out <name> <dtype>       one line per output, the same shape as the first input
//
// and running it writes 2 * the first input (as float32) to every float32 output.
// "Device" memory is host memory. What it checks is the loader's own logic: its shape
// checks, the way it names and binds tensors, and the runner's files and exit codes.
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "NvInferRuntime.h"

namespace {

struct Tensor {
  std::string name;
  nvinfer1::TensorIOMode mode;
  nvinfer1::DataType dtype;
  nvinfer1::Dims shape{};
  void* address = nullptr;
};

struct Engine;

struct Context : nvinfer1::IExecutionContext {
  Engine* engine = nullptr;
  std::map<std::string, Tensor> tensors;
};

struct Engine : nvinfer1::ICudaEngine {
  std::vector<Tensor> io;
};

struct Runtime : nvinfer1::IRuntime {
  nvinfer1::ILogger* logger = nullptr;
};

nvinfer1::DataType parse_dtype(const std::string& name) {
  if (name == "int64") return nvinfer1::DataType::kINT64;
  if (name == "float16") return nvinfer1::DataType::kHALF;
  return nvinfer1::DataType::kFLOAT;
}

const Tensor* find(const std::vector<Tensor>& io, const char* name) {
  for (const Tensor& t : io) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

namespace nvinfer1 {

IRuntime* createInferRuntime(ILogger& logger) noexcept {
  auto* runtime = new Runtime();
  runtime->logger = &logger;
  return runtime;
}

ICudaEngine* IRuntime::deserializeCudaEngine(void const* blob, std::size_t size) noexcept {
  std::istringstream in(std::string(static_cast<const char*>(blob), size));
  std::string word;
  if (!(in >> word) || word != "standin-engine") {
    static_cast<Runtime*>(this)->logger->log(ILogger::Severity::kERROR, "not a stand-in engine");
    return nullptr;
  }
  auto* engine = new Engine();
  std::string kind, name, dtype;
  while (in >> kind >> name >> dtype) {
    engine->io.push_back(
        {name, kind == "in" ? TensorIOMode::kINPUT : TensorIOMode::kOUTPUT, parse_dtype(dtype)});
  }
  return engine;
}

void IRuntime::setEngineHostCodeAllowed(bool) noexcept {}

int32_t ICudaEngine::getNbIOTensors() const noexcept {
  return static_cast<int32_t>(static_cast<const Engine*>(this)->io.size());
}

char const* ICudaEngine::getIOTensorName(int32_t index) const noexcept {
  return static_cast<const Engine*>(this)->io[static_cast<std::size_t>(index)].name.c_str();
}

TensorIOMode ICudaEngine::getTensorIOMode(char const* name) const noexcept {
  const Tensor* t = find(static_cast<const Engine*>(this)->io, name);
  return t ? t->mode : TensorIOMode::kNONE;
}

DataType ICudaEngine::getTensorDataType(char const* name) const noexcept {
  const Tensor* t = find(static_cast<const Engine*>(this)->io, name);
  return t ? t->dtype : DataType::kFLOAT;
}

Dims ICudaEngine::getTensorShape(char const*) const noexcept { return Dims{}; }

IExecutionContext* ICudaEngine::createExecutionContext(ExecutionContextAllocationStrategy) noexcept {
  auto* context = new Context();
  context->engine = static_cast<Engine*>(this);
  for (const Tensor& t : context->engine->io) context->tensors[t.name] = t;
  return context;
}

bool IExecutionContext::setInputShape(char const* name, Dims const& dims) noexcept {
  auto& tensors = static_cast<Context*>(this)->tensors;
  auto it = tensors.find(name);
  if (it == tensors.end() || it->second.mode != TensorIOMode::kINPUT) return false;
  it->second.shape = dims;
  for (auto& [other, t] : tensors) {  // every output: the shape of the input set last
    if (t.mode == TensorIOMode::kOUTPUT) t.shape = dims;
  }
  return true;
}

Dims IExecutionContext::getTensorShape(char const* name) const noexcept {
  const auto& tensors = static_cast<const Context*>(this)->tensors;
  auto it = tensors.find(name);
  return it == tensors.end() ? Dims{} : it->second.shape;
}

bool IExecutionContext::setTensorAddress(char const* name, void* data) noexcept {
  auto& tensors = static_cast<Context*>(this)->tensors;
  auto it = tensors.find(name);
  if (it == tensors.end()) return false;
  it->second.address = data;
  return true;
}

bool IExecutionContext::enqueueV3(cudaStream_t) noexcept {
  auto* context = static_cast<Context*>(this);
  const Tensor* input = nullptr;
  for (const Tensor& t : context->engine->io) {
    if (t.mode == TensorIOMode::kINPUT) {
      input = &context->tensors[t.name];
      break;
    }
  }
  if (input == nullptr || input->address == nullptr) return false;
  int64_t count = 1;
  for (int32_t d = 0; d < input->shape.nbDims; ++d) count *= input->shape.d[d];
  for (auto& [name, t] : context->tensors) {
    if (t.mode != TensorIOMode::kOUTPUT) continue;
    if (t.address == nullptr) return false;
    const auto* x = static_cast<const float*>(input->address);
    auto* y = static_cast<float*>(t.address);
    for (int64_t i = 0; i < count; ++i) y[i] = 2 * x[i];
  }
  return true;
}

}  // namespace nvinfer1

extern "C" {
cudaError_t cudaMalloc(void** devPtr, size_t size) {
  *devPtr = std::malloc(size);
  return *devPtr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* devPtr) {
  std::free(devPtr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind) {
  std::memcpy(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  *pStream = reinterpret_cast<cudaStream_t>(0x1);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "stand-in CUDA error"; }
}
