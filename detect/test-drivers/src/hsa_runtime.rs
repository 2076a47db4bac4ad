//! What an HSA runtime client beyond code loading needs (LLVM 22's
//! libomptarget AMDGPU plugin, which `dlopen`s `libhsa-runtime64.so` and
//! resolves 48 `hsa_*` symbols, failing without any one of them): memory
//! pools, allocations, signals, queues and copies, with hsa.h's and
//! hsa_ext_amd.h's signatures and enum values.
//!
//! Memory is real host memory: a pool allocation is `posix_memalign`ed and
//! zeroed, a copy is a `memcpy`, a fill writes the words. Signals are
//! atomic 64-bit values whose handle is their address. A queue has a real
//! `hsa_queue_t` and ring; ringing its doorbell retires every packet up to
//! the index written, as a packet processor that runs each kernel in no
//! time would: the packet's completion signal is decremented and its
//! header made INVALID. Nothing is executed.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::hsa::{agent, CPU_AGENT, INVALID_ARGUMENT, SUCCESS};
use crate::{log_call, write};

const ERROR: u32 = 0x1000;

/// Pools: `agent << 8 | index`. The CPU agent has a fine-grained kernarg
/// pool (ROCr reports global flags 3 for it); a GPU agent a coarse-grained
/// global pool and its group segment.
const POOLS_PER_AGENT: u64 = 2;

/// `hsa_amd_segment_t`.
const SEGMENT_GLOBAL: u32 = 0;
const SEGMENT_GROUP: u32 = 3;
/// `hsa_amd_memory_pool_global_flag_t`.
const KERNARG_INIT: u32 = 1;
const FINE_GRAINED: u32 = 2;
const COARSE_GRAINED: u32 = 4;

/// What pool `pool` is: (segment, global flags, size).
fn pool_kind(pool: u64) -> Option<(u32, u32, u64)> {
    let (owner, index) = (pool >> 8, pool & 0xff);
    let cpu = owner == CPU_AGENT;
    if !cpu && agent(owner).is_none() {
        return None;
    }
    Some(match (cpu, index) {
        (true, 0) => (SEGMENT_GLOBAL, FINE_GRAINED | KERNARG_INIT, 64 << 30),
        (true, 1) => (SEGMENT_GLOBAL, FINE_GRAINED, 64 << 30),
        (false, 0) => (SEGMENT_GLOBAL, COARSE_GRAINED, 64 << 30),
        (false, 1) => (SEGMENT_GROUP, 0, 64 << 10),
        _ => return None,
    })
}

