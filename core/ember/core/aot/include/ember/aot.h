// Ember ahead-of-time packages in C++, without Python: load a .pt2 made by
// ember.core.aot_compile and run it.
//
//   #include <ember/aot.h>
//   ember::aot::Model model("model.pt2");
//   std::vector<at::Tensor> out = model.run({input});
//
// Build flags: `python -m ember.core.aot --cflags` and `--libs` (libtorch from the torch
// wheel). Header-only: the package's library is mapped from memory, its weights are read
// once, and each run calls the package's C entry. A damaged package, one from another Ember
// or torch version, or one built for an instruction set this CPU lacks, throws
// ember::aot::PackageError; inputs that do not match throw ember::aot::InputError.
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <torch/headeronly/version.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#define EMBER_AOT_VERSION "0.1.0"
#define EMBER_AOT_FORMAT 2

namespace ember {
namespace aot {

// The package cannot be used here (unreadable, altered, or built for another Ember, torch
// or instruction set).
struct PackageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A run's inputs (or the supplied weights) do not match what the package was built for.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

namespace detail {

inline uint32_t crc32(const unsigned char* p, size_t n) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline uint32_t u32(const std::string& b, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data()) + at;
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline uint16_t u16(const std::string& b, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data()) + at;
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// A member of the package: a window on the file's bytes.
struct Member {
  const char* data;
  size_t size;
  std::string str() const { return std::string(data, size); }
};

// The members of an uncompressed zip (windows on ``b``), each checked against its CRC-32.
inline std::map<std::string, Member> read_zip(const std::string& path, std::string& b) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw PackageError("no package at " + path);
  b.resize(static_cast<size_t>(f.tellg()));
  f.seekg(0);
  if (!f.read(&b[0], static_cast<std::streamsize>(b.size()))) {
    throw PackageError("cannot read " + path);
  }
  auto bad = [&](const std::string& why) {
    return PackageError(path + " is damaged or not an Ember package: " + why);
  };
  if (b.size() < 22) throw bad("too short");
  size_t eocd = std::string::npos;
  for (size_t i = b.size() - 22 + 1; i-- > 0 && b.size() - i <= 22 + 65535;) {
    if (u32(b, i) == 0x06054b50u) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) throw bad("no end of central directory (truncated?)");
  size_t count = u16(b, eocd + 10), cd_size = u32(b, eocd + 12), cd = u32(b, eocd + 16);
  if (cd + cd_size > eocd) throw bad("central directory out of bounds");
  std::map<std::string, Member> out;
  size_t at = cd;
  for (size_t m = 0; m < count; ++m) {
    if (at + 46 > eocd || u32(b, at) != 0x02014b50u) throw bad("bad central directory entry");
    uint16_t method = u16(b, at + 10), nlen = u16(b, at + 28), xlen = u16(b, at + 30),
             clen = u16(b, at + 32);
    uint32_t crc = u32(b, at + 16), csize = u32(b, at + 20), usize = u32(b, at + 24),
             local = u32(b, at + 42);
    if (at + 46 + nlen > eocd) throw bad("bad central directory entry");
    std::string name = b.substr(at + 46, nlen);
    at += 46 + nlen + xlen + clen;
    if (method != 0 || csize != usize) throw bad("member " + name + " is compressed");
    if (static_cast<size_t>(local) + 30 > b.size() || u32(b, local) != 0x04034b50u) {
      throw bad("member " + name + " has no local header");
    }
    size_t data = static_cast<size_t>(local) + 30 + u16(b, local + 26) + u16(b, local + 28);
    if (data + usize > cd) throw bad("member " + name + " runs past the archive");
    if (crc32(reinterpret_cast<const unsigned char*>(b.data()) + data, usize) != crc) {
      throw bad("member " + name + " fails its CRC-32 check");
    }
    out[name] = Member{b.data() + data, usize};
  }
  return out;
}

inline std::set<std::string> cpu_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::string> out;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::string w;
      while (words >> w) out.insert(w);
      break;
    }
  }
  return out;
}

inline c10::ScalarType dtype(const std::string& name) {
  static const std::map<std::string, c10::ScalarType> names = {
      {"float32", c10::ScalarType::Float},  {"float64", c10::ScalarType::Double},
      {"float16", c10::ScalarType::Half},   {"bfloat16", c10::ScalarType::BFloat16},
      {"int64", c10::ScalarType::Long},     {"int32", c10::ScalarType::Int},
      {"int16", c10::ScalarType::Short},    {"int8", c10::ScalarType::Char},
      {"uint8", c10::ScalarType::Byte},     {"bool", c10::ScalarType::Bool},
      {"complex64", c10::ScalarType::ComplexFloat},
      {"complex128", c10::ScalarType::ComplexDouble}};
  auto it = names.find(name);
  if (it == names.end()) throw PackageError("unknown dtype " + name + " in the manifest");
  return it->second;
}

