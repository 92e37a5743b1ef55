//! Points executables at the prebuilt libmlx.so (Linux, mlx-cpu wheel).
//!
//! The patched mlx-sys links `dylib=mlx` and publishes its folder; rpath
//! flags do not propagate to dependents, so this crate sets it for its own
//! tests and passes the folder on (`links = "headroom_mlx"`) to the crates
//! that build executables. On macOS MLX is linked statically: nothing to do.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo::metadata=libdir={dir}");
    }
}
