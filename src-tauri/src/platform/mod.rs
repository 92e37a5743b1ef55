//! What differs between macOS and the rest: one trait, two small
//! implementations (`macos.rs`, `other.rs`), and the placement arithmetic
//! they share, kept pure here so it is tested on Linux too.
//!
//! Units: everything here is in logical points, the unit macOS's screen
//! coordinates (and `monitor_from_point`) use. Tauri hands out physical
//! pixels, each at the scale factor of the screen it came from, and on a
//! Mac with mixed displays (a 2× laptop beside a 1× monitor) physical
//! coordinates of different screens overlap: they are converted to points
//! per screen, here, before any comparison.

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

/// Where the tray icon is on screen, from a click event: its rectangle in
/// physical pixels at the scale factor of the screen the icon is on (what
/// the tray reports on macOS), which is not known until that screen is.
#[derive(Debug, Clone, Copy)]
pub struct TrayAnchor {
    pub rect: tauri::Rect,
}

impl From<tauri::Rect> for TrayAnchor {
    fn from(rect: tauri::Rect) -> Self {
        Self { rect }
    }
}

impl TrayAnchor {
    /// The icon's rectangle in the physical pixels it was reported in.
    pub fn pixels(&self) -> Rect {
        // A rectangle reported in logical units is already in points: scale 1
        // leaves it as it is (and `icon_in_points` divides by the screen's).
        let p = self.rect.position.to_physical::<f64>(1.0);
        let s = self.rect.size.to_physical::<f64>(1.0);
        Rect { x: p.x, y: p.y, width: s.width, height: s.height }
    }
}

/// A rectangle; the unit is said where it is used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

impl Rect {
    fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.x && x < self.x + self.width && y >= self.y && y < self.y + self.height
    }

    fn scaled(&self, by: f64) -> Rect {
        Rect { x: self.x * by, y: self.y * by, width: self.width * by, height: self.height * by }
    }
}

/// One display: its frame in points in the desktop's global space, and the
/// scale factor (physical pixels per point) of its own pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Screen {
    pub frame: Rect,
    pub scale: f64,
}

impl Screen {
    /// From a monitor as Tauri (tao) reports it: position and size in
    /// physical pixels at that monitor's own scale factor.
    pub fn from_monitor(monitor: &tauri::Monitor) -> Self {
        let (p, s) = (monitor.position(), monitor.size());
        let pixels = Rect { x: p.x.into(), y: p.y.into(), width: s.width.into(), height: s.height.into() };
        Self::from_pixels(pixels, monitor.scale_factor())
    }

    /// From a frame in physical pixels at `scale` (pixels per point).
    pub fn from_pixels(pixels: Rect, scale: f64) -> Self {
        Self { frame: pixels.scaled(1.0 / scale), scale }
    }
}

/// The screen that holds `point` (in points), like macOS's own lookup.
pub fn screen_at(point: (f64, f64), screens: &[Screen]) -> Option<Screen> {
    screens.iter().copied().find(|s| s.frame.contains(point))
}

/// Gap between the menu bar and the popover, in points.
pub const POPOVER_GAP: f64 = 6.0;

/// Top-left corner (points) for a popover of `window` size (points) so that
/// it hangs centred under the `icon` (points), kept inside `screen` (points)
/// with a small margin.
pub fn popover_origin(icon: Rect, window: (f64, f64), screen: Rect, margin: f64) -> (f64, f64) {
    let (w, h) = window;
    let centred = icon.x + icon.width / 2.0 - w / 2.0;
    let min_x = screen.x + margin;
    let max_x = (screen.x + screen.width - margin - w).max(min_x);
    let below = icon.y + icon.height + margin;
    let max_y = (screen.y + screen.height - margin - h).max(screen.y);
    (centred.clamp(min_x, max_x), below.min(max_y))
}

