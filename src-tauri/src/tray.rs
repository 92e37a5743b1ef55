//! The menu-bar icon and its menu (Open Headroom, Quit).

use tauri::image::Image;
use tauri::menu::{Menu, MenuItem, PredefinedMenuItem};
use tauri::tray::{MouseButton, MouseButtonState, TrayIconBuilder, TrayIconEvent};
use tauri::{AppHandle, Runtime};

use crate::platform::{self, TrayAnchor};
use crate::popover;

pub const TRAY_ID: &str = "headroom";
const MENU_OPEN: &str = "open";
const MENU_QUIT: &str = "quit";

pub fn install<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    let open = MenuItem::with_id(app, MENU_OPEN, "Open Headroom", true, None::<&str>)?;
    let quit = MenuItem::with_id(app, MENU_QUIT, "Quit Headroom", true, Some("CmdOrCtrl+Q"))?;
    let menu = Menu::with_items(app, &[&open, &PredefinedMenuItem::separator(app)?, &quit])?;

    TrayIconBuilder::with_id(TRAY_ID)
        .icon(Image::from_bytes(platform::TRAY_ICON_PNG)?)
        .icon_as_template(true)
        .tooltip("Headroom")
        .menu(&menu)
        // On macOS a left click toggles the popover and the menu is on the
        // right click; Linux trays send no click events, so the menu is the way in.
        .show_menu_on_left_click(!platform::LEFT_CLICK_TOGGLES)
        .on_menu_event(|app, event| {
            let result = match event.id().as_ref() {
                MENU_OPEN => popover::show(app, None),
                MENU_QUIT => {
                    app.exit(0);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!("tray menu action failed: {e}");
            }
        })
        .on_tray_icon_event(|tray, event| {
            if let TrayIconEvent::Click {
                button: MouseButton::Left, button_state: MouseButtonState::Up, rect, ..
            } = event
            {
                if platform::LEFT_CLICK_TOGGLES {
                    if let Err(e) = popover::tray_click(tray.app_handle(), TrayAnchor::from(rect)) {
                        tracing::warn!("could not toggle the popover: {e}");
                    }
                }
            }
        })
        .build(app)?;
    Ok(())
}
