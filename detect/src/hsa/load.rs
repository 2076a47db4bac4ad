//! Putting a code object on an HSA agent and finding its symbols
//! (ROCR-Runtime hsa.h).
//!
//! A code-object reader over a copy of the image
//! (`hsa_code_object_reader_create_from_memory`), an executable
//! (`hsa_executable_create_alt`, full profile, default rounding, no options),
//! the code object loaded for the agent
//! (`hsa_executable_load_agent_code_object`), then frozen. A kernel is the
//! symbol `<name>.kd` and its handle is `KERNEL_OBJECT` (22); a variable is
//! its own name, `VARIABLE_ADDRESS` (21) and `VARIABLE_SIZE` (9). Unloading
//! destroys the executable, then the reader; the copy of the image lives until
//! then (the runtime's code-object URI points into it). Executables may be
//! used from any thread.

use super::sys::{self, Agent, CodeObjectReader, Executable, ExecutableSymbol, STATUS_SUCCESS};
use super::Api;
use crate::image::{c_name, DriverError, Global, KernelHandle};

/// The runtime and agent a GPU was found through: what loads images on it.
#[derive(Clone, Copy)]
pub(crate) struct Driver {
    pub(super) api: &'static Api,
    pub(super) agent: Agent,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}, agent {:#x}", self.api, self.agent.handle)
    }
}

impl PartialEq for Driver {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.api, other.api) && self.agent == other.agent
    }
}

impl Eq for Driver {}

/// A frozen executable holding one code object, with what it was made from.
pub(crate) struct Loaded {
    api: &'static Api,
    agent: Agent,
    /// Handle 0 when `hsa_executable_create_alt` failed.
    executable: Executable,
    reader: CodeObjectReader,
    // The reader (and the runtime's code-object URI) refer to this copy
    // until the executable and the reader are destroyed.
    _image: Box<[u8]>,
}

fn check(api: &Api, call: &'static str, status: sys::Status) -> Result<(), DriverError> {
    if status == STATUS_SUCCESS {
        Ok(())
    } else {
        Err(DriverError::Call {
            call,
            status: api.status(status),
        })
    }
}

impl Driver {
    /// Loads the code object `image` for this agent. On failure, whatever was
    /// created is destroyed again.
    pub(crate) fn load(self, image: &[u8]) -> Result<Loaded, DriverError> {
        let Driver { api, agent } = self;
        let image: Box<[u8]> = image.into();
        let mut reader = CodeObjectReader { handle: 0 };
        // SAFETY: `image` is a live allocation of `image.len()` bytes that the
        // returned `Loaded` keeps until the reader is destroyed.
        check(api, "hsa_code_object_reader_create_from_memory", unsafe {
            (api.reader_create_from_memory)(image.as_ptr().cast(), image.len(), &mut reader)
        })?;
        let mut executable = Executable { handle: 0 };
        // SAFETY: valid enum values, no options, an out-pointer.
        let created = check(api, "hsa_executable_create_alt", unsafe {
            (api.executable_create_alt)(
                sys::PROFILE_FULL,
                sys::ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut executable,
            )
        });
        let loaded = Loaded {
            api,
            agent,
            executable: if created.is_ok() {
                executable
            } else {
                Executable { handle: 0 }
            },
            reader,
            _image: image,
        };
        match created.and_then(|()| loaded.load_and_freeze()) {
            Ok(()) => Ok(loaded),
            Err(e) => {
                if let Err(undo) = loaded.unload() {
                    tracing::debug!(error = %undo, "destroying a failed HSA load failed");
                }
                Err(e)
            }
        }
    }
}

impl Loaded {
    fn load_and_freeze(&self) -> Result<(), DriverError> {
        let api = self.api;
        let mut code_object = sys::LoadedCodeObject { handle: 0 };
        // SAFETY: handles created by `Driver::load`, an agent the runtime
        // gave, no options.
        check(api, "hsa_executable_load_agent_code_object", unsafe {
            (api.executable_load_agent_code_object)(
                self.executable,
                self.agent,
                self.reader,
                std::ptr::null(),
                &mut code_object,
            )
        })?;
        // SAFETY: a valid executable; empty options.
        check(api, "hsa_executable_freeze", unsafe {
            (api.executable_freeze)(self.executable, c"".as_ptr())
        })
    }

