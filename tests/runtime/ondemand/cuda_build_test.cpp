// On-demand compilation's CUDA side, built where nvcc is (no GPU needed): a spec outside
// generated/ is compiled, its host and CUDA sides are built with nvcc into one shared library for
// sm_90a, and loading it registers the variant, a device map for every prologue role and the
// fused chunk forward. A second request finds the library in the cache without building.
#include "linac/Pipeline/OnDemand.h"
#include "linac/Spec/SpecParser.h"
#include "registry/registry.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace linac {
namespace {

pipeline::OnDemandOptions cudaOptions(const std::string& cache) {
  pipeline::OnDemandOptions o{cache, "linac_ondemand_cuda_tests", LINAC_SPECS_DIR, LINAC_RUNTIME_DIR, LINAC_CXX};
  o.nvcc = LINAC_NVCC;
  o.cudaArch = pipeline::cudaArchFor(9, 0);
  return o;
}

time_t modified(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mtime;
}

TEST(OnDemandCuda, ArchitectureNames) {
  EXPECT_EQ(pipeline::cudaArchFor(9, 0), "sm_90a");
  EXPECT_EQ(pipeline::cudaArchFor(8, 0), "sm_80");
  EXPECT_EQ(pipeline::cudaArchFor(8, 9), "sm_89");
}

TEST(OnDemandCuda, BuildsAndRegistersTheDeviceSide) {
  const std::string cache = LINAC_TEST_CACHE_DIR;
  ASSERT_EQ(std::system(("rm -rf '" + cache + "'").c_str()), 0);
  const spec::VariantSpec spec = spec::loadVariant(LINAC_ONDEMAND_SPEC);
  ASSERT_EQ(runtime::Registry::find(spec.name), nullptr) << "the test spec must not be in generated/";

  std::ostringstream log;
  const std::string library = pipeline::buildVariantLibrary(spec, LINAC_ONDEMAND_SPEC, cudaOptions(cache), log);
  EXPECT_NE(library.find("lib" + spec.name + "-sm_90a.so"), std::string::npos) << library;
  EXPECT_NE(log.str().find("(host and sm_90a)"), std::string::npos) << log.str();

  const runtime::VariantKernels& loaded = runtime::loadVariantLibrary(library, spec.name);
  EXPECT_EQ(loaded.specHash, spec.hash);
  ASSERT_FALSE(loaded.maps.empty());
  for (const runtime::PrologueMap& map : loaded.maps)
    EXPECT_NE(runtime::Registry::findDevice(map), nullptr) << "no device map for role " << map.role;
  EXPECT_NE(runtime::Registry::findFusedForward(loaded), nullptr);

  // Cached: the same path, not rebuilt.
  const time_t built = modified(library);
  std::ostringstream again;
  EXPECT_EQ(pipeline::buildVariantLibrary(spec, LINAC_ONDEMAND_SPEC, cudaOptions(cache), again), library);
  EXPECT_EQ(again.str(), "");
  EXPECT_EQ(modified(library), built);
}

TEST(OnDemandCuda, RejectsAMalformedArchitecture) {
  const spec::VariantSpec spec = spec::loadVariant(LINAC_ONDEMAND_SPEC);
  pipeline::OnDemandOptions o = cudaOptions(std::string(LINAC_TEST_CACHE_DIR) + "-bad");
  o.cudaArch = "90a; true";
  std::ostringstream log;
  try {
    pipeline::buildVariantLibrary(spec, LINAC_ONDEMAND_SPEC, o, log);
    FAIL() << "built for a malformed architecture";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a GPU architecture: '90a; true'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linac
