"""What testers say about a build (text, screenshots, the device's context), and the team's
triage of it: beside the build, gone with it (docs/feedback.md)."""