    /// An executable's `hsa_executable_get_symbol_by_name` for this agent.
    fn symbol(&self, name: &str) -> Result<ExecutableSymbol, DriverError> {
        let cname = c_name(name)?;
        let mut symbol = ExecutableSymbol { handle: 0 };
        // SAFETY: a frozen executable, a NUL-terminated name, the agent by
        // pointer (as hsa.h declares), an out-pointer.
        check(self.api, "hsa_executable_get_symbol_by_name", unsafe {
            (self.api.executable_get_symbol_by_name)(
                self.executable,
                cname.as_ptr(),
                &self.agent,
                &mut symbol,
            )
        })?;
        Ok(symbol)
    }

    /// The kernel object of symbol `<name>.kd`.
    pub(crate) fn kernel(&self, name: &str) -> Result<KernelHandle, DriverError> {
        let symbol = self.symbol(&format!("{name}.kd"))?;
        let mut object = 0u64;
        // SAFETY: KERNEL_OBJECT is a `uint64_t`.
        check(self.api, "hsa_executable_symbol_get_info", unsafe {
            (self.api.executable_symbol_get_info)(
                symbol,
                sys::SYMBOL_INFO_KERNEL_OBJECT,
                (&mut object as *mut u64).cast(),
            )
        })?;
        Ok(KernelHandle { handle: object })
    }

    /// The address and size of variable `name`.
    pub(crate) fn global(&self, name: &str) -> Result<Global, DriverError> {
        let symbol = self.symbol(name)?;
        let (mut address, mut size) = (0u64, 0u32);
        // SAFETY: VARIABLE_ADDRESS is a `uint64_t`.
        check(self.api, "hsa_executable_symbol_get_info", unsafe {
            (self.api.executable_symbol_get_info)(
                symbol,
                sys::SYMBOL_INFO_VARIABLE_ADDRESS,
                (&mut address as *mut u64).cast(),
            )
        })?;
        // SAFETY: VARIABLE_SIZE is a `uint32_t`.
        check(self.api, "hsa_executable_symbol_get_info", unsafe {
            (self.api.executable_symbol_get_info)(
                symbol,
                sys::SYMBOL_INFO_VARIABLE_SIZE,
                (&mut size as *mut u32).cast(),
            )
        })?;
        Ok(Global {
            address,
            size: size.into(),
        })
    }

    /// Points the 8-byte device variable `name` at the `size` host bytes at
    /// `host`, pinned for this agent (`hsa_amd_memory_lock`), as clr does for
    /// a HIP managed variable with memory it allocated: the device reads and
    /// writes the host's copy. Returns the address at which the agent
    /// reaches it.
    pub(crate) fn point_at_host(
        &self,
        name: &str,
        host: usize,
        size: usize,
    ) -> Result<u64, DriverError> {
        let global = self.global(name)?;
        let mut agent = self.agent;
        let mut reached: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `host..host + size` is memory of the process the caller
        // keeps alive while the executable lives; one agent, by pointer; an
        // out-pointer.
        check(self.api, "hsa_amd_memory_lock", unsafe {
            (self.api.amd_memory_lock)(host as *mut _, size, &mut agent, 1, &mut reached)
        })?;
        let value = reached as u64;
        // SAFETY: the variable's device address the runtime gave, 8 bytes
        // from a local.
        check(self.api, "hsa_memory_copy", unsafe {
            (self.api.memory_copy)(
                global.address as *mut _,
                (&value as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        })?;
        Ok(value)
    }

    /// Destroys the executable, then the reader. The caller calls it once.
    pub(crate) fn unload(&self) -> Result<(), DriverError> {
        let mut result = Ok(());
        if self.executable.handle != 0 {
            // SAFETY: the executable `Driver::load` created, destroyed once.
            result = check(self.api, "hsa_executable_destroy", unsafe {
                (self.api.executable_destroy)(self.executable)
            });
        }
        // SAFETY: the reader `Driver::load` created, destroyed once, after the
        // executable loaded from it.
        let destroyed = check(self.api, "hsa_code_object_reader_destroy", unsafe {
            (self.api.reader_destroy)(self.reader)
        });
        result.and(destroyed)
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HSA executable {:#x}", self.executable.handle)
    }
}
