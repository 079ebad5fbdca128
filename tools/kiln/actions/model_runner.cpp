// model_runner: a kiln package run through its generated C++ loader (what apps use), for
// model_test (runtime = "cc") and model_benchmark. Compiled by kiln.actions.cc_runner with
// -DMODEL_HEADER="<name>.h" -DMODEL_CLASS=<Class>.
//
//   model_runner run PACKAGE WEIGHTS|- MANIFEST OUT_DIR
//     MANIFEST: one line per input of each batch, "batch input dtype rank d0 d1 ... path" (raw,
//     contiguous); writes OUT_DIR/<batch>.bin (the first output, float64) and OUT_DIR/shapes.txt
//     ("batch rank d0 d1 ...").
//   model_runner bench PACKAGE WEIGHTS|- SHAPES WARMUP REPEATS ITERATIONS
//     SHAPES: one line per input, "dtype rank d0 d1 ..."; prints "repeat latency_ms" per call.
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include MODEL_HEADER

namespace {

using Model = MODEL_CLASS;

at::ScalarType dtype_of(const std::string& name) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"float32", at::kFloat}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"float64", at::kDouble}, {"int64", at::kLong},  {"int32", at::kInt},
      {"int8", at::kChar},      {"bool", at::kBool},   {"uint8", at::kByte}};
  const auto found = kTypes.find(name);
  if (found == kTypes.end()) {
    throw std::invalid_argument("model_runner: unknown dtype " + name);
  }
  return found->second;
}

std::vector<std::int64_t> read_shape(std::istringstream& line) {
  std::size_t rank = 0;
  line >> rank;
  std::vector<std::int64_t> shape(rank);
  for (auto& size : shape) {
    line >> size;
  }
  return shape;
}

at::Tensor read_tensor(const std::string& path, at::ScalarType dtype,
                       const std::vector<std::int64_t>& shape) {
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(dtype));
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(tensor.nbytes()));
  if (!in) {
    throw std::runtime_error("model_runner: cannot read " + path);
  }
  return tensor;
}

std::unique_ptr<Model> load(const std::string& package, const std::string& weights) {
  return weights == "-" ? std::make_unique<Model>(package)
                        : std::make_unique<Model>(package, weights);
}

int run(Model& model, const std::string& manifest, const std::string& out_dir) {
  std::ifstream in(manifest);
  std::map<long, std::vector<at::Tensor>> batches;
  for (std::string text; std::getline(in, text);) {
    std::istringstream line(text);
    long batch = 0;
    int input = 0;
    std::string dtype;
    line >> batch >> input >> dtype;
    const std::vector<std::int64_t> shape = read_shape(line);
    std::string path;
    line >> path;
    batches[batch].push_back(read_tensor(path, dtype_of(dtype), shape));
  }
  std::ofstream shapes(out_dir + "/shapes.txt");
  for (const auto& [batch, inputs] : batches) {
    const at::Tensor out = model.run(inputs).at(0).to(at::kDouble).contiguous();
    std::ofstream file(out_dir + "/" + std::to_string(batch) + ".bin", std::ios::binary);
    file.write(static_cast<const char*>(out.data_ptr()), static_cast<std::streamsize>(out.nbytes()));
    shapes << batch << ' ' << out.dim();
    for (const auto size : out.sizes()) {
      shapes << ' ' << size;
    }
    shapes << '\n';
  }
  return 0;
}

int bench(Model& model, const std::string& shapes_file, int warmup, int repeats, int iterations) {
  std::ifstream in(shapes_file);
  std::vector<at::Tensor> inputs;
  for (std::string text; std::getline(in, text);) {
    std::istringstream line(text);
    std::string dtype;
    line >> dtype;
    const at::ScalarType type = dtype_of(dtype);
    const std::vector<std::int64_t> shape = read_shape(line);
    inputs.push_back(at::isFloatingType(type) ? at::rand(shape, at::TensorOptions().dtype(type))
                                              : at::zeros(shape, at::TensorOptions().dtype(type)));
  }
  for (int i = 0; i < warmup; ++i) {
    model.run(inputs);
  }
  for (int repeat = 0; repeat < repeats; ++repeat) {
    for (int i = 0; i < iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      model.run(inputs);
      const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      std::printf("%d %.6f\n", repeat, took.count());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 5 && args[0] == "run") {
      auto model = load(args[1], args[2]);
      return run(*model, args[3], args[4]);
    }
    if (args.size() == 7 && args[0] == "bench") {
      auto model = load(args[1], args[2]);
      return bench(*model, args[3], std::stoi(args[4]), std::stoi(args[5]), std::stoi(args[6]));
    }
    std::fprintf(stderr, "usage: model_runner run|bench ...\n");
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
