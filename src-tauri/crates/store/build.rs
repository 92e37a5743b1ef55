//! Rebuilds the crate when a migration is added or changed: `migrate!`
//! embeds the `migrations/` folder at compile time.

fn main() {
    println!("cargo:rerun-if-changed=../../../migrations");
}
