// Runs //models:tiny_pt2 through its generated C++ loader (class TinyPt2), finding the
// package in the runfiles: at the smallest and the largest batch the model declares,
// then one past the largest, which the loader refuses with a message.
//
//     bazel run //app        # or bazel-bin/app/app
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/ones.h>

#include "models/tiny_pt2_runfiles.h"  // TINY_PT2_RLOCATION, the package's runfiles path
#include "tiny_pt2.h"
#include "tools/cpp/runfiles/runfiles.h"

using bazel::tools::cpp::runfiles::Runfiles;

namespace {

// One input of `batch` rows: the declared static sizes elsewhere.
at::Tensor input(std::int64_t batch) {
  const auto& spec = TinyPt2::kInputs[0];
  std::vector<std::int64_t> shape;
  for (std::size_t d = 0; d < spec.rank; ++d) {
    shape.push_back(spec.dims[d].dynamic.empty() ? spec.dims[d].min : batch);
  }
  return at::ones(shape, at::TensorOptions().dtype(spec.dtype));
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv[0], &error));
  if (!runfiles) {
    std::fprintf(stderr, "app: no runfiles: %s\n", error.c_str());
    return 1;
  }
  const std::string package = runfiles->Rlocation(TINY_PT2_RLOCATION);
  TinyPt2 model(package);
  const auto& batch = TinyPt2::kInputs[0].dims[0];
  for (std::int64_t rows : {batch.min, batch.max}) {
    at::Tensor out = model(input(rows))[0];
    std::printf("batch %lld: output %lld x %lld\n", static_cast<long long>(rows),
                static_cast<long long>(out.size(0)), static_cast<long long>(out.size(1)));
  }
  try {
    model(input(batch.max + 1));
  } catch (const std::invalid_argument& refused) {
    std::printf("batch %lld: refused: %s\n", static_cast<long long>(batch.max + 1),
                refused.what());
    return 0;
  }
  std::fprintf(stderr, "app: batch %lld was not refused\n", static_cast<long long>(batch.max + 1));
  return 1;
}
