//! Device memory (plain and stream-ordered), memory pools, pinned and registered host memory,
//! pointer attributes.

use super::{as_pointer, handle, out, stream_of};
use crate::call::{run, Needs};
use crate::context::{self, Context};
use crate::devices;
use crate::host_memory;
use crate::memory;
use crate::result::*;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};

#[no_mangle]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> c_int {
    run("cuMemGetInfo_v2", Needs::Init, |_| {
        let (f, t) = devices::get(context::current()?.device)?.memory_info();
        out(free, f as usize)?;
        out(total, t as usize)
    })
}

#[no_mangle]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int {
    run("cuMemAlloc_v2", Needs::Init, |call| {
        call.fields.bytes = Some(bytes as u64);
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let owner = context::current()?;
        let address = memory::allocate(&owner, bytes)?;
        call.fields.add("ptr", format_args!("{address:#x}"));
        out(dptr, address)
    })
}

/// cuMemFree waits for the owning context's work first, as the real driver does, so work
/// still using the memory is not failed by the free.
#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> c_int {
    run("cuMemFree_v2", Needs::Init, |call| {
        call.fields.add("ptr", format_args!("{dptr:#x}"));
        let allocation = memory::find(dptr).filter(|a| a.address == dptr).ok_or(INVALID_VALUE)?;
        call.fields.bytes = Some(allocation.size as u64);
        if let Ok(owner) = Context::lookup(allocation.context) {
            owner.synchronize()?;
        }
        memory::free(dptr)
    })
}

#[no_mangle]
pub extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void) -> c_int {
    run("cuMemAllocAsync", Needs::Init, |call| {
        call.fields.bytes = Some(bytes as u64);
        call.fields.stream = Some(handle(stream));
        let (_, owner) = stream_of(stream)?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let address = memory::allocate(&owner, bytes)?;
        call.fields.add("ptr", format_args!("{address:#x}"));
        out(dptr, address)
    })
}

/// The memory is released when the stream reaches the free; work enqueued before it may
/// still use it.
#[no_mangle]
pub extern "C" fn cuMemFreeAsync(dptr: u64, stream: *mut c_void) -> c_int {
    run("cuMemFreeAsync", Needs::Init, |call| {
        call.fields.stream = Some(handle(stream));
        call.fields.add("ptr", format_args!("{dptr:#x}"));
        let (queue, owner) = stream_of(stream)?;
        let allocation = memory::find(dptr).filter(|a| a.address == dptr).ok_or(INVALID_VALUE)?;
        call.fields.bytes = Some(allocation.size as u64);
        queue.enqueue(&owner, Vec::new(), call.deferred_fault, Box::new(move || memory::free(dptr).map_err(|_| ILLEGAL_ADDRESS)));
        Ok(())
    })
}

/// One default pool per device: its handle and attribute values.
struct Pools {
    handles: Vec<u64>,
    attributes: Mutex<HashMap<(usize, c_int), u64>>,
}

static POOLS: Lazy<Pools> = Lazy::new(|| Pools { handles: (0..devices::count()).map(|_| crate::handles::next_handle()).collect(), attributes: Mutex::new(HashMap::new()) });

fn pool_index(pool: *mut c_void) -> Result<usize, CUresult> {
    POOLS.handles.iter().position(|h| *h == handle(pool)).ok_or(INVALID_HANDLE)
}

/// CUmemPool_attribute values 1..=3 are ints, 4..=8 are cuuint64_t.
fn pool_attribute_is_int(attribute: c_int) -> Result<bool, CUresult> {
    match attribute {
        1..=3 => Ok(true),
        4..=8 => Ok(false),
        _ => Err(INVALID_VALUE),
    }
}

#[no_mangle]
pub extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut *mut c_void, device: c_int) -> c_int {
    run("cuDeviceGetDefaultMemPool", Needs::Init, |call| {
        call.fields.device = Some(device);
        devices::get(device)?;
        out(pool, as_pointer(POOLS.handles[device as usize]))
    })
}