/// Where the popover (`window` in points) opens under a tray icon reported
/// at `icon_px`, given where the pointer is, in points (it is on the icon:
/// the click was), and the screens. The pointer finds the screen; that
/// screen's scale factor turns the icon's pixels into points. `None` when
/// the pointer is on no screen (then the popover stays where it was).
pub fn popover_position(
    icon_px: Rect,
    pointer: (f64, f64),
    window: (f64, f64),
    screens: &[Screen],
) -> Option<(f64, f64)> {
    let screen = screen_at(pointer, screens)?;
    let icon = icon_px.scaled(1.0 / screen.scale);
    Some(popover_origin(icon, window, screen.frame, POPOVER_GAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAPTOP: Rect = Rect { x: 0.0, y: 0.0, width: 1512.0, height: 982.0 };
    const POPOVER: (f64, f64) = (420.0, 640.0);

    /// A monitor as tao reports it on macOS: position and size are the
    /// screen's points times its own scale factor.
    fn monitor(frame: Rect, scale: f64) -> Screen {
        Screen::from_pixels(frame.scaled(scale), scale)
    }

    #[test]
    fn hangs_centred_under_the_icon() {
        let icon = Rect { x: 1000.0, y: 0.0, width: 22.0, height: 24.0 };
        assert_eq!(popover_origin(icon, POPOVER, LAPTOP, 4.0), (801.0, 28.0));
    }

    #[test]
    fn stays_on_screen_near_the_right_edge() {
        let icon = Rect { x: 1480.0, y: 0.0, width: 22.0, height: 24.0 };
        let (x, _) = popover_origin(icon, POPOVER, LAPTOP, 4.0);
        assert_eq!(x, 1512.0 - 4.0 - 420.0);
    }

    #[test]
    fn too_tall_for_its_screen_it_is_pinned_to_the_top_not_pushed_off() {
        let short = Rect { x: 1512.0, y: 0.0, width: 1280.0, height: 600.0 };
        let icon = Rect { x: 1520.0, y: 0.0, width: 22.0, height: 24.0 };
        assert_eq!(popover_origin(icon, POPOVER, short, 4.0), (1516.0, 0.0));
    }

    /// A 2× laptop (main display, left) beside a 1× monitor (right). The
    /// tray reports the icon in pixels at the scale of the screen it is on;
    /// tao reports the pointer in pixels at the main display's scale.
    #[test]
    fn two_displays_with_mixed_scale_factors_open_under_the_icon_that_was_clicked() {
        let monitor_1x = Rect { x: 1512.0, y: 0.0, width: 1920.0, height: 1080.0 };
        let screens = [monitor(LAPTOP, 2.0), monitor(monitor_1x, 1.0)];
        // In pixels the laptop spans 0..3024 and the monitor 1512..3432: they overlap.
        assert_eq!((screens[0].frame, screens[1].frame), (LAPTOP, monitor_1x), "each by its own scale");

        // The icon on the laptop at 1400 pt: reported as 2800 px. Taken as
        // points (the old placement), 2800 lies on the 1× monitor.
        let icon_px = Rect { x: 2800.0, y: 0.0, width: 44.0, height: 48.0 };
        assert_eq!(screen_at((icon_px.x, icon_px.y), &screens).map(|s| s.scale), Some(1.0), "the unit bug");
        let pointer = (1411.0, 12.0);
        let (x, y) = popover_position(icon_px, pointer, POPOVER, &screens).expect("on a screen");
        assert!(LAPTOP.contains((x, y)) && x + POPOVER.0 <= LAPTOP.width, "({x}, {y}) is on the laptop");
        assert_eq!((x, y), (1512.0 - POPOVER_GAP - 420.0, 24.0 + POPOVER_GAP));

        // The icon on the 1× monitor at 3000 pt: reported as 3000 px.
        let icon_px = Rect { x: 3000.0, y: 0.0, width: 22.0, height: 24.0 };
        let (x, y) = popover_position(icon_px, (3011.0, 12.0), POPOVER, &screens).expect("on a screen");
        assert_eq!((x, y), (3011.0 - 210.0, 24.0 + POPOVER_GAP));
    }

    #[test]
    fn a_2x_monitor_right_of_a_1x_main_display() {
        let main = Rect { x: 0.0, y: 0.0, width: 1920.0, height: 1080.0 };
        let retina = Rect { x: 1920.0, y: 0.0, width: 1512.0, height: 982.0 };
        let screens = [monitor(main, 1.0), monitor(retina, 2.0)];
        // The icon at 2500 pt on the 2× monitor: 5000 px, beyond both screens as points.
        let icon_px = Rect { x: 5000.0, y: 0.0, width: 44.0, height: 48.0 };
        let (x, y) = popover_position(icon_px, (2511.0, 12.0), POPOVER, &screens).expect("on a screen");
        assert_eq!((x, y), (2511.0 - 210.0, 24.0 + POPOVER_GAP));
        assert!(retina.contains((x, y)));
    }

    #[test]
    fn a_display_above_the_main_one_has_negative_coordinates() {
        let above = Rect { x: 0.0, y: -1080.0, width: 1920.0, height: 1080.0 };
        let screens = [monitor(LAPTOP, 2.0), monitor(above, 1.0)];
        let icon_px = Rect { x: 1000.0, y: -1080.0, width: 22.0, height: 24.0 };
        let (x, y) = popover_position(icon_px, (1011.0, -1070.0), POPOVER, &screens).expect("on a screen");
        assert_eq!((x, y), (1011.0 - 210.0, -1080.0 + 24.0 + POPOVER_GAP));
    }

    #[test]
    fn a_pointer_on_no_screen_leaves_the_popover_where_it_was() {
        let screens = [monitor(LAPTOP, 2.0)];
        let icon_px = Rect { x: 100.0, y: 0.0, width: 44.0, height: 48.0 };
        assert_eq!(popover_position(icon_px, (5000.0, 5000.0), POPOVER, &screens), None);
        assert_eq!(popover_position(icon_px, (10.0, 10.0), POPOVER, &[]), None);
    }
}
