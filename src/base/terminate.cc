#include "lockstep/base/terminate.h"

#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <typeinfo>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "base/log_rank.h"

namespace lockstep {
namespace {

std::terminate_handler g_previous = nullptr;  // written once, under std::call_once

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

void write_line(const std::string& line) {
  std::string text = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
}

[[noreturn]] void on_terminate() {
  if (std::exception_ptr current = std::current_exception()) {
    std::fflush(stdout);
    bool ours = false;
    std::string type, message;
    try {
      std::rethrow_exception(current);
    } catch (const Error& e) {
      ours = true;
      type = demangle(typeid(e).name());
      message = e.what();
    } catch (const std::exception& e) {
      type = demangle(typeid(e).name());
      message = e.what();
    } catch (...) {
      const std::type_info* info = abi::__cxa_current_exception_type();
      type = info ? demangle(info->name()) : "unknown exception";
    }
    write_line(uncaught_error_line(type, message, current_log_rank()));
    if (ours) ::_exit(kUncaughtErrorExitCode);  // other threads may hold locks: no destructors
  }
  if (g_previous) g_previous();
  std::abort();
}

}  // namespace

void install_terminate_handler() {
  static std::once_flag once;
  std::call_once(once, [] { g_previous = std::set_terminate(on_terminate); });
}

std::string uncaught_error_line(std::string_view type, std::string_view message, int rank) {
  std::string where = rank >= 0 ? fmt::format(" on rank {}", rank) : "";
  return fmt::format("{}{}{}: {}", kUncaughtErrorMarker, type, where, message);
}

std::string uncaught_error_summary(std::string_view line) {
  if (!line.starts_with(kUncaughtErrorMarker)) return {};
  line.remove_prefix(kUncaughtErrorMarker.size());
  const auto colon = line.find(": ");
  if (colon == std::string_view::npos) return {};
  std::string_view type = line.substr(0, colon);
  if (auto on = type.find(" on rank "); on != std::string_view::npos) type = type.substr(0, on);
  if (auto ns = type.rfind("::"); ns != std::string_view::npos) type.remove_prefix(ns + 2);
  return fmt::format("{}: {}", type, line.substr(colon + 2));
}

}  // namespace lockstep
