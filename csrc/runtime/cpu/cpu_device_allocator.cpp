#include "runtime/cpu/cpu_device_allocator.h"

#include "runtime/accelerator.h"
#include "runtime/cpu/stat_update.h"
#include "runtime/fork_safe_mutex.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iomanip>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

namespace torch_fl::cpu {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;

namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallLimit = size_t(1) << 20; // below: "small pool", as CUDA reports it

size_t round_size(size_t nbytes) {
  return (nbytes + kRound - 1) / kRound * kRound;
}

// Every per-pool statistic of `stats` (counts and bytes), for the resets.
template <typename F>
void for_each_stat(c10::CachingDeviceAllocator::DeviceStats& stats, F f) {
  for (auto* pools :
       {&stats.allocation,
        &stats.segment,
        &stats.active,
        &stats.inactive_split,
        &stats.allocated_bytes,
        &stats.reserved_bytes,
        &stats.active_bytes,
        &stats.inactive_split_bytes,
        &stats.requested_bytes}) {
    for (auto& stat : *pools) {
      f(stat);
    }
  }
}

template <typename F>
void for_pools(size_t size, F f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(size < kSmallLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

// An adopted native allocation is its own segment: it counts as allocated, active, reserved
// and requested at once. `update` is increase or decrease (a functor, so it inlines: this runs
// for every result a routed call returns, and again when it is freed).
template <typename Update>
void account_adopted(
    c10::CachingDeviceAllocator::DeviceStats& stats, size_t nbytes, Update update) {
  for_pools(nbytes, [&](size_t p) {
    for (Stat* s : {&stats.allocation[p], &stats.active[p], &stats.segment[p]}) {
      update(*s, 1);
    }
    for (Stat* s :
         {&stats.allocated_bytes[p],
          &stats.active_bytes[p],
          &stats.reserved_bytes[p],
          &stats.requested_bytes[p]}) {
      update(*s, nbytes);
    }
  });
}

// The profiler's memory events (torch.profiler's profile_memory=True, memory timelines), as
// CUDA's allocator reports them: `delta` bytes at `ptr`, with the device's totals after it.
// Cheap when no profiler records memory (one thread-local lookup).
struct ProfilerReport {
  void* ptr;
  int64_t delta;
  size_t allocated;
  size_t reserved;

  ProfilerReport(void* p, int64_t d, const c10::CachingDeviceAllocator::DeviceStats& stats)
      : ptr(p),
        delta(d),
        allocated(static_cast<size_t>(stats.allocated_bytes[0].current)),
        reserved(static_cast<size_t>(stats.reserved_bytes[0].current)) {}

  void send(c10::DeviceIndex device) const {
    c10::reportMemoryUsageToProfiler(
        ptr, delta, allocated, reserved, c10::Device(c10::DeviceType::PrivateUse1, device));
  }
};

} // namespace

struct CpuDeviceAllocator::Block {
  void* ptr;
  size_t size;      // rounded, as reserved
  size_t requested; // as asked
  c10::DeviceIndex device;
  CpuDeviceAllocator* owner;
};

// Memory a native kernel allocated, accounted as flagos memory until flagos releases it. Kept
// in an intrusive list (linked and unlinked under the device's mutex, which the accounting
// takes anyway) so snapshots see it.
struct CpuDeviceAllocator::AdoptedBlock {
  c10::DataPtr native;
  size_t size;
  c10::DeviceIndex device;
  CpuDeviceAllocator* owner;
  bool cpu_report_taken_back = false; // see take_back_cpu_report
  AdoptedBlock* prev = nullptr;
  AdoptedBlock* next = nullptr;
};

struct CpuDeviceAllocator::DeviceState {
  // Taken before a fork and released on both sides (fork_safe_mutex.h): a lock another thread
  // held at fork would otherwise hang the child's first allocation on this device.
  mutable ForkSafeMutex mutex;
  // Of getMemoryInfo's total, as torch.cuda's per-process limit. Atomic: adopting a kernel's
  // result reads it on every routed call without the lock.
  std::atomic<double> memory_fraction{1.0};
  std::multimap<size_t, Block*> free_blocks;    // cached, by size
  std::unordered_map<const void*, Block*> live; // handed out
  AdoptedBlock* adopted = nullptr;              // head of the adopted list
  c10::CachingDeviceAllocator::DeviceStats stats;
};

CpuDeviceAllocator::CpuDeviceAllocator(c10::DeviceIndex device_count) {
  for (c10::DeviceIndex i = 0; i < device_count; ++i) {
    devices_.push_back(std::make_unique<DeviceState>());
  }
}

CpuDeviceAllocator::~CpuDeviceAllocator() = default; // never runs: the accelerator is leaked

CpuDeviceAllocator::DeviceState& CpuDeviceAllocator::state(c10::DeviceIndex device) const {
  if (C10_UNLIKELY(device < 0 || static_cast<size_t>(device) >= devices_.size())) {
    check_device_index(device); // raises the error naming the valid range
  }
  return *devices_[device];
}

c10::DataPtr CpuDeviceAllocator::allocate(size_t nbytes) {
  const auto device = accelerator().guard().getDevice().index();
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, where);
  }
  auto& st = state(device);
  const size_t size = round_size(nbytes);
  Block* block = nullptr;
  {
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    // Reuse a cached block of at most twice the size, so big blocks are not wasted.
    auto it = st.free_blocks.lower_bound(size);
    if (it != st.free_blocks.end() && it->first <= 2 * size) {
      block = it->second;
      st.free_blocks.erase(it);
    }
  }
  if (block == nullptr) {
    block = new Block{new_segment(st, device, size, nbytes), size, nbytes, device, this};
  }
  block->requested = nbytes;
  std::optional<ProfilerReport> report;
  {
    // Account the block as handed out, which may be a reused block larger than `size`:
    // release() takes back block->size, so the two must agree.
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    st.live.emplace(block->ptr, block);
    for_pools(block->size, [&](size_t p) {
      increase(st.stats.allocation[p], 1);
      increase(st.stats.active[p], 1);
      increase(st.stats.allocated_bytes[p], block->size);
      increase(st.stats.active_bytes[p], block->size);
      increase(st.stats.requested_bytes[p], nbytes);
    });
    report.emplace(block->ptr, static_cast<int64_t>(block->size), st.stats);
  }
  report->send(device);
  return c10::DataPtr(block->ptr, block, &CpuDeviceAllocator::free_block, where);
}

