//! Links `liboffload_loader.so`:
//!
//! - with the SONAME `liboffload_loader.so.<major>`, so that programs record
//!   the ABI they were linked against, not the unversioned development name
//!   (`ffi/install.sh` installs the `.so.<major>` and `.so` links);
//! - with `-z nodelete`: once loaded it stays mapped, because code of its own
//!   outlives any one user of it (the last error's `pthread` key destructor
//!   runs at every thread's exit, a detection thread may still be inside a
//!   hung driver), and a `dlclose` of the last library that linked it must
//!   not unmap that code.
//!
//! rustc's own version script already exports only the `#[no_mangle]` C API
//! from a `cdylib` (tests/c_library.rs checks `nm -D` against the header).
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets it");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liboffload_loader.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
