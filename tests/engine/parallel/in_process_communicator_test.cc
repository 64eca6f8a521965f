#include "engine/parallel/in_process_communicator.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdspark::parallel {
namespace {

using std::chrono::milliseconds;

const std::vector<int> kWorldSizes = {1, 2, 3, 4, 8};
const std::vector<size_t> kSizes = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 100, 511, 513, 1000, 4097};

std::unique_ptr<InProcessGroup> MakeGroup(int world_size,
                                          milliseconds timeout = milliseconds(60000)) {
  auto group = InProcessGroup::Create(world_size, {.barrier_timeout = timeout});
  EXPECT_TRUE(group.ok()) << group.status();
  return std::move(group).value();
}

// Runs `body(comm)` on one thread per rank and joins them.
void RunRanks(InProcessGroup& group, const std::function<void(Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group.world_size(); ++r) {
    threads.emplace_back([&, r] { body(*group.Rank(r)); });
  }
  for (std::thread& t : threads) t.join();
}

// A value that differs per rank, element and round, so stale or misplaced data shows up.
float Value(int rank, size_t i, int round = 0) {
  return static_cast<float>(rank * 1000 + static_cast<int>(i % 997)) + 0.25f * round;
}

// Data for which float addition order matters: magnitudes from 1e-3 to 1e7, mixed signs.
std::vector<float> NonAssociativeData(int rank, size_t n) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-3, 7);
  std::vector<float> data(n);
  for (float& x : data) x = mantissa(rng) * std::pow(10.0f, static_cast<float>(exponent(rng)));
  return data;
}

TEST(InProcessGroupTest, RejectsBadWorldSizeAndTimeout) {
  EXPECT_EQ(InProcessGroup::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InProcessGroup::Create(65).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InProcessGroup::Create(2, {.barrier_timeout = milliseconds(0)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InProcessGroupTest, RanksKnowTheirPlace) {
  auto group = MakeGroup(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group->Rank(r)->rank(), r);
    EXPECT_EQ(group->Rank(r)->world_size(), 3);
  }
  EXPECT_EQ(group->Rank(-1), nullptr);
  EXPECT_EQ(group->Rank(3), nullptr);
}

TEST(InProcessCommunicatorTest, AllReduceSumAllSizes) {
  for (int world : kWorldSizes) {
    auto group = MakeGroup(world);
    RunRanks(*group, [&](Communicator& comm) {
      for (size_t n : kSizes) {
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = Value(comm.rank(), i);
        ASSERT_TRUE(comm.AllReduceSum(data.data(), n).ok());
        for (size_t i = 0; i < n; ++i) {
          float expected = 0.0f;
          for (int r = 0; r < world; ++r) expected += Value(r, i);
          ASSERT_EQ(data[i], expected) << "world " << world << " n " << n << " i " << i;
        }
      }
    });
  }
}

TEST(InProcessCommunicatorTest, AllGatherAllSizes) {
  for (int world : kWorldSizes) {
    auto group = MakeGroup(world);
    RunRanks(*group, [&](Communicator& comm) {
      for (size_t n : kSizes) {
        std::vector<float> in(n);
        for (size_t i = 0; i < n; ++i) in[i] = Value(comm.rank(), i);
        std::vector<float> out(world * n, -1.0f);
        ASSERT_TRUE(comm.AllGather(in.data(), n, out.data()).ok());
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[r * n + i], Value(r, i)) << "world " << world << " n " << n;
          }
        }
      }
    });
  }
}

TEST(InProcessCommunicatorTest, AllGatherInPlace) {
  constexpr size_t kN = 37;
  for (int world : kWorldSizes) {
    auto group = MakeGroup(world);
    RunRanks(*group, [&](Communicator& comm) {
      std::vector<float> buffer(world * kN, -1.0f);
      float* mine = buffer.data() + comm.rank() * kN;
      for (size_t i = 0; i < kN; ++i) mine[i] = Value(comm.rank(), i);
      ASSERT_TRUE(comm.AllGather(mine, kN, buffer.data()).ok());
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < kN; ++i) ASSERT_EQ(buffer[r * kN + i], Value(r, i));
      }
    });
  }
}