bool CpuDeviceAllocator::within_limit_locked(
    DeviceState& st, c10::DeviceIndex device, size_t size) {
  const double fraction = st.memory_fraction.load();
  if (fraction >= 1.0) {
    return true;
  }
  const auto limit = static_cast<double>(getMemoryInfo(device).second) * fraction;
  const auto reserved = static_cast<size_t>(st.stats.reserved_bytes[0].current);
  return static_cast<double>(reserved + size) <= limit;
}

void CpuDeviceAllocator::free_cache_for_retry(DeviceState& st) {
  {
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    st.stats.num_alloc_retries += 1;
  }
  empty_device_cache(st);
}

void* CpuDeviceAllocator::new_segment(
    DeviceState& st, c10::DeviceIndex device, size_t size, size_t nbytes) {
  // As CUDA's pool: on failure (or past the per-process limit) free this device's cache and
  // retry once. The limit is checked and the segment counted as reserved under one lock, so
  // threads allocating at once cannot all pass the check.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      free_cache_for_retry(st);
    }
    {
      std::lock_guard<ForkSafeMutex> lock(st.mutex);
      if (!within_limit_locked(st, device, size)) {
        continue;
      }
      for_pools(size, [&](size_t p) {
        increase(st.stats.segment[p], 1);
        increase(st.stats.reserved_bytes[p], size);
      });
    }
    void* ptr = nullptr;
    try {
      ptr = c10::alloc_cpu(size);
    } catch (const c10::Error&) {
    }
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    if (ptr != nullptr) {
      st.stats.num_device_alloc += 1;
      return ptr;
    }
    for_pools(size, [&](size_t p) {
      decrease(st.stats.segment[p], 1);
      decrease(st.stats.reserved_bytes[p], size);
    });
  }
  raise_out_of_memory(st, device, nbytes);
}

