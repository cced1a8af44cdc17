// Bus-fault guard: turns the SIGBUS of reading a memory-mapped file that was truncated
// underneath us into an error the loader can report, instead of killing the process.
//
// A read through a mapping past a file's (new) end raises SIGBUS. tokenfeed maps dataset
// files for their whole life, so a file shortened by another process while a loader runs
// (rewriting a dataset in place, a full disk during a copy) would otherwise crash the
// trainer without a word. With the guard, each mapping is registered; when a registered
// page faults, the handler marks the mapping damaged and puts a page of zeros in its place,
// so the reading code finishes (with zeros) and its caller, which checks damaged() after
// reading, throws Error(io) naming the file. A fault outside every registered mapping goes
// to the handler that was installed before ours (or the default action: the process dies
// as it would have without tokenfeed).
//
// The handler is installed the first time a mapping is registered. A host program that
// installs its own SIGBUS handler after that replaces ours; it then gets the faults, as
// it asked.
//
// Thread-safety: all functions may be called from any thread; the handler is
// async-signal-safe (atomics and mmap only).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokenfeed::bus_fault_guard {

// Registers [data, data + size) and returns its registration (kUnguarded when the table
// of registrations is full: the mapping then works as before, without the guard).
constexpr std::uint32_t kUnguarded = UINT32_MAX;
std::uint32_t register_mapping(const void* data, std::size_t size) noexcept;
// Ends a registration before its mapping is unmapped.
void unregister_mapping(std::uint32_t registration) noexcept;
// True once a read of this mapping hit a page past its file's end.
bool damaged(std::uint32_t registration) noexcept;
// Faults turned into damaged mappings since the process started: 0 means no read of any
// registered mapping has failed, so callers can skip checking their mappings one by one.
std::uint64_t fault_count() noexcept;

}  // namespace tokenfeed::bus_fault_guard