TEST(InProcessCommunicatorTest, BroadcastEveryRootAllSizes) {
  for (int world : kWorldSizes) {
    auto group = MakeGroup(world);
    RunRanks(*group, [&](Communicator& comm) {
      for (int root = 0; root < world; ++root) {
        for (size_t n : kSizes) {
          std::vector<float> data(n);
          for (size_t i = 0; i < n; ++i) data[i] = Value(comm.rank(), i);
          ASSERT_TRUE(comm.Broadcast(data.data(), n, root).ok());
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], Value(root, i));
        }
      }
    });
  }
}

TEST(InProcessCommunicatorTest, ThousandMixedRoundsWithoutBarrierRaces) {
  // Back-to-back collectives with changing sizes and per-round values: a rank that runs ahead
  // into the next round while a peer still reads its buffer would corrupt a result.
  constexpr int kRounds = 1000;
  for (int world : {2, 3, 8}) {
    auto group = MakeGroup(world);
    RunRanks(*group, [&](Communicator& comm) {
      for (int round = 0; round < kRounds; ++round) {
        const size_t n = 1 + (round * 7) % 61;
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = Value(comm.rank(), i, round);
        switch (round % 4) {
          case 0: {
            ASSERT_TRUE(comm.AllReduceSum(data.data(), n).ok());
            for (size_t i = 0; i < n; ++i) {
              float expected = 0.0f;
              for (int r = 0; r < world; ++r) expected += Value(r, i, round);
              ASSERT_EQ(data[i], expected) << "round " << round;
            }
            break;
          }
          case 1: {
            std::vector<float> out(world * n);
            ASSERT_TRUE(comm.AllGather(data.data(), n, out.data()).ok());
            for (int r = 0; r < world; ++r) {
              for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[r * n + i], Value(r, i, round));
            }
            break;
          }
          case 2: {
            const int root = round % world;
            ASSERT_TRUE(comm.Broadcast(data.data(), n, root).ok());
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], Value(root, i, round));
            break;
          }
          default:
            ASSERT_TRUE(comm.Barrier().ok());
        }
      }
    });
  }
}

TEST(InProcessCommunicatorTest, AllReduceIsBitwiseDeterministicInRankOrder) {
  constexpr size_t kN = 10007;
  for (int world : {2, 3, 4, 8}) {
    // The exact expected bits: left-to-right sum over ranks 0..N-1.
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(NonAssociativeData(r, kN));
    std::vector<float> expected(kN, 0.0f), reversed(kN, 0.0f);
    for (size_t i = 0; i < kN; ++i) {
      expected[i] = inputs[0][i];
      for (int r = 1; r < world; ++r) expected[i] += inputs[r][i];
      reversed[i] = inputs[world - 1][i];
      for (int r = world - 2; r >= 0; --r) reversed[i] += inputs[r][i];
    }
    if (world > 2) {
      // Sanity check of the data: summation order must matter for this test to mean anything.
      ASSERT_NE(std::memcmp(expected.data(), reversed.data(), kN * sizeof(float)), 0);
    }
    for (int run = 0; run < 20; ++run) {
      auto group = MakeGroup(world);
      RunRanks(*group, [&](Communicator& comm) {
        std::vector<float> data = inputs[comm.rank()];
        ASSERT_TRUE(comm.AllReduceSum(data.data(), kN).ok());
        ASSERT_EQ(std::memcmp(data.data(), expected.data(), kN * sizeof(float)), 0)
            << "world " << world << " run " << run << " rank " << comm.rank();
      });
    }
  }
}

// The double reduction (what the model uses) sums in rank order too, with slices aligned to
// cache lines of doubles, and gives every rank the same bits.
TEST(InProcessCommunicatorTest, DoubleAllReduceIsBitwiseRankOrder) {
  for (int world : {1, 2, 3, 8}) {
    for (size_t n : kSizes) {
      std::vector<std::vector<double>> inputs;
      for (int r = 0; r < world; ++r) {
        const std::vector<float> f = NonAssociativeData(r, n);
        inputs.emplace_back(f.begin(), f.end());
        for (double& x : inputs.back()) x *= 1.0 + 1e-9 * r;  // bits below float precision
      }
      std::vector<double> expected = inputs[0];
      for (size_t i = 0; i < n; ++i) {
        for (int r = 1; r < world; ++r) expected[i] += inputs[r][i];
      }
      auto group = MakeGroup(world);
      RunRanks(*group, [&](Communicator& comm) {
        std::vector<double> data = inputs[comm.rank()];
        ASSERT_TRUE(comm.AllReduceSum(data.data(), n).ok());
        ASSERT_EQ(std::memcmp(data.data(), expected.data(), n * sizeof(double)), 0)
            << "world " << world << " n " << n << " rank " << comm.rank();
      });
    }
  }
}

