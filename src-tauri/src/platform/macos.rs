//! macOS: no Dock icon, popover hung under the menu-bar icon, hidden on blur.
//! Checked by hand on a Mac (there is no WebDriver for WKWebView).

use tauri::{App, PhysicalPosition, Runtime, WebviewWindow};

use super::{popover_origin, PhysRect, Platform, TrayAnchor};

#[derive(Debug)]
pub struct MacOs;

impl Platform for MacOs {
    const TRAY_ICON_PNG: &'static [u8] = include_bytes!("../../../assets/tray/tray-icon@2x.png");
    const LEFT_CLICK_TOGGLES: bool = true;
    const HIDES_ON_BLUR: bool = true;

    fn configure<R: Runtime>(app: &mut App<R>) {
        // A menu-bar utility: no Dock icon, no app menu taking over the bar.
        app.set_activation_policy(tauri::ActivationPolicy::Accessory);
    }

    fn place<R: Runtime>(window: &WebviewWindow<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
        let Some(anchor) = anchor else {
            return Ok(()); // opened from the menu: stay where it was last shown
        };
        let scale = window.scale_factor()?;
        let icon = anchor.physical(scale);
        let size = window.outer_size()?;
        let screen = window.monitor_from_point(icon.x, icon.y)?.or(window.current_monitor()?).map(|m| {
            let (p, s) = (m.position(), m.size());
            PhysRect { x: p.x.into(), y: p.y.into(), width: s.width.into(), height: s.height.into() }
        });
        let Some(screen) = screen else { return Ok(()) };
        let (x, y) = popover_origin(icon, (size.width.into(), size.height.into()), screen, 6.0 * scale);
        window.set_position(PhysicalPosition::new(x, y))
    }
}
