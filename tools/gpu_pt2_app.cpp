// gpu_pt2_app: a CUDA .pt2 (inductor or TensorRT) through the C++ loader kiln generated
// for it, on the GPU machine (tools/gpu_trt_package_check.py builds it with the loader's
// CMake package and compares its outputs with eager).
//
//     gpu_pt2_app PACKAGE OUT_PREFIX BATCH...
//
// Loads the package once, then for each BATCH builds the input arange(numel) / 100 in
// the shape the model declares, BATCH on every dynamic dimension, on cuda:0, runs it and
// writes every output value to OUT_PREFIX<BATCH>.txt, one per line. A batch the loader
// refuses (std::invalid_argument: outside the declared range) prints
// "REFUSED <batch>: <message>" and the app goes on. Prints "LOAD <seconds>" and
// "FIRST_CALL <seconds>". Exit 0 when every batch ran or was refused, 1 on anything else.
// MODEL_HEADER and MODEL_CLASS name the loader (compile definitions).
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>

#include MODEL_HEADER

namespace {

using Model = MODEL_CLASS;
using Clock = std::chrono::steady_clock;

at::Tensor example_input(const Model::InputSpec& spec, std::int64_t batch) {
  std::vector<std::int64_t> shape;
  std::int64_t numel = 1;
  for (std::size_t d = 0; d < spec.rank; ++d) {
    const auto& dim = spec.dims[d];
    shape.push_back(dim.dynamic.empty() ? dim.min : batch);
    numel *= shape.back();
  }
  const at::Tensor input =
      at::arange(numel, at::TensorOptions().dtype(spec.dtype)).reshape(shape).div(100);
  return input.to(at::Device(at::kCUDA, 0), spec.dtype);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void write(const std::vector<at::Tensor>& outputs, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    throw std::runtime_error("cannot write " + path);
  }
  for (const at::Tensor& output : outputs) {
    const at::Tensor values = output.to(at::Device(at::kCPU), at::kDouble).contiguous();
    const double* data = values.data_ptr<double>();
    for (std::int64_t i = 0; i < values.numel(); ++i) {
      std::fprintf(file, "%.9g\n", data[i]);
    }
  }
  std::fclose(file);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s PACKAGE OUT_PREFIX BATCH...\n", argv[0]);
    return 1;
  }
  try {
    auto start = Clock::now();
    Model model(argv[1]);
    std::printf("LOAD %.3f\n", seconds_since(start));
    bool first = true;
    for (int i = 3; i < argc; ++i) {
      const std::int64_t batch = std::stoll(argv[i]);
      std::vector<at::Tensor> inputs;
      for (const auto& spec : Model::kInputs) {
        inputs.push_back(example_input(spec, batch));
      }
      try {
        start = Clock::now();
        const std::vector<at::Tensor> outputs = model.run(inputs);
        write(outputs, std::string(argv[2]) + argv[i] + ".txt");  // copies: waits for the GPU
        if (first) {
          std::printf("FIRST_CALL %.3f\n", seconds_since(start));
          first = false;
        }
        std::printf("RAN %lld\n", static_cast<long long>(batch));
      } catch (const std::invalid_argument& error) {
        std::printf("REFUSED %lld: %s\n", static_cast<long long>(batch), error.what());
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpu_pt2_app: failed: %s\n", error.what());
    return 1;
  }
  return 0;
}
