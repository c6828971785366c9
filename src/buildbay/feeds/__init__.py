"""The desktop updaters' feeds (issue 39): electron-updater's generic provider, Sparkle's
appcast and Windows App Installer's file, per application and channel, public with the
application's update key (docs/desktop.md)."""
