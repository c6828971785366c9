"""Release channels: named sets of an application's builds (`default`, `beta`, ...) that the
update check (buildbay.updates) offers from."""