// dlopen ``bytes`` from an anonymous memory file, through a symlink whose name is used once:
// the dynamic loader returns an already loaded library whose path matches, and
// /proc/self/fd/N repeats as soon as descriptor N is reused.
inline void* map_library(const Member& bytes, const std::string& path) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/ember-aot-XXXXXX";
  std::vector<char> dir(dir_template.begin(), dir_template.end());
  dir.push_back('\0');
  if (mkdtemp(dir.data()) == nullptr) throw PackageError("cannot stage the library of " + path);
  std::string link = std::string(dir.data()) + "/model.so";
  int fd = -1;
#ifdef MFD_CLOEXEC
  fd = memfd_create("ember-aot", MFD_CLOEXEC);
#endif
  bool linked = false;
  if (fd >= 0) {
    linked = symlink(("/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd)).c_str(),
                     link.c_str()) == 0;
  } else {
    fd = open(link.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0700);
    linked = fd >= 0;
  }
  size_t done = 0;
  while (linked && done < bytes.size) {
    ssize_t n = write(fd, bytes.data + done, bytes.size - done);
    if (n <= 0) linked = false;
    done += n > 0 ? static_cast<size_t>(n) : 0;
  }
  void* lib = linked ? dlopen(link.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  const char* why = lib == nullptr && linked ? dlerror() : nullptr;
  if (fd >= 0) close(fd);
  unlink(link.c_str());
  rmdir(dir.data());
  if (!linked) throw PackageError("cannot stage the library of " + path);
  if (lib == nullptr) {
    throw PackageError(path + ": its library does not load: " + (why ? why : "?"));
  }
  return lib;
}

}  // namespace detail

class Model {
 public:
  explicit Model(const std::string& path) : Model(path, {}) {}

  // ``weights`` (state_dict key -> tensor) replaces the packaged weights, or supplies those
  // a package was built without.
  Model(const std::string& path, const std::unordered_map<std::string, at::Tensor>& weights)
      : path_(path) {
    std::string file;
    auto members = detail::read_zip(path, file);
    for (const char* m : {"manifest.txt", "model.so", "weights.bin"}) {
      if (!members.count(m)) throw PackageError(path + " is not an Ember package (no " + m + ")");
    }
    const detail::Member blob = members["weights.bin"];
    std::istringstream lines(members["manifest.txt"].str());
    std::string line;
    std::set<std::string> used;
    while (std::getline(lines, line)) {
      std::istringstream w(line);
      std::string key;
      w >> key;
      if (key == "ember-aot") {
        int format = 0;
        w >> format;
        if (format != EMBER_AOT_FORMAT) {
          throw PackageError(path + ": package format " + std::to_string(format) +
                             ", this loader reads " + std::to_string(EMBER_AOT_FORMAT));
        }
      } else if (key == "ember") {
        std::string v;
        w >> v;
        if (v != EMBER_AOT_VERSION) {
          throw PackageError(path + " was built by Ember " + v + "; this loader is Ember " +
                             EMBER_AOT_VERSION + ": rebuild it with aot_compile");
        }
      } else if (key == "torch") {
        std::string v;
        w >> v;
        std::string mine = std::to_string(TORCH_VERSION_MAJOR) + "." +
                           std::to_string(TORCH_VERSION_MINOR) + "." +
                           std::to_string(TORCH_VERSION_PATCH);
        if (v.substr(0, v.find('+')) != mine) {
          throw PackageError(path + " was built against torch " + v + "; this program uses " +
                             "torch " + mine + ": rebuild it");
        }
      } else if (key == "isa") {
        std::string level, flag, missing;
        w >> level;
        auto have = detail::cpu_flags();
        while (w >> flag) {
          if (!have.count(flag)) missing += (missing.empty() ? "" : ", ") + flag;
        }
        if (!missing.empty()) {
          throw PackageError(path + " was built for " + level + "; this CPU lacks " + missing);
        }
      } else if (key == "outputs") {
        w >> n_outputs_;
      } else if (key == "input") {
        size_t index;
        std::string name;
        w >> index >> name;
        slot(index);
        inputs_.push_back(index);
        input_names_.push_back(name);
      } else if (key == "tensor") {
        size_t index, ndim;
        std::string kind, name, dt;
        w >> index >> kind >> name >> dt >> ndim;
        std::vector<int64_t> size(ndim);
        for (auto& s : size) w >> s;
        int64_t offset, nbytes;
        int channels_last = 0;  // a 4-D weight stored and handed over as NHWC
        w >> offset >> nbytes >> channels_last;
        if (!w || (channels_last && ndim != 4)) {
          throw PackageError(path + ": bad manifest line: " + line);
        }
        const c10::MemoryFormat format =
            channels_last ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
        at::Tensor& t = slot(index);
        auto given = weights.find(name);
        if (kind == "weight" && given != weights.end()) {
          t = checked(given->second, name, detail::dtype(dt), size, format);
          used.insert(name);
        } else if (offset < 0) {
          throw InputError(path + " was built without its weights: supply them (" + name +
                           " is missing)");
        } else {
          t = at::detail::empty_cpu(size, detail::dtype(dt), false, format);
          if (static_cast<size_t>(t.nbytes()) != static_cast<size_t>(nbytes) ||
              static_cast<size_t>(offset) + nbytes > blob.size) {
            throw PackageError(path + ": weight " + name + " is out of bounds");
          }
          if (nbytes) std::memcpy(t.data_ptr(), blob.data + offset, nbytes);
        }
      }
    }
    for (const auto& kv : weights) {
      if (!used.count(kv.first)) throw InputError("the package has no weight " + kv.first);
    }
    lib_ = detail::map_library(members["model.so"], path);
    run_ = reinterpret_cast<Entry>(dlsym(lib_, "ember_aot_run"));
    if (run_ == nullptr) throw PackageError(path + ": its library has no ember_aot_run");
  }

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() {
    if (lib_ == nullptr) return;
    // the library may stay mapped after dlclose: its caches (arenas, packed weights) go first
    if (auto release = reinterpret_cast<void (*)()>(dlsym(lib_, "ember_aot_release"))) release();
    dlclose(lib_);
  }

