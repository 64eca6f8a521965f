// Task<T>: a C++20 coroutine that returns a T, so a request can wait for the network without
// holding a thread. A Task starts when it is awaited (or handed to Spawn) and resumes its awaiter
// when it returns; whichever thread completes the awaited operation (a gRPC callback, an event
// loop) runs the coroutine on until its next co_await. No exceptions cross it: one escaping a
// coroutine terminates, as the project builds without exception handling on these paths.
//
//   Task<int> Add(Task<int> a) { co_return co_await std::move(a) + 1; }
//   Spawn(Add(...), [](int v) { ... });          // runs detached, calls back with the result
//   co_await WhenAll(std::move(tasks));          // runs Task<void>s side by side
//
// GCC 12 destroys a brace-initialised temporary in a co_await expression twice
// (`co_await Awaiter{...}`): name such awaiters first, or give them a constructor.
#pragma once

#include <atomic>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace pdspark {

template <typename T>
class Task;

namespace task_internal {

// Resumes the awaiting coroutine (symmetric transfer: no stack growth along a chain of tasks).
struct FinalAwaiter {
  bool await_ready() const noexcept { return false; }
  template <typename Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> done) noexcept {
    std::coroutine_handle<> next = done.promise().continuation;
    return next ? next : std::noop_coroutine();
  }
  void await_resume() const noexcept {}
};

struct PromiseBase {
  std::coroutine_handle<> continuation;
  std::suspend_always initial_suspend() const noexcept { return {}; }
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() const noexcept { std::terminate(); }
};

// What a Task<T> coroutine returns into: a value, or nothing for T = void.
template <typename T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  void return_value(T v) { value.emplace(std::move(v)); }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  void return_void() const noexcept {}
};

}  // namespace task_internal

template <typename T>
class [[nodiscard]] Task {
 public:
  using promise_type = task_internal::Promise<T>;

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~Task() {
    if (handle_) handle_.destroy();
  }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  T await_resume() {
    if constexpr (!std::is_void_v<T>) return std::move(*handle_.promise().value);
  }

 private:
  friend promise_type;
  explicit Task(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

namespace task_internal {

template <typename T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}

inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}

// A coroutine nobody awaits: it starts at once and frees itself at its end.
struct Detached {
  struct promise_type {
    Detached get_return_object() const noexcept { return {}; }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }
  };
};

template <typename T, typename Done>
Detached RunDetached(Task<T> task, Done done) {
  if constexpr (std::is_void_v<T>) {
    co_await std::move(task);
    done();
  } else {
    done(co_await std::move(task));
  }
}

}  // namespace task_internal

// Runs `task` without an awaiter; `done` gets its result (nothing for Task<void>) on the thread
// that finished it.
template <typename T, typename Done>
void Spawn(Task<T> task, Done done) {
  task_internal::RunDetached(std::move(task), std::move(done));
}
inline void Spawn(Task<void> task) {
  Spawn(std::move(task), [] {});
}

// Runs every task side by side; resumes once all of them have returned.
inline Task<void> WhenAll(std::vector<Task<void>> tasks) {
  struct Join {
    std::atomic<size_t> left;
    std::coroutine_handle<> waiter;
  };
  struct Awaiter {
    std::vector<Task<void>>& tasks;
    std::shared_ptr<Join> join;
    bool await_ready() const noexcept { return tasks.empty(); }
    void await_suspend(std::coroutine_handle<> waiter) {
      join->waiter = waiter;
      // Move the tasks out first: the last one to finish resumes (and may end) the awaiter.
      std::vector<Task<void>> started = std::move(tasks);
      for (Task<void>& task : started) {
        Spawn(std::move(task), [join = join] {
          if (join->left.fetch_sub(1) == 1) join->waiter.resume();
        });
      }
    }
    void await_resume() const noexcept {}
  };
  auto join = std::make_shared<Join>();
  join->left = tasks.size();
  Awaiter all{tasks, std::move(join)};
  co_await all;
}

}  // namespace pdspark