#[no_mangle]
pub extern "C" fn cuMemPoolSetAttribute(pool: *mut c_void, attribute: c_int, value: *mut c_void) -> c_int {
    run("cuMemPoolSetAttribute", Needs::Init, |call| {
        let index = pool_index(pool)?;
        call.fields.device = Some(index as c_int);
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null; the attribute's type (int or cuuint64_t) says how much to read.
        let v = unsafe { if pool_attribute_is_int(attribute)? { value.cast::<c_int>().read_unaligned() as u64 } else { value.cast::<u64>().read_unaligned() } };
        POOLS.attributes.lock().insert((index, attribute), v);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemPoolGetAttribute(pool: *mut c_void, attribute: c_int, value: *mut c_void) -> c_int {
    run("cuMemPoolGetAttribute", Needs::Init, |call| {
        let index = pool_index(pool)?;
        call.fields.device = Some(index as c_int);
        let (free, total) = devices::get(index as c_int)?.memory_info();
        let v = match attribute {
            5..=8 => total - free,
            _ => POOLS.attributes.lock().get(&(index, attribute)).copied().unwrap_or(0),
        };
        if pool_attribute_is_int(attribute)? {
            out(value.cast::<c_int>(), v as c_int)
        } else {
            out(value.cast::<u64>(), v)
        }
    })
}

#[no_mangle]
pub extern "C" fn cuMemPoolTrimTo(pool: *mut c_void, _keep: usize) -> c_int {
    run("cuMemPoolTrimTo", Needs::Init, |_| pool_index(pool).map(|_| ()))
}

fn host_allocate(pp: *mut *mut c_void, bytes: usize, call: &mut crate::call::Call) -> Result<(), CUresult> {
    call.fields.bytes = Some(bytes as u64);
    if pp.is_null() {
        return Err(INVALID_VALUE);
    }
    context::current()?;
    let pointer = host_memory::allocate(bytes)?;
    call.fields.add("ptr", format_args!("{pointer:p}"));
    out(pp, pointer.cast())
}

/// Pinned host memory (every CU_MEMHOSTALLOC_* flag accepted: portable, mapped and
/// write-combined memory are all plain host memory here).
#[no_mangle]
pub extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> c_int {
    run("cuMemHostAlloc", Needs::Init, |call| {
        call.fields.add("flags", flags);
        if flags & !0x7 != 0 {
            return Err(INVALID_VALUE);
        }
        host_allocate(pp, bytes, call)
    })
}

#[no_mangle]
pub extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> c_int {
    run("cuMemAllocHost_v2", Needs::Init, |call| host_allocate(pp, bytes, call))
}

/// Freeing pinned memory waits for all work first (a pending copy may still read it).
#[no_mangle]
pub extern "C" fn cuMemFreeHost(pointer: *mut c_void) -> c_int {
    run("cuMemFreeHost", Needs::Init, |call| {
        call.fields.add("ptr", format_args!("{pointer:p}"));
        if !host_memory::contains(pointer as usize, 1) {
            return Err(INVALID_VALUE);
        }
        context::synchronize_all();
        host_memory::free(pointer as usize)
    })
}

#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(pointer: *mut c_void, bytes: usize, flags: c_uint) -> c_int {
    run("cuMemHostRegister_v2", Needs::Init, |call| {
        call.fields.bytes = Some(bytes as u64);
        call.fields.add("flags", flags);
        context::current()?;
        host_memory::register(pointer as usize, bytes)
    })
}

#[no_mangle]
pub extern "C" fn cuMemHostUnregister(pointer: *mut c_void) -> c_int {
    run("cuMemHostUnregister", Needs::Init, |_| {
        context::synchronize_all();
        host_memory::unregister(pointer as usize)
    })
}

/// Unified addressing: pinned memory has the same address on the device.
#[no_mangle]
pub extern "C" fn cuMemHostGetDevicePointer_v2(dptr: *mut u64, pointer: *mut c_void, flags: c_uint) -> c_int {
    run("cuMemHostGetDevicePointer_v2", Needs::Init, |_| {
        if flags != 0 || !host_memory::contains(pointer as usize, 1) {
            return Err(INVALID_VALUE);
        }
        out(dptr, pointer as u64)
    })
}

const MEMORYTYPE_HOST: c_uint = 1;
const MEMORYTYPE_DEVICE: c_uint = 2;

#[no_mangle]
pub extern "C" fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, pointer: u64) -> c_int {
    run("cuPointerGetAttribute", Needs::Init, |call| {
        call.fields.add("attribute", attribute);
        if let Some(allocation) = memory::find(pointer) {
            return match attribute {
                1 => out(data.cast::<*mut c_void>(), as_pointer(allocation.context)),
                2 => out(data.cast::<c_uint>(), MEMORYTYPE_DEVICE),
                3 => out(data.cast::<u64>(), pointer),
                8 => out(data.cast::<c_int>(), 0),
                9 => out(data.cast::<c_int>(), allocation.device),
                _ => Err(INVALID_VALUE),
            };
        }
        if !host_memory::contains(pointer as usize, 1) {
            return Err(INVALID_VALUE);
        }
        match attribute {
            2 => out(data.cast::<c_uint>(), MEMORYTYPE_HOST),
            3 | 4 => out(data.cast::<u64>(), pointer),
            8 => out(data.cast::<c_int>(), 0),
            _ => Err(INVALID_VALUE),
        }
    })
}
