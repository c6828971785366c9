"""iOS, iPadOS and macOS devices that testers enroll, so that developers can put them in an
ad-hoc or development provisioning profile (and send them to Apple), and see who cannot install
a build (docs/ios-devices.md)."""
