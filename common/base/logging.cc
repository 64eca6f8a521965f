#include "common/base/logging.h"

#include <string>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace pdspark {

void InitLogging(std::string_view role, std::string_view level) {
  // Logs go to stderr so that stdout stays clean for machine-readable output (--json).
  auto logger = spdlog::stderr_color_mt(std::string(role));
  logger->set_pattern(fmt::format("%Y-%m-%dT%H:%M:%S.%e %^%l%$ {} %v", role));
  logger->set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(logger);
}

}  // namespace pdspark
