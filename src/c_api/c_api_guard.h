// The exception firewall of the C API: runs a callable, maps tessera::Error and every other
// exception to a status, and records the message for tessera_last_error().
#pragma once

#include <exception>
#include <new>
#include <string>

#include "tessera/c_api.h"
#include "tessera/core/status.h"

namespace tessera::c_api {

void set_last_error(std::string message) noexcept;
void clear_last_error() noexcept;

template <class F>
tessera_status guard(F&& f) noexcept {
  try {
    clear_last_error();
    f();
    return TESSERA_STATUS_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<tessera_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error("tessera out of memory: allocation failed");
    return TESSERA_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("tessera internal error: ") + e.what());
    return TESSERA_STATUS_INTERNAL;
  } catch (...) {
    set_last_error("tessera internal error: unknown exception");
    return TESSERA_STATUS_INTERNAL;
  }
}

}  // namespace tessera::c_api
