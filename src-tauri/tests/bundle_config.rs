//! The bundle configuration a Mac build (`cargo tauri build`) reads, checked
//! here where there is no Mac: tauri.conf.json against Tauri's own JSON
//! schema (the one @tauri-apps/cli ships, the version pinned in
//! ui/package.json, installed by `make setup`; nothing is downloaded), the
//! Info.plist that makes Headroom a menu-bar agent, and the icons.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

fn src_tauri() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("a config file");
    serde_json::from_str(&text).expect("JSON")
}

fn config() -> Value {
    read_json(&src_tauri().join("tauri.conf.json"))
}

/// Tauri's config schema from the pinned CLI package.
fn tauri_schema() -> Value {
    let path = src_tauri().join("../ui/node_modules/@tauri-apps/cli/config.schema.json");
    assert!(path.is_file(), "{} is missing: run `make setup` (it installs the UI's npm packages)", path.display());
    read_json(&path)
}

fn schema_errors(schema: &Value, config: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).expect("Tauri's schema compiles");
    validator.iter_errors(config).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

#[test]
fn tauri_conf_json_is_valid_by_tauris_schema() {
    let schema = tauri_schema();
    let config = config();
    assert_eq!(schema_errors(&schema, &config), Vec::<String>::new());

    // The check is not vacuous: what Tauri would refuse, it refuses.
    for (path, bad) in [
        ("/bundle/active", json!("yes")),
        ("/bundle/targets", json!(["app", "exe"])),
        ("/bundle/macOS/infoPlst", json!("Info.plist")),
        ("/app/windows/0/width", json!("wide")),
    ] {
        let mut broken = config.clone();
        let (parent, key) = path.rsplit_once('/').expect("a pointer");
        let slot = broken.pointer_mut(parent).expect("the parent exists");
        match slot {
            Value::Object(map) => {
                map.insert(key.to_owned(), bad.clone());
            }
            Value::Array(items) => items[key.parse::<usize>().expect("an index")] = bad.clone(),
            other => panic!("{parent} is {other}"),
        }
        assert!(!schema_errors(&schema, &broken).is_empty(), "{path} = {bad} passed the schema");
    }
}

#[test]
fn the_bundle_is_a_mac_app_that_starts_as_a_menu_bar_agent() {
    let config = config();
    let bundle = &config["bundle"];
    assert_eq!(bundle["active"], true, "cargo tauri build makes a bundle");
    assert!(bundle["targets"].as_array().is_some_and(|t| t.contains(&json!("app"))), "{bundle}");
    assert_eq!(config["identifier"], "app.headroom.menubar");

    // LSUIElement: no Dock icon and no app menu from the first moment, before
    // the runtime activation policy could hide them.
    let plist_name = bundle["macOS"]["infoPlist"].as_str().expect("bundle.macOS.infoPlist");
    let plist = std::fs::read_to_string(src_tauri().join(plist_name)).expect("the Info.plist");
    let compact: String = plist.split_whitespace().collect();
    assert!(compact.contains("<key>LSUIElement</key><true/>"), "{plist}");
    assert!(plist.starts_with("<?xml") && compact.contains("<plistversion=\"1.0\"><dict>"), "{plist}");
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

#[test]
fn every_bundle_icon_exists_at_the_size_its_name_says() {
    let config = config();
    let icons = config["bundle"]["icon"].as_array().expect("bundle.icon");
    let names: Vec<&str> = icons.iter().filter_map(Value::as_str).collect();
    assert!(names.iter().any(|n| n.ends_with(".icns")), "a macOS .icns: {names:?}");
    for name in names {
        let path = src_tauri().join(name);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display())).unwrap();
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        match file.rsplit_once('.') {
            Some((stem, "png")) => {
                let (w, h) = png_size(&bytes);
                assert_eq!(w, h, "{file} is square");
                if let Some(dims) = stem.split('@').next().and_then(|d| d.split_once('x')) {
                    let side: u32 = dims.0.parse().expect("a size");
                    let scale = if stem.ends_with("@2x") { 2 } else { 1 };
                    assert_eq!(w, side * scale, "{file} is {w}×{h}");
                }
            }
            Some((_, "icns")) => assert_eq!(&bytes[..4], b"icns", "{file}"),
            Some((_, "ico")) => assert_eq!(&bytes[..4], b"\0\0\x01\0", "{file}"),
            _ => panic!("unexpected icon {file}"),
        }
    }
}
