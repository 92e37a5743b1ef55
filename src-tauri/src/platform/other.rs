//! Linux and other desktops: the window manager places the popover; the
//! tray menu opens it (appindicator trays send no click events).

use tauri::{App, Runtime, WebviewWindow};

use super::{Platform, TrayAnchor};

#[derive(Debug)]
pub struct Desktop;

impl Platform for Desktop {
    const TRAY_ICON_PNG: &'static [u8] = include_bytes!("../../../assets/icons/32x32.png");
    const LEFT_CLICK_TOGGLES: bool = false;
    // Opening the tray menu takes focus from the popover on Linux; hiding on
    // blur would close it the moment the user looks at the menu.
    const HIDES_ON_BLUR: bool = false;

    fn configure<R: Runtime>(_app: &mut App<R>) {}

    fn place<R: Runtime>(window: &WebviewWindow<R>, _anchor: Option<TrayAnchor>) -> tauri::Result<()> {
        window.center()
    }
}
