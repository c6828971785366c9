"""Reaching testers: groups of testers, distributing builds to them (with a mail and an install
link each), and the record of who opened and downloaded what."""
