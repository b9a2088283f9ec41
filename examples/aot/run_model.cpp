// Run an Ember ahead-of-time package from C++, with no Python in the process.
//
//   python examples/aot/make_package.py /tmp/aot      # writes model.pt2 and input.pt
//   g++ examples/aot/run_model.cpp -o run_model $(python -m ember.core.aot --cflags --libs)
//   ./run_model /tmp/aot/model.pt2 /tmp/aot/input.pt /tmp/aot/output.pt
//
// The input file holds one tensor saved with torch.save; the output file holds the model's
// first output, readable with torch.load.
#include <ember/aot.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iostream>
#include <iterator>

static std::vector<char> read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string("cannot read ") + path);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " model.pt2 input.pt output.pt\n";
    return 2;
  }
  try {
    ember::aot::Model model(argv[1]);
    at::Tensor input = torch::jit::pickle_load(read_file(argv[2])).toTensor();
    std::vector<at::Tensor> out = model.run({input});
    std::vector<char> bytes = torch::jit::pickle_save(out.at(0));
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), bytes.size());
    std::cout << "output " << out.at(0).sizes() << "\n";
  } catch (const ember::aot::InputError& e) {
    std::cerr << "bad input: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
