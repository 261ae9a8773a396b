#pragma once

// Symbols of the core library that other libraries (the Python bindings, tests) may use.
#define FLAGOS_API __attribute__((visibility("default")))