  // The model's outputs for ``inputs`` (its tensor inputs in the order it was exported with).
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) {
    if (inputs.size() != inputs_.size()) {
      throw InputError(path_ + " takes " + std::to_string(inputs_.size()) + " inputs, got " +
                       std::to_string(inputs.size()));
    }
    std::vector<at::Tensor> args = args_;
    for (size_t i = 0; i < inputs.size(); ++i) args[inputs_[i]] = inputs[i];
    std::vector<void*> ptrs(args.size());
    for (size_t i = 0; i < args.size(); ++i) ptrs[i] = &args[i];
    std::vector<void*> outs(n_outputs_ ? n_outputs_ : 1, nullptr);
    char err[4096] = {0};
    int status = run_(ptrs.data(), outs.data(), err, sizeof(err));
    if (status == 1) throw InputError(err);
    if (status == 3) throw std::out_of_range(err);
    if (status != 0) throw std::runtime_error(path_ + ": " + err);
    std::vector<at::Tensor> result;
    for (size_t i = 0; i < n_outputs_; ++i) {
      auto* t = static_cast<at::Tensor*>(outs[i]);
      result.push_back(std::move(*t));
      delete t;
    }
    return result;
  }

  const std::vector<std::string>& input_names() const { return input_names_; }
  size_t num_outputs() const { return n_outputs_; }

 private:
  using Entry = int (*)(void* const*, void**, char*, int64_t);

  at::Tensor& slot(size_t index) {
    if (index >= 1u << 20) throw PackageError(path_ + ": bad manifest index");
    if (args_.size() <= index) args_.resize(index + 1);
    return args_[index];
  }

  at::Tensor checked(const at::Tensor& t, const std::string& name, c10::ScalarType dt,
                     const std::vector<int64_t>& size, c10::MemoryFormat format) {
    if (!t.defined() || t.scalar_type() != dt || t.sizes().vec() != size || !t.device().is_cpu()) {
      throw InputError("weight " + name + " must be a CPU " + c10::toString(dt) +
                       " tensor of the packaged shape");
    }
    return t.contiguous(format);
  }

  std::string path_;
  std::vector<at::Tensor> args_;
  std::vector<size_t> inputs_;
  std::vector<std::string> input_names_;
  size_t n_outputs_ = 0;
  void* lib_ = nullptr;
  Entry run_ = nullptr;
};

}  // namespace aot
}  // namespace ember