namespace {

// A byte count as torch's allocator messages give it ("95.37 MiB").
std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (bytes >= 1024.0 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024.0;
    ++unit;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(unit == 0 ? 0 : 2) << bytes << ' ' << kUnits[unit];
  return out.str();
}

} // namespace

void CpuDeviceAllocator::raise_out_of_memory(
    DeviceState& st, c10::DeviceIndex device, size_t nbytes) {
  const auto total = static_cast<double>(getMemoryInfo(device).second);
  std::lock_guard<ForkSafeMutex> lock(st.mutex);
  st.stats.num_ooms += 1;
  const double fraction = st.memory_fraction.load();
  const auto allocated = static_cast<double>(st.stats.allocated_bytes[0].current);
  const auto reserved = static_cast<double>(st.stats.reserved_bytes[0].current);
  const std::string limit = fraction < 1.0
                                ? c10::str(
                                      "; this process may reserve ",
                                      format_bytes(total * fraction),
                                      " of it (a fraction of ",
                                      fraction,
                                      ", set by torch.flagos.set_per_process_memory_fraction)")
                                : "";
  TORCH_CHECK_WITH(
      OutOfMemoryError,
      false,
      // Worded as CUDA's ("CUDA out of memory. Tried to allocate"): batch-size finders
      // (accelerate's, transformers' auto_find_batch_size) look for " out of memory.".
      "flagos out of memory. Tried to allocate ",
      format_bytes(static_cast<double>(nbytes)),
      ". flagos:",
      static_cast<int>(device),
      " (host memory on the cpu accelerator) has ",
      format_bytes(total),
      limit,
      ". Of its memory ",
      format_bytes(allocated),
      " is allocated by PyTorch and ",
      format_bytes(reserved - allocated),
      " reserved by PyTorch but unallocated; the cached blocks were already freed before "
      "giving up. Free tensors",
      fraction < 1.0 ? " or raise the fraction" : "",
      ".");
}

void CpuDeviceAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(
      fraction >= 0.0 && fraction <= 1.0,
      "set_per_process_memory_fraction: the fraction must be within [0, 1], got ",
      fraction);
  state(device).memory_fraction.store(fraction);
}

double CpuDeviceAllocator::memory_fraction(c10::DeviceIndex device) const {
  return state(device).memory_fraction.load();
}

void CpuDeviceAllocator::release(Block* block) {
  const c10::DeviceIndex device = block->device;
  auto& st = *devices_[device];
  std::optional<ProfilerReport> report;
  {
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    st.live.erase(block->ptr);
    for_pools(block->size, [&](size_t p) {
      decrease(st.stats.allocation[p], 1);
      decrease(st.stats.active[p], 1);
      decrease(st.stats.allocated_bytes[p], block->size);
      decrease(st.stats.active_bytes[p], block->size);
      decrease(st.stats.requested_bytes[p], block->requested);
    });
    report.emplace(block->ptr, -static_cast<int64_t>(block->size), st.stats);
    // Ahead of cached blocks of the same size: the next request of this size takes the block
    // freed last, whose memory is most likely still in the CPU caches (multimap's plain insert
    // would queue it behind the others and hand out the coldest one). Another thread may take
    // it as soon as the lock is released.
    st.free_blocks.emplace_hint(st.free_blocks.lower_bound(block->size), block->size, block);
  }
  report->send(device);
}

void CpuDeviceAllocator::free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  block->owner->release(block);
}

