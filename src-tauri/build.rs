//! Tauri's build step, plus the rpath to libmlx.so (see the engine's build.rs).
fn main() {
    if let Ok(dir) = std::env::var("DEP_HEADROOM_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    tauri_build::build();
}
