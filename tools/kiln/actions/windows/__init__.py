"""Actions of Windows cross builds: the MinGW compile, the Windows torch libraries, the
validation under wine64 (docs/windows.md)."""