type PoolCallback = unsafe extern "C" fn(u64, *mut c_void) -> u32;

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_agent_iterate_memory_pools(
    owner: u64,
    cb: PoolCallback,
    data: *mut c_void,
) -> u32 {
    if owner != CPU_AGENT && agent(owner).is_none() {
        return INVALID_ARGUMENT;
    }
    for index in 0..POOLS_PER_AGENT {
        // SAFETY: the caller's callback, with its own data pointer.
        match unsafe { cb(owner << 8 | index, data) } {
            SUCCESS => {}
            // HSA_STATUS_INFO_BREAK ends the walk successfully.
            1 => return SUCCESS,
            s => return s,
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_get_info(
    pool: u64,
    attribute: u32,
    value: *mut c_void,
) -> u32 {
    let Some((segment, flags, size)) = pool_kind(pool) else {
        return INVALID_ARGUMENT;
    };
    let global = segment == SEGMENT_GLOBAL;
    // SAFETY (all arms): storage of the attribute's type (hsa_ext_amd.h).
    unsafe {
        match attribute {
            0 => write(value, segment),
            1 => write(value, flags),
            2 => write(value, size as usize),
            // RUNTIME_ALLOC_ALLOWED, a bool.
            5 => write(value, global),
            // RUNTIME_ALLOC_GRANULE, _ALIGNMENT.
            6 | 7 => write(value, 4096usize),
            // ACCESSIBLE_BY_ALL, a bool.
            15 => write(value, flags & FINE_GRAINED != 0),
            // ALLOC_MAX_SIZE.
            16 => write(value, size as usize),
            _ => return INVALID_ARGUMENT,
        }
    }
    SUCCESS
}

/// `HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS`: every agent may reach every
/// global pool (1, allowed by default).
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_agent_memory_pool_get_info(
    _agent: u64,
    pool: u64,
    attribute: u32,
    value: *mut c_void,
) -> u32 {
    if pool_kind(pool).is_none() || attribute != 0 {
        return INVALID_ARGUMENT;
    }
    // SAFETY: ACCESS is a 4-byte enum.
    unsafe { write(value, 1u32) };
    SUCCESS
}

/// Live pool allocations: address → size.
static ALLOCATIONS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Whether `addr..addr + len` lies in memory this double handed out (a
/// pool allocation or a loaded executable's image), which a copy may write.
pub(crate) fn is_real(addr: usize, len: usize) -> bool {
    let inside = |&(start, size): &(usize, usize)| addr >= start && addr + len <= start + size;
    ALLOCATIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(inside)
        || crate::hsa::loaded_ranges().iter().any(inside)
}

/// A copy is recorded in `FAKE_CALL_LOG` as `hsa_memory_copy <dst> <size>`
/// and, for 8 bytes, the value copied; it is made where `dst` is memory
/// this double handed out (a loaded image's variable, a pool allocation).
#[no_mangle]
pub unsafe extern "C" fn hsa_memory_copy(dst: *mut c_void, src: *const c_void, size: usize) -> u32 {
    if dst.is_null() || src.is_null() {
        return INVALID_ARGUMENT;
    }
    let value = if size == 8 {
        // SAFETY: 8 readable bytes at `src` (hsa.h: `size` bytes).
        format!(" {:#x}", unsafe { src.cast::<u64>().read_unaligned() })
    } else {
        String::new()
    };
    log_call(format!("hsa_memory_copy {dst:p} {size}{value}"));
    if is_real(dst as usize, size) {
        // SAFETY: `size` bytes of memory this double handed out at `dst`,
        // `size` readable bytes at `src`.
        unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size) };
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_allocate(
    pool: u64,
    size: usize,
    _flags: u32,
    ptr: *mut *mut c_void,
) -> u32 {
    if pool_kind(pool).is_none() || ptr.is_null() || size == 0 {
        return INVALID_ARGUMENT;
    }
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: an out-pointer, a power-of-two alignment.
    if unsafe { libc::posix_memalign(&mut out, 4096, size) } != 0 {
        // HSA_STATUS_ERROR_OUT_OF_RESOURCES.
        return 0x1008;
    }
    // SAFETY: `size` bytes just allocated.
    unsafe { std::ptr::write_bytes(out.cast::<u8>(), 0, size) };
    ALLOCATIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((out as usize, size));
    // SAFETY: an out-pointer.
    unsafe { *ptr = out };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> u32 {
    let mut allocations = ALLOCATIONS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = allocations.iter().position(|&(a, _)| a == ptr as usize) else {
        return INVALID_ARGUMENT;
    };
    allocations.swap_remove(at);
    // SAFETY: memory `hsa_amd_memory_pool_allocate` allocated, freed once.
    unsafe { libc::free(ptr) };
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_amd_agents_allow_access(
    _count: u32,
    _agents: *const u64,
    _flags: *const u32,
    _ptr: *const c_void,
) -> u32 {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_amd_memory_unlock(_host: *mut c_void) -> u32 {
    SUCCESS
}

/// Writes `count` 32-bit words of `value` at `ptr`.
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_fill(ptr: *mut c_void, value: u32, count: usize) -> u32 {
    if ptr.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller's `count` words of memory (hsa_ext_amd.h).
    unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u32>(), count) }.fill(value);
    SUCCESS
}

/// Copies at once, then decrements `completion` (dependencies are already
/// complete: every operation here is).
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_async_copy(
    dst: *mut c_void,
    _dst_agent: u64,
    src: *const c_void,
    _src_agent: u64,
    size: usize,
    _deps: u32,
    _dep_signals: *const u64,
    completion: u64,
) -> u32 {
    if dst.is_null() || src.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: `size` bytes at each, as the caller promises the runtime
    // (hsa_ext_amd.h); `std::ptr::copy` allows overlap.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size) };
    if let Some(signal) = signal(completion) {
        signal.value.fetch_sub(1, Ordering::SeqCst);
    }
    SUCCESS
}

/// Every pointer is of unknown type (`HSA_EXT_POINTER_TYPE_UNKNOWN`):
/// writes the type and leaves the caller's `size` field; no agents.
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_pointer_info(
    _ptr: *const c_void,
    info: *mut c_void,
    _alloc: *const c_void,
    count: *mut u32,
    agents: *mut *mut u64,
) -> u32 {
    if info.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: `info` points to an `hsa_amd_pointer_info_t` whose first
    // field (uint32_t size) says how much of it the caller has; the type
    // follows it.
    unsafe {
        let size = info.cast::<u32>().read_unaligned() as usize;
        if size >= 8 {
            info.cast::<u8>().add(4).cast::<u32>().write_unaligned(0);
        }
        write(count.cast(), 0u32);
        write(agents.cast(), std::ptr::null_mut::<u64>());
    }
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_amd_register_system_event_handler(
    _callback: *const c_void,
    _data: *mut c_void,
) -> u32 {
    SUCCESS
}

/// `hsa_system_get_info`: version 1.1 and a 100 MHz timestamp.
#[no_mangle]
pub unsafe extern "C" fn hsa_system_get_info(attribute: u32, value: *mut c_void) -> u32 {
    // SAFETY (all arms): storage of the attribute's type (hsa.h).
    unsafe {
        match attribute {
            0 | 1 => write(value, 1u16),
            3 => write(value, 100_000_000u64),
            _ => return INVALID_ARGUMENT,
        }
    }
    SUCCESS
}

// ---------------------------------------------------------------------------
// Signals and queues

/// A signal; its handle is its address.
struct Signal {
    value: AtomicI64,
    /// For a queue's doorbell, the queue.
    queue: AtomicUsize,
}

fn new_signal(initial: i64) -> u64 {
    Box::into_raw(Box::new(Signal {
        value: AtomicI64::new(initial),
        queue: AtomicUsize::new(0),
    })) as u64
}

/// The signal behind `handle` (0: none). A handle this double did not
/// issue is the caller's error, as it is with ROCr.
fn signal(handle: u64) -> Option<&'static Signal> {
    // SAFETY: handles are addresses of `Signal`s this double leaked in
    // `new_signal` and frees only in `hsa_signal_destroy`.
    (handle != 0).then(|| unsafe { &*(handle as *const Signal) })
}

#[no_mangle]
pub unsafe extern "C" fn hsa_signal_create(
    initial: i64,
    _consumers: u32,
    _agents: *const u64,
    out: *mut u64,
) -> u32 {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: an out-pointer.
    unsafe { *out = new_signal(initial) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_signal_create(
    initial: i64,
    consumers: u32,
    agents: *const u64,
    _attributes: u64,
    out: *mut u64,
) -> u32 {
    // SAFETY: as the caller's.
    unsafe { hsa_signal_create(initial, consumers, agents, out) }
}

#[no_mangle]
pub extern "C" fn hsa_signal_destroy(handle: u64) -> u32 {
    if handle == 0 {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a handle `new_signal` issued, destroyed once (hsa.h).
    drop(unsafe { Box::from_raw(handle as *mut Signal) });
    SUCCESS
}

#[no_mangle]
pub extern "C" fn hsa_signal_load_scacquire(handle: u64) -> i64 {
    signal(handle).map_or(0, |s| s.value.load(Ordering::SeqCst))
}

fn store(handle: u64, value: i64) {
    let Some(s) = signal(handle) else { return };
    s.value.store(value, Ordering::SeqCst);
    let queue = s.queue.load(Ordering::SeqCst);
    if queue != 0 {
        // SAFETY: a doorbell's queue lives until `hsa_queue_destroy`,
        // which is after its last doorbell.
        retire(unsafe { &*(queue as *const Queue) }, value as u64);
    }
}

#[no_mangle]
pub extern "C" fn hsa_signal_store_relaxed(handle: u64, value: i64) {
    store(handle, value);
}

#[no_mangle]
pub extern "C" fn hsa_signal_store_screlease(handle: u64, value: i64) {
    store(handle, value);
}

#[no_mangle]
pub extern "C" fn hsa_signal_subtract_screlease(handle: u64, value: i64) {
    if let Some(s) = signal(handle) {
        s.value.fetch_sub(value, Ordering::SeqCst);
    }
}

/// Whether `value` meets `condition` (`hsa_signal_condition_t`) against
/// `compare`.
fn meets(value: i64, condition: u32, compare: i64) -> bool {
    match condition {
        0 => value == compare,
        1 => value != compare,
        2 => value < compare,
        _ => value >= compare,
    }
}

/// Every operation here completes when it is made: the value is returned
/// at once (a wait may return before its condition holds, hsa.h).
#[no_mangle]
pub extern "C" fn hsa_signal_wait_scacquire(
    handle: u64,
    _condition: u32,
    _compare: i64,
    _timeout: u64,
    _wait_state: u32,
) -> i64 {
    hsa_signal_load_scacquire(handle)
}

type AsyncHandler = unsafe extern "C" fn(i64, *mut c_void) -> bool;

/// Calls `handler` once the condition holds: at once if it does now, else
/// from a thread that watches the signal.
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_signal_async_handler(
    handle: u64,
    condition: u32,
    compare: i64,
    handler: AsyncHandler,
    arg: *mut c_void,
) -> u32 {
    let Some(s) = signal(handle) else {
        return INVALID_ARGUMENT;
    };
    let value = s.value.load(Ordering::SeqCst);
    if meets(value, condition, compare) {
        // SAFETY: the caller's handler with its argument.
        unsafe { handler(value, arg) };
        return SUCCESS;
    }
    let arg = arg as usize;
    std::thread::spawn(move || loop {
        let value = s.value.load(Ordering::SeqCst);
        if meets(value, condition, compare) {
            // SAFETY: as above; the caller keeps `arg` until it is called.
            unsafe { handler(value, arg as *mut c_void) };
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    });
    SUCCESS
}

/// A queue: `hsa_queue_t` first (type, features, base_address,
/// doorbell_signal, size, reserved, id: 40 bytes), then the indices.
#[repr(C)]
struct Queue {
    kind: u32,
    features: u32,
    base_address: *mut u8,
    doorbell_signal: u64,
    size: u32,
    reserved: u32,
    id: u64,
    read: AtomicU64,
    write: AtomicU64,
}

/// A packet's header says INVALID (`HSA_PACKET_TYPE_INVALID`, bits 0-7).
const PACKET_INVALID: u16 = 1;

/// Retires the packets up to `last`: each one's completion signal (at
/// byte 56 of a dispatch and of a barrier packet) is decremented and its
/// header made INVALID; the read index moves past it.
fn retire(queue: &Queue, last: u64) {
    while queue.read.load(Ordering::SeqCst) <= last {
        let id = queue.read.load(Ordering::SeqCst);
        let at = (id & u64::from(queue.size - 1)) as usize * 64;
        // SAFETY: the ring holds `size` 64-byte packets (`hsa_queue_create`).
        unsafe {
            let packet = queue.base_address.add(at);
            let completion = packet.add(56).cast::<u64>().read_unaligned();
            let header = packet.cast::<u16>().read_unaligned();
            packet
                .cast::<u16>()
                .write_unaligned((header & !0xff) | PACKET_INVALID);
            if let Some(signal) = signal(completion) {
                signal.value.fetch_sub(1, Ordering::SeqCst);
            }
        }
        queue.read.store(id + 1, Ordering::SeqCst);
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_create(
    owner: u64,
    size: u32,
    kind: u32,
    _callback: *const c_void,
    _data: *mut c_void,
    _private_segment: u32,
    _group_segment: u32,
    out: *mut *mut c_void,
) -> u32 {
    if agent(owner).is_none() || out.is_null() || !size.is_power_of_two() {
        return INVALID_ARGUMENT;
    }
    static IDS: AtomicU64 = AtomicU64::new(0);
    let ring = vec![0u64; size as usize * 8].into_boxed_slice();
    let ring = Box::leak(ring).as_mut_ptr().cast::<u8>();
    // Every header starts INVALID, as ROCr's ring does.
    for i in 0..size as usize {
        // SAFETY: packet `i` of the ring just allocated.
        unsafe { ring.add(i * 64).cast::<u16>().write(PACKET_INVALID) };
    }
    let doorbell = new_signal(0);
    let queue = Box::into_raw(Box::new(Queue {
        kind,
        // HSA_QUEUE_FEATURE_KERNEL_DISPATCH.
        features: 1,
        base_address: ring,
        doorbell_signal: doorbell,
        size,
        reserved: 0,
        id: IDS.fetch_add(1, Ordering::SeqCst),
        read: AtomicU64::new(0),
        write: AtomicU64::new(0),
    }));
    if let Some(s) = signal(doorbell) {
        s.queue.store(queue as usize, Ordering::SeqCst);
    }
    // SAFETY: an out-pointer.
    unsafe { *out = queue.cast() };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_destroy(queue: *mut c_void) -> u32 {
    if queue.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a queue `hsa_queue_create` made, destroyed once.
    let queue = unsafe { Box::from_raw(queue.cast::<Queue>()) };
    hsa_signal_destroy(queue.doorbell_signal);
    let words = queue.size as usize * 8;
    // SAFETY: the ring `hsa_queue_create` leaked, of `words` words.
    drop(unsafe {
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            queue.base_address.cast::<u64>(),
            words,
        ))
    });
    SUCCESS
}

fn queue<'a>(queue: *const c_void) -> Option<&'a Queue> {
    // SAFETY: a queue `hsa_queue_create` made and not yet destroyed.
    (!queue.is_null()).then(|| unsafe { &*queue.cast::<Queue>() })
}

#[no_mangle]
pub extern "C" fn hsa_queue_add_write_index_relaxed(q: *const c_void, value: u64) -> u64 {
    queue(q).map_or(0, |q| q.write.fetch_add(value, Ordering::SeqCst))
}

#[no_mangle]
pub extern "C" fn hsa_queue_load_read_index_scacquire(q: *const c_void) -> u64 {
    queue(q).map_or(0, |q| q.read.load(Ordering::SeqCst))
}

// ---------------------------------------------------------------------------
// The older code-object API: present, as the plugin resolves it, not used.

#[no_mangle]
pub extern "C" fn hsa_code_object_deserialize(
    _data: *const c_void,
    _size: usize,
    _options: *const c_void,
    _out: *mut u64,
) -> u32 {
    ERROR
}

#[no_mangle]
pub extern "C" fn hsa_executable_load_code_object(
    _exe: u64,
    _agent: u64,
    _code_object: u64,
    _options: *const c_void,
) -> u32 {
    ERROR
}

#[no_mangle]
pub extern "C" fn hsa_code_object_destroy(_code_object: u64) -> u32 {
    SUCCESS
}

/// Lists no symbols.
#[no_mangle]
pub extern "C" fn hsa_executable_iterate_symbols(
    _exe: u64,
    _callback: *const c_void,
    _data: *mut c_void,
) -> u32 {
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_validate(_exe: u64, result: *mut u32) -> u32 {
    // SAFETY: an out-pointer.
    unsafe { write(result.cast(), 0u32) };
    SUCCESS
}