namespace {
// The CPU allocator reported a kernel's result to the profiler as CPU memory when the kernel
// made it, and reports the free when the memory goes, which for an adopted result is when the
// flagos tensor goes: the memory would count twice, as CPU and as flagos memory, for the
// tensor's whole life. Its CPU report is taken back when flagos adopts it and made again just
// before the CPU allocator frees it, so the profiler counts it as CPU memory only while the
// kernel ran. Only for the CPU allocator's own blocks (whose reports it keeps), only while a
// profiler records memory.
bool take_back_cpu_report(const c10::DataPtr& native) {
  if (!c10::memoryProfilingEnabled() ||
      native.get_deleter() != c10::GetDefaultCPUAllocator()->raw_deleter()) {
    return false;
  }
  c10::profiledCPUMemoryReporter().Delete(native.get());
  return true;
}
} // namespace

c10::DataPtr CpuDeviceAllocator::adopt(
    c10::DataPtr&& native, size_t nbytes, c10::DeviceIndex device) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  void* ptr = native.get();
  if (ptr == nullptr) {
    return c10::DataPtr(nullptr, where);
  }
  auto& st = state(device);
  auto adopted = std::make_unique<AdoptedBlock>();
  adopted->size = nbytes;
  adopted->device = device;
  adopted->owner = this;
  // A kernel's result counts against the per-process limit as the pool's own blocks do, checked
  // and accounted under one lock (threads adopting at once cannot all pass the check). Refused,
  // the device's cache is freed and the check made once more; refused again, `native` (not yet
  // taken) is freed by the caller as the error unwinds.
  std::optional<ProfilerReport> report;
  for (int attempt = 0; !report; ++attempt) {
    if (attempt == 1) {
      free_cache_for_retry(st);
    } else if (attempt == 2) {
      raise_out_of_memory(st, device, nbytes);
    }
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    if (!within_limit_locked(st, device, nbytes)) {
      continue;
    }
    adopted->native = std::move(native);
    st.stats.num_device_alloc += 1;
    account_adopted(st.stats, nbytes, [](Stat& s, size_t n) { increase(s, n); });
    adopted->next = st.adopted;
    if (st.adopted != nullptr) {
      st.adopted->prev = adopted.get();
    }
    st.adopted = adopted.get();
    report.emplace(ptr, static_cast<int64_t>(nbytes), st.stats);
  }
  report->send(device);
  adopted->cpu_report_taken_back = take_back_cpu_report(adopted->native);
  return c10::DataPtr(ptr, adopted.release(), &CpuDeviceAllocator::free_adopted, where);
}

void CpuDeviceAllocator::free_adopted(void* ctx) {
  auto* adopted = static_cast<AdoptedBlock*>(ctx);
  auto& st = *adopted->owner->devices_[adopted->device];
  std::optional<ProfilerReport> report;
  {
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    st.stats.num_device_free += 1;
    account_adopted(st.stats, adopted->size, [](Stat& s, size_t n) { decrease(s, n); });
    (adopted->prev != nullptr ? adopted->prev->next : st.adopted) = adopted->next;
    if (adopted->next != nullptr) {
      adopted->next->prev = adopted->prev;
    }
    report.emplace(adopted->native.get(), -static_cast<int64_t>(adopted->size), st.stats);
  }
  report->send(adopted->device);
  if (adopted->cpu_report_taken_back) {
    c10::profiledCPUMemoryReporter().New(adopted->native.get(), adopted->size);
  }
  delete adopted; // releases the native allocation
}

void CpuDeviceAllocator::raw_free(void* ptr) {
  auto& self = *static_cast<CpuDeviceAllocator*>(accelerator().device_allocator());
  for (auto& st : self.devices_) {
    Block* block = nullptr;
    {
      std::lock_guard<ForkSafeMutex> lock(st->mutex);
      auto it = st->live.find(ptr);
      if (it != st->live.end()) {
        block = it->second;
      }
    }
    if (block != nullptr) {
      self.release(block);
      return;
    }
  }
  TORCH_CHECK(false, "flagos raw_delete: ", ptr, " was not allocated by the flagos allocator");
}