TEST(InProcessCommunicatorTest, FloatAndDoubleReductionsDoNotMix) {
  auto group = MakeGroup(2);
  RunRanks(*group, [&](Communicator& comm) {
    std::vector<float> f(8, 1.0f);
    std::vector<double> d(8, 1.0);
    const Status st =
        comm.rank() == 0 ? comm.AllReduceSum(f.data(), 8) : comm.AllReduceSum(d.data(), 8);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(st.message(), ::testing::HasSubstr("AllReduceSum<double>"));
    EXPECT_THAT(f, ::testing::Each(1.0f));
  });
}

TEST(InProcessCommunicatorTest, TimesOutWhenOneRankNeverArrives) {
  constexpr int kWorld = 3;
  auto group = MakeGroup(kWorld, milliseconds(200));
  std::vector<Status> results(kWorld);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kWorld - 1; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data(10, 1.0f);
      results[r] = group->Rank(r)->AllReduceSum(data.data(), data.size());
    });
  }
  for (std::thread& t : threads) t.join();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_LT(waited, milliseconds(10000));
  for (int r = 0; r < kWorld - 1; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded) << results[r];
  }
  // The group is broken now: the straggler and later calls fail fast instead of hanging.
  std::vector<float> data(10, 1.0f);
  EXPECT_EQ(group->Rank(kWorld - 1)->AllReduceSum(data.data(), data.size()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(group->Rank(0)->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(InProcessCommunicatorTest, AbortWakesBlockedRanks) {
  auto group = MakeGroup(3);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { results[r] = group->Rank(r)->Barrier(); });
  }
  std::this_thread::sleep_for(milliseconds(50));
  group->Abort(absl::InternalError("rank 2 failed to load weights"));
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("rank 2 failed"));
  }
}

TEST(InProcessCommunicatorTest, MismatchedCallsFailOnEveryRankAndGroupStaysUsable) {
  auto group = MakeGroup(3);
  RunRanks(*group, [&](Communicator& comm) {
    std::vector<float> data(8, 1.0f);
    // Rank 1 asks for a different size: everyone gets the same InvalidArgument.
    const size_t n = comm.rank() == 1 ? 7 : 8;
    const Status mismatch = comm.AllReduceSum(data.data(), n);
    EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument) << mismatch;
    EXPECT_THAT(mismatch.message(), ::testing::HasSubstr("mismatch"));
    EXPECT_THAT(data, ::testing::Each(1.0f));  // Nothing was touched.

    // Different collectives.
    const Status op_mismatch =
        comm.rank() == 0 ? comm.Barrier() : comm.Broadcast(data.data(), 8, 0);
    EXPECT_EQ(op_mismatch.code(), absl::StatusCode::kInvalidArgument) << op_mismatch;

    // Bad root on one rank.
    const Status bad_root = comm.Broadcast(data.data(), 8, comm.rank() == 2 ? 5 : 0);
    EXPECT_EQ(bad_root.code(), absl::StatusCode::kInvalidArgument) << bad_root;
    EXPECT_THAT(bad_root.message(), ::testing::HasSubstr("rank 2"));

    // Still in lockstep afterwards.
    ASSERT_TRUE(comm.AllReduceSum(data.data(), 8).ok());
    EXPECT_THAT(data, ::testing::Each(3.0f));
  });
}

TEST(InProcessCommunicatorTest, NullBufferWithZeroSizeIsFine) {
  auto group = MakeGroup(2);
  RunRanks(*group, [&](Communicator& comm) {
    EXPECT_TRUE(comm.AllReduceSum(static_cast<float*>(nullptr), 0).ok());
    EXPECT_TRUE(comm.AllReduceSum(static_cast<double*>(nullptr), 0).ok());
    EXPECT_TRUE(comm.AllGather(nullptr, 0, nullptr).ok());
    EXPECT_TRUE(comm.Broadcast(nullptr, 0, 1).ok());
    EXPECT_EQ(comm.AllReduceSum(static_cast<float*>(nullptr), 4).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace pdspark::parallel
