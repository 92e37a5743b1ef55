#!/usr/bin/env python3
"""Holds an X11 key grab, as another app's global shortcut would, so the
end-to-end tests can see Headroom report a shortcut that is taken.

    DISPLAY=:99 python3 ui/e2e/grab-key.py ctrl+alt+k

Prints "grabbed" once the X server has accepted the grab, then holds it
until killed. Exits 1 if the grab is refused (someone holds it already).
Plain libX11 through ctypes: no Python packages needed.
"""
import ctypes
import ctypes.util
import signal
import sys

MASKS = {"shift": 1 << 0, "ctrl": 1 << 2, "alt": 1 << 3, "super": 1 << 6}
GRAB_MODE_ASYNC = 1


def main() -> int:
    *mods, key = sys.argv[1].lower().split("+")
    x = ctypes.cdll.LoadLibrary(ctypes.util.find_library("X11") or "libX11.so.6")
    x.XOpenDisplay.restype = ctypes.c_void_p
    x.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x.XDefaultRootWindow.restype = ctypes.c_ulong
    x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
    x.XStringToKeysym.restype = ctypes.c_ulong
    x.XStringToKeysym.argtypes = [ctypes.c_char_p]
    x.XKeysymToKeycode.restype = ctypes.c_ubyte
    x.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    x.XGrabKey.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulong, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    x.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]

    refused = []

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    def on_error(_display, _event):
        refused.append(True)  # BadAccess: another client holds the grab
        return 0

    x.XSetErrorHandler(on_error)
    display = x.XOpenDisplay(None)
    if not display:
        print("cannot open the display", file=sys.stderr)
        return 1
    keycode = x.XKeysymToKeycode(display, x.XStringToKeysym(key.encode()))
    mask = 0
    for m in mods:
        mask |= MASKS[m]
    x.XGrabKey(display, keycode, mask, x.XDefaultRootWindow(display), 1, GRAB_MODE_ASYNC, GRAB_MODE_ASYNC)
    x.XSync(display, 0)
    if refused:
        print("grab refused: another client holds it", file=sys.stderr)
        return 1
    print("grabbed", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
