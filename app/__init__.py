"""MTP Studio's desktop GUI (PySide6). Everything below the GUI lives in ``engine``."""
