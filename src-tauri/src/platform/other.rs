//! Linux and other desktops: the popover opens centred on the screen; the
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
        // Centred on the screen. Not `window.center()`: a never-shown GTK
        // window reports an outer size of 0, which puts its corner, not its
        // middle, at the centre. The inner size is known before mapping.
        let Some(monitor) = window.current_monitor()?.or(window.primary_monitor()?) else {
            return Ok(());
        };
        let (screen, origin, size) = (monitor.size(), monitor.position(), window.inner_size()?);
        let x = origin.x + (screen.width.saturating_sub(size.width) / 2) as i32;
        let y = origin.y + (screen.height.saturating_sub(size.height) / 2) as i32;
        window.set_position(tauri::PhysicalPosition::new(x, y))
    }
}
