"""Build files over HTTP: the signed storage address of the local backend (storage/ itself knows
nothing of HTTP)."""
