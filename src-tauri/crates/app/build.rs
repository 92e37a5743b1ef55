//! The rpath to libmlx.so for this crate's test executables (see the engine's build.rs).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_HEADROOM_MLX_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_HEADROOM_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
