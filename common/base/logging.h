// Structured one-line logging on top of spdlog: `LOG_INFO("model loaded path={} tensors={}", p, n)`.
// Every line carries time, level and the process role (router, prefill, decode, cli).
#pragma once

#include <string_view>

#include "spdlog/spdlog.h"

namespace pdspark {

// Sets the process-wide log format and level ("trace".."error"); call once at start-up.
void InitLogging(std::string_view role, std::string_view level = "info");

}  // namespace pdspark

#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
