// Online STS: on synthetic rounds whose true acceptance is sigmoid(z / 2) at every slot, the fit
// moves the temperatures to about 2 and lowers the calibration error, also when (as in the
// engine) how many drafts are verified depends on the confidences; offline temperatures load
// from config.json with clear errors.
#include "engine/dspark/confidence_calibration.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"

namespace pdspark::dspark {
namespace {

constexpr int64_t kBlock = 5;

// Rounds where slot k is accepted (given 1..k-1 were) with probability sigmoid(z_k / 2);
// `verify_of` picks how many of the 5 drafts are verified from the raw logits.
void Feed(ConfidenceCalibration& calibration, int rounds,
          const std::function<int64_t(const std::vector<float>&)>& verify_of) {
  std::mt19937 rng(17);
  std::normal_distribution<float> logit(1.5f, 2.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < rounds; ++i) {
    std::vector<float> z(kBlock);
    for (float& v : z) v = logit(rng);
    const int64_t verified = verify_of(z);
    int64_t accepted = 0;
    while (accepted < verified && u(rng) < 1.0 / (1.0 + std::exp(-z[accepted] / 2.0))) ++accepted;
    calibration.Observe(z, verified, accepted);
  }
}

TEST(ConfidenceCalibrationTest, OnlineFitMovesTowardsTheObservedAcceptance) {
  auto all = [](const std::vector<float>&) { return kBlock; };
  ConfidenceCalibration raw(kBlock, {},
                            {.window = 2048, .refit_every = 1 << 30, .min_rounds = 1 << 30});
  Feed(raw, 2000, all);
  EXPECT_EQ(raw.temperatures(), std::vector<double>(kBlock, 1.0));
  ConfidenceCalibration calibration(kBlock);
  Feed(calibration, 2000, all);
  calibration.Refit();  // on exactly what is stored, whatever the refit cadence did
  for (int64_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(std::log2(calibration.temperatures()[k]), 1.0, 0.35) << "slot " << k;
  }
  EXPECT_LT(calibration.ExpectedCalibrationError(0), raw.ExpectedCalibrationError(0) / 2);
  // Calibrated survivals are what they predict: S_1 of z = 2 is about sigmoid(1).
  const std::vector<float> z(kBlock, 2.0f);
  EXPECT_NEAR(calibration.Survival(z)[0], 1.0 / (1.0 + std::exp(-1.0)), 0.06);
}

TEST(ConfidenceCalibrationTest, ConfidenceDependentVerifyLengthsDoNotBiasTheFit) {
  ConfidenceCalibration calibration(kBlock);
  // Verify while the raw confidence stays above 0.6, as a confidence scheduler would.
  Feed(calibration, 3000, [](const std::vector<float>& z) {
    int64_t n = 0;
    while (n < kBlock && 1.0 / (1.0 + std::exp(-z[n])) > 0.6) ++n;
    return std::max<int64_t>(n, 1);
  });
  calibration.Refit();
  EXPECT_NEAR(std::log2(calibration.temperatures()[0]), 1.0, 0.35);
  EXPECT_NEAR(std::log2(calibration.temperatures()[1]), 1.0, 0.5);
}

TEST(ConfidenceCalibrationTest, KeepsInitialTemperaturesUntilEnoughRounds) {
  ConfidenceCalibration calibration(kBlock, {3.0, 0.5});
  EXPECT_EQ(calibration.temperatures(), (std::vector<double>{3.0, 0.5, 1.0, 1.0, 1.0}));
  Feed(calibration, 40, [](const std::vector<float>&) { return 1; });
  calibration.Refit();
  EXPECT_EQ(calibration.temperatures()[0], 3.0);  // 40 < min_rounds
  EXPECT_EQ(calibration.temperatures()[1], 0.5);  // never verified
}

TEST(ConfidenceCalibrationTest, LoadsOfflineTemperaturesFromConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "pdspark_sts_config_test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "config.json") << text; };
  write(R"({"dspark_block_size": 2})");
  EXPECT_TRUE(LoadConfidenceTemperatures(dir.string(), 2).value().empty());
  write(R"({"dspark_confidence_temperatures": [1.5, 0.75]})");
  EXPECT_EQ(LoadConfidenceTemperatures(dir.string(), 2).value(), (std::vector<double>{1.5, 0.75}));
  for (const char* bad : {R"({"dspark_confidence_temperatures": [1.5]})",
                          R"({"dspark_confidence_temperatures": [1.5, -1]})",
                          R"({"dspark_confidence_temperatures": "hot"})"}) {
    write(bad);
    auto t = LoadConfidenceTemperatures(dir.string(), 2);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(t.status().message()).find("dspark_confidence_temperatures"),
              std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdspark::dspark