c10::DeleterFnPtr CpuDeviceAllocator::raw_deleter() const {
  return &CpuDeviceAllocator::raw_free;
}

void CpuDeviceAllocator::copy_data(void* dst, const void* src, std::size_t count) const {
  if (count > 0) {
    std::memcpy(dst, src, count);
  }
}

bool CpuDeviceAllocator::initialized() {
  return true;
}

void CpuDeviceAllocator::emptyCache(c10::MempoolId_t) {
  for (auto& st : devices_) {
    empty_device_cache(*st);
  }
}

void CpuDeviceAllocator::empty_device_cache(DeviceState& st) {
  std::multimap<size_t, Block*> cached;
  {
    std::lock_guard<ForkSafeMutex> lock(st.mutex);
    cached.swap(st.free_blocks);
    for (auto& [size, block] : cached) {
      st.stats.num_device_free += 1;
      for_pools(size, [&](size_t p) {
        decrease(st.stats.segment[p], 1);
        decrease(st.stats.reserved_bytes[p], size);
      });
    }
  }
  for (auto& [size, block] : cached) {
    c10::free_cpu(block->ptr);
    delete block;
  }
}

void CpuDeviceAllocator::recordStream(const c10::DataPtr&, c10::Stream) {
  // Kernels complete before they return: a block is never in use by a pending stream.
}

c10::CachingDeviceAllocator::DeviceStats CpuDeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  auto& st = state(device);
  std::lock_guard<ForkSafeMutex> lock(st.mutex);
  return st.stats;
}

void CpuDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  auto& st = state(device);
  std::lock_guard<ForkSafeMutex> lock(st.mutex);
  for_each_stat(st.stats, [](Stat& stat) {
    stat.allocated = 0;
    stat.freed = 0;
  });
  auto& s = st.stats;
  s.num_alloc_retries = 0;
  s.num_ooms = 0;
  s.num_device_alloc = 0;
  s.num_device_free = 0;
}

void CpuDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  auto& st = state(device);
  std::lock_guard<ForkSafeMutex> lock(st.mutex);
  for_each_stat(st.stats, [](Stat& stat) { stat.peak = stat.current; });
}

std::pair<size_t, size_t> CpuDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page;
  const auto free = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  return {free, total};
}

c10::DeviceIndex CpuDeviceAllocator::device_of(const void* ptr) const {
  const auto within = [ptr](const void* start, size_t size) {
    const auto* begin = static_cast<const char*>(start);
    return ptr >= begin && ptr < begin + size;
  };
  for (size_t i = 0; i < devices_.size(); ++i) {
    std::lock_guard<ForkSafeMutex> lock(devices_[i]->mutex);
    for (const auto& [start, block] : devices_[i]->live) {
      if (within(start, block->size)) {
        return static_cast<c10::DeviceIndex>(i);
      }
    }
    for (const auto* a = devices_[i]->adopted; a != nullptr; a = a->next) {
      if (within(a->native.get(), a->size)) {
        return static_cast<c10::DeviceIndex>(i);
      }
    }
  }
  return -1;
}

std::vector<MemorySegment> CpuDeviceAllocator::segments() const {
  std::vector<MemorySegment> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const auto device = static_cast<c10::DeviceIndex>(i);
    const auto address = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    std::lock_guard<ForkSafeMutex> lock(devices_[i]->mutex);
    for (const auto& [start, block] : devices_[i]->live) {
      out.push_back({device, address(start), block->size, block->requested, true, false});
    }
    for (const auto& [size, block] : devices_[i]->free_blocks) {
      out.push_back({device, address(block->ptr), size, 0, false, false});
    }
    for (const auto* a = devices_[i]->adopted; a != nullptr; a = a->next) {
      out.push_back({device, address(a->native.get()), a->size, a->size, true, true});
    }
  }
  return out;
}

} // namespace torch_fl::cpu
