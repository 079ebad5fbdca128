// model_app: an application that links the loader kiln generates for //models:mlp_pt2.
//
//     model_app PACKAGE BATCH [float64]
//     model_app PACKAGE BATCH --weights WEIGHTS    start with the weights of WEIGHTS
//     model_app PACKAGE BATCH --swap WEIGHTS       run, swap to WEIGHTS while another
//                                                  thread keeps running, run again
//     model_app PACKAGE BATCH --metadata           the package's metadata, then run
//
// PACKAGE "-" is the package kiln built with the loader, when the build passes it
// as MODEL_APP_PACKAGE (tests/cc/CMakeLists.txt does, from mlp_pt2_PACKAGE).
// Builds the input arange(numel) / 100 in the shape the model declares, with BATCH for
// every dynamic dimension (as float64 when asked, to show the dtype check), runs
// the package and prints every output value, one per line. --swap prints them before
// ("# before"), after ("# after") and a line "# concurrent RUNS SAME" counting the
// runs of the other thread and those equal to the output before or the one after.
// --metadata prints "# KEY=VALUE" lines first. An input or weights file the package
// does not accept prints the loader's error and exits with 2; any other failure
// exits with 1. MODEL_HEADER and MODEL_CLASS pick another target's loader.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#ifndef MODEL_HEADER
#define MODEL_HEADER "mlp_pt2.h"
#define MODEL_CLASS MlpPt2
#endif
#include MODEL_HEADER

namespace {

using Model = MODEL_CLASS;

at::Tensor example_input(const Model::InputSpec& spec, std::int64_t batch, bool float64) {
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

void print(const std::vector<at::Tensor>& outputs) {
  for (const at::Tensor& output : outputs) {
    const at::Tensor values = output.to(at::kDouble).contiguous();
    const double* data = values.data_ptr<double>();
    for (std::int64_t i = 0; i < values.numel(); ++i) {
      std::printf("%.9g\n", data[i]);
    }
  }
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) {
      return false;
    }
  }
  return true;
}

// Runs the model on another thread while it swaps to the weights of `path`: every run
// must see the old weights or the new ones.
void swap_while_running(Model& model, const std::vector<at::Tensor>& inputs, const std::string& path) {
  const std::vector<at::Tensor> before = model.run(inputs);
  std::printf("# before\n");
  print(before);
  std::atomic<bool> swapped{false};
  std::atomic<int> runs{0};
  std::vector<std::vector<at::Tensor>> seen;
  std::thread runner([&] {
    int after_swap = 0;
    while (after_swap < 50) {
      seen.push_back(model.run(inputs));
      ++runs;
      after_swap += swapped.load() ? 1 : 0;
    }
  });
  while (runs.load() < 50) {
    std::this_thread::yield();  // the swap starts while the model is running
  }
  try {
    model.load_weights(path);
  } catch (...) {
    swapped = true;  // stops the runner
    runner.join();
    throw;
  }
  swapped = true;
  runner.join();
  const std::vector<at::Tensor> after = model.run(inputs);
  std::size_t matching = 0;
  for (const auto& outputs : seen) {
    matching += same(outputs, before) || same(outputs, after) ? 1 : 0;
  }
  std::printf("# after\n");
  print(after);
  std::printf("# concurrent %zu %zu\n", seen.size(), matching);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 3 ? argv[3] : "";
  const bool float64 = mode == "float64";
  const bool with_file = mode == "--weights" || mode == "--swap";
  if (argc < 3 || (with_file && argc != 5) || (!with_file && argc > 4) ||
      !(mode.empty() || float64 || with_file || mode == "--metadata")) {
    std::fprintf(stderr, "usage: %s PACKAGE BATCH [float64 | --weights W | --swap W | --metadata]\n",
                 argv[0]);
    return 1;
  }
  try {
    const std::int64_t batch = std::stoll(argv[2]);
    std::vector<at::Tensor> inputs;
    for (const auto& spec : Model::kInputs) {
      inputs.push_back(example_input(spec, batch, float64));
    }
    std::string package = argv[1];
#ifdef MODEL_APP_PACKAGE
    if (package == "-") {
      package = MODEL_APP_PACKAGE;
    }
#endif
    if (mode == "--weights") {
      Model model(package, argv[4]);
      print(model.run(inputs));
      return 0;
    }
    Model model(package);
    if (mode == "--swap") {
      swap_while_running(model, inputs, argv[4]);
      return 0;
    }
    if (mode == "--metadata") {
      const std::map<std::string, std::string> sorted(model.metadata().begin(), model.metadata().end());
      for (const auto& [key, value] : sorted) {
        std::printf("# %s=%s\n", key.c_str(), value.c_str());
      }
    }
    print(model.run(inputs));
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "model_app: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "model_app: failed: %s\n", error.what());
    return 1;
  }
  return 0;
}
