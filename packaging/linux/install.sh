#!/bin/sh
# Install the unpacked MTP Studio folder for the current user: a launcher on PATH, the
# desktop entry, the icon and the GGUF file type. Nothing is written inside the app folder.
# Uninstall: delete the four files this prints.
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${XDG_BIN_HOME:-$HOME/.local/bin}"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}"
mkdir -p "$BIN" "$DATA/applications" "$DATA/icons/hicolor/256x256/apps" "$DATA/mime/packages"
ln -sf "$HERE/mtp-studio" "$BIN/mtp-studio"
cp "$HERE/mtp-studio.png" "$DATA/icons/hicolor/256x256/apps/mtp-studio.png"
cp "$HERE/mtp-studio-gguf.xml" "$DATA/mime/packages/mtp-studio-gguf.xml"
sed "s|^Exec=mtp-studio|Exec=$HERE/mtp-studio|" "$HERE/mtp-studio.desktop" > "$DATA/applications/mtp-studio.desktop"
# refresh the desktop's caches where the tools exist (they are optional)
command -v update-mime-database >/dev/null 2>&1 && update-mime-database "$DATA/mime" >/dev/null 2>&1 || true
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$DATA/applications" >/dev/null 2>&1 || true
echo "Installed for $(id -un):"
echo "  $BIN/mtp-studio"
echo "  $DATA/applications/mtp-studio.desktop"
echo "  $DATA/icons/hicolor/256x256/apps/mtp-studio.png"
echo "  $DATA/mime/packages/mtp-studio-gguf.xml"
echo "Run 'mtp-studio', or find MTP Studio in your applications menu."
