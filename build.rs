//! Lets the integration-test binary find libmlx.so at run time (see the engine's build.rs).
fn main() {
    if let Ok(dir) = std::env::var("DEP_HEADROOM_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
