#include "common/base/task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pdspark {
namespace {

// Resumes the awaiting coroutine on a new thread, as a gRPC or network callback would.
class ResumeOnAnotherThread {
 public:
  explicit ResumeOnAnotherThread(std::vector<std::thread>* threads) : threads_(threads) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    threads_->emplace_back([waiter] { waiter.resume(); });
  }
  void await_resume() const noexcept {}

 private:
  std::vector<std::thread>* threads_;
};

Task<int> Twice(int v) { co_return 2 * v; }

Task<int> SumOfTwice(int a, int b) {
  const int x = co_await Twice(a);
  const int y = co_await Twice(b);
  co_return x + y;
}

TEST(TaskTest, AwaitsNestedTasksAndHandsTheResultToSpawn) {
  int got = 0;
  Spawn(SumOfTwice(3, 4), [&](int v) { got = v; });
  EXPECT_EQ(got, 14);
}

Task<void> HoldAndHop(std::shared_ptr<int> held, std::vector<std::thread>* threads,
                      std::atomic<int>* ran) {
  ResumeOnAnotherThread hop(threads);
  co_await hop;
  ran->fetch_add(1);
}

Task<void> RunAll(std::shared_ptr<int> held, int n, std::vector<std::thread>* threads,
                  std::atomic<int>* ran, std::atomic<int>* ran_when_joined) {
  std::vector<Task<void>> tasks;
  for (int i = 0; i < n; ++i) tasks.push_back(HoldAndHop(held, threads, ran));
  co_await WhenAll(std::move(tasks));
  ran_when_joined->store(ran->load());
}

TEST(TaskTest, WhenAllResumesOnceEveryTaskFinishedOnItsOwnThread) {
  for (int round = 0; round < 20; ++round) {
    auto held = std::make_shared<int>(0);
    std::vector<std::thread> threads;
    threads.reserve(64);
    std::atomic<int> ran{0}, ran_when_joined{-1}, done{0};
    Spawn(RunAll(held, 32, &threads, &ran, &ran_when_joined), [&] { done.fetch_add(1); });
    while (done.load() == 0) std::this_thread::yield();
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(ran_when_joined.load(), 32);
    EXPECT_EQ(done.load(), 1);
    // Every frame, and what it held, is gone: nothing destroyed twice, nothing leaked.
    EXPECT_EQ(held.use_count(), 1);
  }
}

TEST(TaskTest, WhenAllOfNothingGoesOnAtOnce) {
  bool done = false;
  auto none = []() -> Task<void> { co_await WhenAll({}); };
  Spawn(none(), [&] { done = true; });
  EXPECT_TRUE(done);
}

TEST(TaskTest, ATaskNeverStartedFreesWhatItHolds) {
  auto held = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  {
    Task<void> task = HoldAndHop(held, nullptr, &ran);
    EXPECT_EQ(held.use_count(), 2);
  }
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_EQ(ran.load(), 0);
}

}  // namespace
}  // namespace pdspark
