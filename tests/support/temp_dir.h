// temp_dir.h: a uniquely named temporary directory for CPU tests that write files, removed with
// everything in it when the object goes out of scope.
#pragma once
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace sg::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "sg_test") {
    static int counter = 0;
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace sg::test
