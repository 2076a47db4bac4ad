//! Links `liboffload_loader.so` with `-z nodelete`: once loaded it stays
//! mapped, because code of its own outlives any one user of it (the last
//! error's `pthread` key destructor runs at every thread's exit, a detection
//! thread may still be inside a hung driver), and a `dlclose` of the last
//! library that linked it must not unmap that code.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
