// model_app: an application that links the loader kiln generates for //models:mlp_pt2.
//
//     model_app PACKAGE BATCH [float64]
//
// PACKAGE "-" is the package kiln built with the loader, when the build passes it
// as MODEL_APP_PACKAGE (tests/cc/CMakeLists.txt does, from mlp_pt2_PACKAGE).
// Builds the input arange(numel) / 100 in the shape MlpPt2 declares, with BATCH for
// every dynamic dimension (as float64 when asked, to show the dtype check), runs
// the package and prints every output value, one per line. An input the package
// does not accept, e.g. a BATCH outside the declared range, prints the loader's
// error and exits with 2; any other failure exits with 1.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/arange.h>

#include "mlp_pt2.h"

namespace {

at::Tensor example_input(const MlpPt2::InputSpec& spec, std::int64_t batch, bool float64) {
  std::vector<std::int64_t> shape;
  std::int64_t numel = 1;
  for (std::size_t d = 0; d < spec.rank; ++d) {
    const auto& dim = spec.dims[d];
    shape.push_back(dim.dynamic.empty() ? dim.min : batch);
    numel *= shape.back();
  }
  at::Tensor input = at::arange(numel, at::TensorOptions().dtype(spec.dtype)).reshape(shape).div(100);
  return float64 ? input.to(at::kDouble) : input;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "float64")) {
    std::fprintf(stderr, "usage: %s PACKAGE BATCH [float64]\n", argv[0]);
    return 1;
  }
  try {
    const std::int64_t batch = std::stoll(argv[2]);
    std::vector<at::Tensor> inputs;
    for (const auto& spec : MlpPt2::kInputs) {
      inputs.push_back(example_input(spec, batch, argc == 4));
    }
    std::string package = argv[1];
#ifdef MODEL_APP_PACKAGE
    if (package == "-") {
      package = MODEL_APP_PACKAGE;
    }
#endif
    MlpPt2 model(package);
    for (const at::Tensor& output : model.run(inputs)) {
      const at::Tensor values = output.to(at::kDouble).contiguous();
      const double* data = values.data_ptr<double>();
      for (std::int64_t i = 0; i < values.numel(); ++i) {
        std::printf("%.9g\n", data[i]);
      }
    }
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "model_app: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "model_app: failed: %s\n", error.what());
    return 1;
  }
  return 0;
}
