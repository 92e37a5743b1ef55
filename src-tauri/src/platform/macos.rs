//! macOS: no Dock icon, popover hung under the menu-bar icon, hidden on blur.
//! Checked by hand on a Mac (there is no WebDriver for WKWebView); the
//! placement arithmetic is in `mod.rs` and unit-tested on every platform.

use tauri::{App, LogicalPosition, Runtime, WebviewWindow};

use super::{popover_position, Platform, Screen, TrayAnchor};

#[derive(Debug)]
pub struct MacOs;

impl Platform for MacOs {
    const TRAY_ICON_PNG: &'static [u8] = include_bytes!("../../../assets/tray/tray-icon@2x.png");
    const LEFT_CLICK_TOGGLES: bool = true;
    const HIDES_ON_BLUR: bool = true;

    fn configure<R: Runtime>(app: &mut App<R>) {
        // A menu-bar utility: no Dock icon, no app menu taking over the bar.
        // (The bundle's Info.plist says so too, LSUIElement, so not even the
        // launch shows one; this covers `cargo run`, which has no bundle.)
        app.set_activation_policy(tauri::ActivationPolicy::Accessory);
    }

    fn place<R: Runtime>(window: &WebviewWindow<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
        let Some(anchor) = anchor else {
            return Ok(()); // opened from the menu or the hotkey: stay where it was last shown
        };
        // tao reports the pointer in pixels at the main display's scale
        // factor, whichever screen it is on: divided by that, it is in points.
        let main_scale = window.primary_monitor()?.map_or(1.0, |m| m.scale_factor());
        let pointer = window.cursor_position()?;
        let pointer = (pointer.x / main_scale, pointer.y / main_scale);
        let screens: Vec<Screen> = window.available_monitors()?.iter().map(Screen::from_monitor).collect();
        // The popover's size in points does not depend on the screen it is on.
        let size = window.inner_size()?.to_logical::<f64>(window.scale_factor()?);
        match popover_position(anchor.pixels(), pointer, (size.width, size.height), &screens) {
            Some((x, y)) => window.set_position(LogicalPosition::new(x, y)),
            None => Ok(()),
        }
    }
}
