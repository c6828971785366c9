"""Sending a project's enrolled devices to Apple: the project's App Store Connect API key
(keys.py), the App Store Connect client that registers a device (client.py), and the
registrations made through the project (registrations.py), over the API (routes.py)."""
