"""The web console: server-rendered pages for people, beside the API."""
