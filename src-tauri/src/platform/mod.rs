//! What differs between macOS and the rest: one trait, two small
//! implementations (`macos.rs`, `other.rs`), and the placement arithmetic
//! they share, kept pure here so it is tested on Linux too.

// The placement code below runs only on macOS but is tested everywhere.
#![cfg_attr(not(target_os = "macos"), allow(dead_code))]

use tauri::{App, Runtime, WebviewWindow};

#[cfg(target_os = "macos")]
mod macos;
#[cfg(not(target_os = "macos"))]
mod other;

#[cfg(target_os = "macos")]
type Current = macos::MacOs;
#[cfg(not(target_os = "macos"))]
type Current = other::Desktop;

/// The platform-specific half of the menu-bar shell.
pub trait Platform {
    /// Menu-bar icon: a monochrome template on macOS, a coloured icon on
    /// Linux panels (which may be dark and do not tint templates).
    const TRAY_ICON_PNG: &'static [u8];
    /// A left click on the icon toggles the popover (else it opens the menu).
    const LEFT_CLICK_TOGGLES: bool;
    /// The popover hides when it loses focus, like a system menu-bar extra.
    const HIDES_ON_BLUR: bool;
    /// App-wide settings made once at start (e.g. no Dock icon).
    fn configure<R: Runtime>(app: &mut App<R>);
    /// Moves the popover to where it should open.
    fn place<R: Runtime>(window: &WebviewWindow<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()>;
}

pub const TRAY_ICON_PNG: &[u8] = Current::TRAY_ICON_PNG;
pub const LEFT_CLICK_TOGGLES: bool = Current::LEFT_CLICK_TOGGLES;
pub const HIDES_ON_BLUR: bool = Current::HIDES_ON_BLUR;

pub fn configure<R: Runtime>(app: &mut App<R>) {
    Current::configure(app);
}

pub fn place<R: Runtime>(window: &WebviewWindow<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
    Current::place(window, anchor)
}

/// A rectangle in physical pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhysRect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// Where the tray icon is on screen, from a click event.
#[derive(Debug, Clone, Copy)]
pub struct TrayAnchor {
    /// The icon's rectangle; `scale` converts its logical parts to physical.
    pub rect: tauri::Rect,
}

impl From<tauri::Rect> for TrayAnchor {
    fn from(rect: tauri::Rect) -> Self {
        Self { rect }
    }
}

impl TrayAnchor {
    pub fn physical(&self, scale: f64) -> PhysRect {
        let p = self.rect.position.to_physical::<f64>(scale);
        let s = self.rect.size.to_physical::<f64>(scale);
        PhysRect { x: p.x, y: p.y, width: s.width, height: s.height }
    }
}

/// Top-left corner for a popover of `window` size so that it hangs centred
/// under the `icon`, kept inside `screen` with a small margin.
pub fn popover_origin(icon: PhysRect, window: (f64, f64), screen: PhysRect, margin: f64) -> (f64, f64) {
    let (w, h) = window;
    let centred = icon.x + icon.width / 2.0 - w / 2.0;
    let min_x = screen.x + margin;
    let max_x = (screen.x + screen.width - margin - w).max(min_x);
    let below = icon.y + icon.height + margin;
    let max_y = (screen.y + screen.height - margin - h).max(screen.y);
    (centred.clamp(min_x, max_x), below.min(max_y))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCREEN: PhysRect = PhysRect { x: 0.0, y: 0.0, width: 2880.0, height: 1800.0 };

    #[test]
    fn hangs_centred_under_the_icon() {
        let icon = PhysRect { x: 2000.0, y: 0.0, width: 44.0, height: 48.0 };
        assert_eq!(popover_origin(icon, (840.0, 1280.0), SCREEN, 8.0), (1602.0, 56.0));
    }

    #[test]
    fn stays_on_screen_near_the_right_edge() {
        let icon = PhysRect { x: 2820.0, y: 0.0, width: 44.0, height: 48.0 };
        let (x, _) = popover_origin(icon, (840.0, 1280.0), SCREEN, 8.0);
        assert_eq!(x, 2880.0 - 8.0 - 840.0);
    }

    #[test]
    fn respects_a_second_monitor_offset() {
        let right = PhysRect { x: 2880.0, y: 0.0, width: 1920.0, height: 1080.0 };
        let icon = PhysRect { x: 2890.0, y: 0.0, width: 44.0, height: 48.0 };
        let (x, y) = popover_origin(icon, (840.0, 1280.0), right, 8.0);
        // Too tall for this screen: pinned to its top rather than pushed off it.
        assert_eq!((x, y), (2888.0, 0.0));
    }
}
